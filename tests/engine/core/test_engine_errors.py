"""Every bad input ends in a typed exception with a clear message, before any work is done."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch

from engine.core.config import SamplingConfig, SpecConfig, parse_spec
from engine.core.errors import (ConfigError, DeviceError, ModelLoadError, PromptTooLongError, SpecScopeError,
                           TokenizerMismatchError)
from engine.core.compat import check_tokenizers, tokenizer_difference
from engine.models.load import load_model
from engine.backends.device import resolve_device
from engine.models.sources import default_model_gguf
from engine.runtime import local_engine
from engine_testkit import save_tiny_model


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    """GGUF conversions of broken files must not touch the shared cache."""
    monkeypatch.setenv("SPECSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


# ------------------------------------------------------------------ model paths and files

def test_missing_path(tmp_path):
    with pytest.raises(ModelLoadError, match="model not found"):
        load_model(str(tmp_path / "no-such-model"), device="cpu")


def test_empty_model_name():
    with pytest.raises(ModelLoadError, match="no model given"):
        load_model("  ", device="cpu")


def test_folder_without_config(tmp_path):
    (tmp_path / "weights.safetensors").write_bytes(b"\0" * 16)
    with pytest.raises(ModelLoadError, match="no config.json"):
        load_model(str(tmp_path), device="cpu")


def test_folder_with_a_broken_config(tmp_path):
    (tmp_path / "config.json").write_text("{ not json")
    with pytest.raises(ModelLoadError, match="could not be loaded"):
        load_model(str(tmp_path), device="cpu")


def test_folder_with_config_but_no_weights(tmp_path, tiny_dir):
    for name in os.listdir(tiny_dir):
        if not name.endswith(".safetensors"):
            shutil.copy(tiny_dir / name, tmp_path / name)
    with pytest.raises(ModelLoadError, match="could not be loaded"):
        load_model(str(tmp_path), device="cpu")


def test_file_that_is_not_gguf(tmp_path):
    path = tmp_path / "model.bin"
    path.write_bytes(b"\x80\x04pickle")
    with pytest.raises(ModelLoadError, match=r"not a \.gguf model"):
        load_model(str(path), device="cpu")


@pytest.mark.parametrize("content", [b"", b"garbage, not a model" * 50, b"GGU"], ids=["empty", "garbage", "short"])
def test_gguf_without_magic(tmp_path, private_cache, content):
    path = tmp_path / "broken.gguf"
    path.write_bytes(content)
    with pytest.raises(ModelLoadError, match="GGUF magic"):
        load_model(str(path), device="cpu")


@pytest.mark.parametrize("content", [
    b"GGUF" + bytes(range(256)) * 8,  # an impossible version
    b"GGUF\x03\x00\x00\x00" + b"\x00" * 64,  # v3 header, nothing in it
    b"GGUF\x03\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\x7f\xff\xff\xff\xff\xff\xff\xff\x7f",  # absurd counts
], ids=["bad-version", "empty-v3", "absurd-counts"])
def test_gguf_with_magic_but_garbage(tmp_path, private_cache, content):
    path = tmp_path / "broken.gguf"
    path.write_bytes(content)
    with pytest.raises(ModelLoadError, match="could not be read as a GGUF model"):
        load_model(str(path), device="cpu")
    assert not any((private_cache / "converted").glob("broken*/config.json"))


@pytest.mark.model
@pytest.mark.parametrize("size", [64, 200_000, 3_000_000], ids=["in-header", "in-metadata", "in-tensors"])
def test_truncated_gguf(tmp_path, private_cache, size):
    source = default_model_gguf()
    with open(source, "rb") as f:
        head = f.read(size)
    path = tmp_path / "truncated.gguf"
    path.write_bytes(head)
    with pytest.raises(ModelLoadError, match="truncated.gguf"):
        load_model(str(path), device="cpu")
    assert not any((private_cache / "converted").glob("truncated*/config.json"))


def test_hub_id_not_in_the_local_cache():
    with pytest.raises(ModelLoadError, match="not in the local Hugging Face cache"):
        load_model("specscope-tests-nobody/no-such-model-xyz", device="cpu")


# ------------------------------------------------------------------ device and dtype

def test_cuda_where_there_is_none(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(DeviceError, match="CUDA was asked for"):
        resolve_device("cuda")
    with pytest.raises(DeviceError, match="CUDA"):
        resolve_device("cuda:1")


def test_cuda_where_there_is_none_when_loading(monkeypatch, tiny_dir):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(DeviceError, match="use --device cpu"):
        load_model(str(tiny_dir), device="cuda")


def test_unknown_device_and_dtype(tiny_dir):
    with pytest.raises(DeviceError, match="unknown device"):
        resolve_device("tpu")
    with pytest.raises(ModelLoadError, match="unknown dtype"):
        load_model(str(tiny_dir), device="cpu", dtype="float8")


# ------------------------------------------------------------------ settings

@pytest.mark.parametrize("method", ["medusa", "", "Prompt-Lookup"])
def test_unknown_method(method):
    with pytest.raises(ConfigError, match="unknown method"):
        SpecConfig(method)
    with pytest.raises(ConfigError, match="unknown method"):
        parse_spec(f"{method}:k=3")


@pytest.mark.parametrize("k", [0, -1, 65, 1000, 2.5, "4"])
def test_k_out_of_range(k):
    with pytest.raises(ConfigError, match="k must be an integer from 1 to 64"):
        SpecConfig("prompt-lookup", k=k)


@pytest.mark.parametrize("k", [1, 64])
def test_k_bounds_are_allowed(k):
    assert SpecConfig("prompt-lookup", k=k).k == k


def test_bad_spec_strings():
    with pytest.raises(ConfigError, match="bad setting"):
        parse_spec("prompt-lookup:speed=11")
    with pytest.raises(ConfigError, match="must be an integer"):
        parse_spec("prompt-lookup:k=four")
    assert parse_spec("draft-model:k=5,draft=default") == SpecConfig("draft-model", k=5, draft="default")


def test_draft_model_needs_a_draft():
    with pytest.raises(ConfigError, match="needs a draft model"):
        SpecConfig("draft-model")


@pytest.mark.parametrize("layers", [0, -3])
def test_early_exit_layers_below_one(layers):
    with pytest.raises(ConfigError, match="layers must be ≥ 1"):
        SpecConfig("early-exit", params={"layers": layers})


@pytest.mark.parametrize("layers", [4, 5, 100])
def test_early_exit_layers_beyond_the_model(tiny_engine, layers):
    with pytest.raises(ConfigError, match=r"from 1 to 3 for this model \(4 layers\)"):
        tiny_engine.generate("hello", spec=SpecConfig("early-exit", params={"layers": layers}))


def test_early_exit_layers_at_the_bounds_run(tiny_engine):
    for layers in (1, 3):
        events = list(tiny_engine.generate("hello", spec=SpecConfig("early-exit", k=2, params={"layers": layers}),
                                           max_new_tokens=3))
        assert events[-1].stop_reason in ("max-new-tokens", "eos")


@pytest.mark.parametrize("temperature", [-0.1, -1, float("nan")])
def test_temperature_below_zero(temperature):
    with pytest.raises(ConfigError, match="temperature must be ≥ 0"):
        SamplingConfig(temperature=temperature)


@pytest.mark.parametrize("top_p", [0.0, -0.5, 1.0001, 2, float("nan")])
def test_top_p_outside_zero_one(top_p):
    with pytest.raises(ConfigError, match=r"top-p must be in \(0, 1\]"):
        SamplingConfig(temperature=1.0, top_p=top_p)


def test_top_k_below_zero():
    with pytest.raises(ConfigError, match="top-k"):
        SamplingConfig(top_k=-1)


@pytest.mark.parametrize("method", ["none", "prompt-lookup", "early-exit"])
def test_draft_given_with_a_method_that_takes_none(method):
    spec = SpecConfig(method, draft="default")
    assert spec.draft is None
    assert spec.warnings == (f"a draft model is ignored by method {method}",)


def test_layers_given_with_a_method_that_takes_none():
    spec = SpecConfig("prompt-lookup", params={"layers": 3})
    assert spec.param("layers") is None and spec.warnings == ("--layers is ignored by method prompt-lookup",)


def test_warnings_reach_the_start_event(tiny_engine):
    events = list(tiny_engine.generate("hello", spec=SpecConfig("prompt-lookup", draft="x"), max_new_tokens=2))
    assert events[0].warnings == ("a draft model is ignored by method prompt-lookup",)


# ------------------------------------------------------------------ prompts

@pytest.mark.parametrize("conversation", ["", "   \n ", [], [{"role": "system", "content": "Be brief."}],
                                          [{"role": "user", "content": " "}]],
                         ids=["empty", "blank", "no-messages", "system-only", "blank-user"])
def test_empty_prompt(tiny_engine, conversation):
    with pytest.raises(ConfigError, match="the prompt is empty"):
        tiny_engine.generate(conversation)  # raised on the call, before any event


def test_empty_prompt_ids(tiny_engine):
    with pytest.raises(ConfigError, match="the prompt is empty"):
        tiny_engine.generate_ids([])


def test_unknown_role(tiny_engine):
    with pytest.raises(ConfigError, match="unknown chat role 'robot'"):
        tiny_engine.generate([{"role": "robot", "content": "hi"}])


@pytest.mark.parametrize("max_new_tokens", [0, -5])
def test_max_new_tokens_below_one(tiny_engine, max_new_tokens):
    with pytest.raises(ConfigError, match="max new tokens must be ≥ 1"):
        tiny_engine.generate("hello", max_new_tokens=max_new_tokens)


def test_prompt_beyond_the_context(tiny_engine, tiny_model):
    context = tiny_model.context_length
    with pytest.raises(PromptTooLongError, match=f"{context} tokens but .* holds {context}"):
        tiny_engine.generate_ids([5] * context)
    with pytest.raises(PromptTooLongError, match="shorten it or start a new chat"):
        tiny_engine.generate("word " * (context * 2))
    # one token short of the context still fits one new token
    events = list(tiny_engine.generate_ids([5] * (context - 1), max_new_tokens=4))
    assert events[-1].stop_reason in ("context-full", "eos") and len(events[-1].output_ids) == 1


# ------------------------------------------------------------------ tokenizer compatibility

@pytest.fixture(scope="module")
def wordlevel_draft_dir(tmp_path_factory, tiny_tokenizer):
    """A tiny model whose tokenizer is a word-level one of the same size: not usable as a draft."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {"<|endoftext|>": 0, "<|im_start|>": 1, "<|im_end|>": 2, "[UNK]": 3}
    vocab.update({f"w{i}": i for i in range(4, len(tiny_tokenizer))})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|im_end|>",
                                   unk_token="[UNK]")
    return save_tiny_model(tmp_path_factory.mktemp("wordlevel-draft"), fast, seed=3)


def test_draft_with_another_vocabulary_type_drafts_through_text(tiny_engine, wordlevel_draft_dir):
    """Not refused: cross-tokenizer drafting (engine.drafters.cross_tokenizer), greedy output the target's own;
    sampling with it is refused, in one line, for the shared vocabulary is too small."""
    spec = SpecConfig("draft-model", k=3, draft=str(wordlevel_draft_dir))
    plain = list(tiny_engine.generate("hello", max_new_tokens=8))[-1]
    crossed = list(tiny_engine.generate("hello", spec=spec, max_new_tokens=8))[-1]
    assert crossed.output_ids == plain.output_ids
    with pytest.raises(ConfigError, match="cross-tokenizer drafting can't sample here: the two tokenizers share") \
            as info:
        list(tiny_engine.generate("hello", spec=spec, sampling=SamplingConfig(temperature=1.0, seed=0),
                                  max_new_tokens=4))
    assert "\n" not in str(info.value)


def test_tokenizer_difference_of_identical_tokenizers_is_none(tiny_tokenizer):
    assert tokenizer_difference(tiny_tokenizer, tiny_tokenizer) is None
    check_tokenizers(tiny_tokenizer, tiny_tokenizer)


@pytest.fixture(scope="module")
def default_tokenizer(default_model):
    return default_model.tokenizer


@pytest.fixture(scope="module")
def swapped_tokenizer(tmp_path_factory, default_model):
    """The built-in tokenizer with the tokens of ids 1000 and 1001 swapped: same size, same type."""
    from transformers import AutoTokenizer
    folder = tmp_path_factory.mktemp("swapped-tokenizer")
    default_model.tokenizer.save_pretrained(folder)
    data = json.loads((folder / "tokenizer.json").read_text())
    vocab = data["model"]["vocab"]
    by_id = {i: t for t, i in vocab.items()}
    a, b = by_id[1000], by_id[1001]
    vocab[a], vocab[b] = 1001, 1000
    (folder / "tokenizer.json").write_text(json.dumps(data))
    return AutoTokenizer.from_pretrained(folder), a, b


@pytest.mark.model
def test_builtin_vs_a_different_vocabulary_size(default_tokenizer, tiny_tokenizer):
    difference = tokenizer_difference(default_tokenizer, tiny_tokenizer)
    assert (difference.kind, difference.target, difference.draft) == \
        ("vocab-size", len(default_tokenizer), len(tiny_tokenizer))
    assert str(difference).startswith("vocabulary sizes differ")
    assert f"target {len(default_tokenizer)}, draft {len(tiny_tokenizer)}" in str(difference)
    with pytest.raises(TokenizerMismatchError, match="their tokenizers differ .vocabulary sizes differ") as info:
        check_tokenizers(default_tokenizer, tiny_tokenizer, "Target", "Draft")
    assert info.value.difference == difference


@pytest.mark.model
def test_builtin_vs_a_swapped_token_names_the_first_difference(default_tokenizer, swapped_tokenizer):
    tokenizer, a, b = swapped_tokenizer
    difference = tokenizer_difference(default_tokenizer, tokenizer)
    assert (difference.kind, difference.token_id, difference.target, difference.draft) == ("token", 1000, a, b)
    assert str(difference) == f"token 1000 differs: target {a!r}, draft {b!r}"
    with pytest.raises(TokenizerMismatchError) as info:
        check_tokenizers(default_tokenizer, tokenizer, "SmolLM2", "my-draft")
    assert str(info.value).startswith("my-draft cannot draft for SmolLM2")
    assert "token 1000 differs" in str(info.value)


@pytest.mark.model
def test_builtin_engine_drafts_through_text_with_a_draft_of_another_tokenizer(default_model, tiny_dir):
    engine = local_engine(default_model)
    plain = list(engine.generate("hello", max_new_tokens=8))[-1]
    started, *_, crossed = engine.generate("hello", spec=SpecConfig("draft-model", k=3, draft=str(tiny_dir)),
                                           max_new_tokens=8)
    assert crossed.output_ids == plain.output_ids and "cross-tokenizer drafting" in " ".join(started.notes)


def test_every_error_is_a_specscope_error():
    for error in (ConfigError, ModelLoadError, TokenizerMismatchError, PromptTooLongError, DeviceError):
        assert issubclass(error, SpecScopeError)
    assert issubclass(ConfigError, ValueError)
