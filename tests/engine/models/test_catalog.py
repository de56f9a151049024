"""The model catalog: a fake Hugging Face cache listed through scan_cache_dir, facts from metadata alone,
memory estimates and the check in load_model (engine.models.memory), draft compatibility on real tokenizers
in plain words (engine.models.pairing), and `specscope models list/check`."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save

from engine.host import free_memory
from engine.models import catalog, gguf_facts, memory, pairing, sources
from engine.cli.main import main
from engine.core.errors import OutOfMemoryError
from engine.core.compat import TokenizerDifference, explain_mismatch, tokenizer_difference
from engine.models.load import load_model, load_tokenizer_only
from engine_testkit import build_tiny_tokenizer, save_tiny_model

COMMIT = "c0ffee" + "0" * 34


def build_other_tokenizer():
    """A tokenizer of another family (a word-level vocabulary), trained here on other text."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(["completely different words for another vocabulary entirely"] * 3,
                            trainers.WordLevelTrainer(special_tokens=["[UNK]", "<s>", "</s>"]))
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="[UNK]")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """target (4 layers), draft (2 layers, same tokenizer), stranger (1 layer, another tokenizer)."""
    root = tmp_path_factory.mktemp("catalog-models")
    tok = build_tiny_tokenizer()
    return {"target": save_tiny_model(root / "target", tok, seed=0),
            "draft": save_tiny_model(root / "draft", tok, seed=1, num_hidden_layers=2),
            "stranger": save_tiny_model(root / "stranger", build_other_tokenizer(), seed=2, num_hidden_layers=1)}


def add_cached_repo(cache: Path, repo_id: str, files: dict[str, bytes], ref: str | None = "main") -> Path:
    """The hub cache's layout: blobs by hash, snapshots/<commit>/ symlinks to them, refs/<ref>."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / COMMIT
    for name, data in files.items():
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    if ref:
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / ref).write_text(COMMIT)
    return snapshot


def write_gguf(path: Path) -> int:
    import gguf
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_context_length(512)
    writer.add_embedding_length(32)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list([f"t{i}" for i in range(40)])
    writer.add_tensor("token_embd.weight", np.zeros((40, 32), np.float32))
    writer.add_tensor("output_norm.weight", np.ones(32, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return 40 * 32 + 32


@pytest.fixture
def hf_cache(tmp_path, monkeypatch, folders):
    cache = tmp_path / "hf" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    add_cached_repo(cache, "acme/tiny-chat", {p.name: p.read_bytes() for p in folders["target"].iterdir()})
    config = (folders["target"] / "config.json").read_bytes()
    shard = save({"w": np.zeros((4, 4), np.float32)})
    index = json.dumps({"weight_map": {"w": "model-00001-of-00002.safetensors",
                                       "v": "model-00002-of-00002.safetensors"}}).encode()
    add_cached_repo(cache, "acme/half-done", {"config.json": config, "model.safetensors.index.json": index,
                                              "model-00001-of-00002.safetensors": shard})
    add_cached_repo(cache, "acme/just-started", {"model-00001-of-00002.safetensors": shard}, ref=None)
    gguf_file = cache.parent / "tiny.gguf"
    write_gguf(gguf_file)
    add_cached_repo(cache, "acme/tiny-GGUF", {"tiny.Q8_0.gguf": gguf_file.read_bytes()})
    return cache


def test_lists_the_fake_hf_cache_and_added_paths(hf_cache, folders, tmp_path):
    gguf_file = tmp_path / "mine.gguf"
    n_gguf = write_gguf(gguf_file)
    entries = catalog.list_models([folders["draft"], gguf_file, tmp_path / "gone"], include_default=False)
    by_label = {e.label: e for e in entries}
    assert list(by_label) == ["acme/half-done", "acme/just-started", "acme/tiny-chat", "acme/tiny-GGUF/tiny.Q8_0.gguf",
                              "draft", "mine", "gone"]
    chat = by_label["acme/tiny-chat"]
    from safetensors.torch import load_file
    weights = load_file(folders["target"] / "model.safetensors")
    assert chat.usable and chat.kind == "hub-cache" and chat.name == "acme/tiny-chat" and chat.revision == COMMIT
    assert chat.architecture == "LlamaForCausalLM" and chat.model_type == "llama"
    assert chat.n_parameters == sum(t.numel() for t in weights.values()) and chat.dtype == "float32"
    assert (chat.tokenizer_family, chat.vocab_size) == ("BPE", 400)
    assert (chat.n_layers, chat.n_kv_heads, chat.head_dim, chat.context_length) == (4, 2, 16, 256)
    assert chat.size_bytes == sum(p.stat().st_size for p in folders["target"].iterdir())
    assert chat.weights_format == "safetensors" and not chat.needs_remote_code
    half = by_label["acme/half-done"]
    assert not half.usable and "1 of 2 weight files are missing" in half.problem
    assert not by_label["acme/just-started"].usable
    cached_gguf = by_label["acme/tiny-GGUF/tiny.Q8_0.gguf"]
    assert cached_gguf.usable and cached_gguf.name.endswith("tiny.Q8_0.gguf")
    mine = by_label["mine"]
    assert (mine.kind, mine.architecture, mine.n_parameters, mine.vocab_size) == ("gguf", "llama", n_gguf, 40)
    assert (mine.n_layers, mine.n_kv_heads, mine.head_dim, mine.context_length) == (2, 2, 8, 512)
    assert mine.tokenizer_family == "BPE" and mine.dtype == "F32"
    draft = by_label["draft"]
    assert draft.kind == "folder" and draft.n_layers == 2 and draft.usable
    assert "does not exist" in by_label["gone"].problem
    # the cached hub id is loadable by name from HF_HUB_CACHE, and describe_name finds the same entry
    assert len(load_tokenizer_only("acme/tiny-chat")) == 400
    assert catalog.describe_name("acme/tiny-chat") == chat


def test_hf_home_is_honoured(hf_cache, monkeypatch):
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(hf_cache.parent))
    assert sources.hub_cache_dir() == hf_cache
    assert "acme/tiny-chat" in {e.repo_id for e in catalog.list_hub_cache()}
    monkeypatch.setenv("HF_HOME", str(hf_cache.parent / "elsewhere"))
    assert catalog.list_hub_cache() == []  # no cache there: nothing, no error


def test_memory_estimate_counts_weights_and_kv_cache(folders):
    entry = catalog.describe_path(folders["target"])
    fp32 = memory.estimate_memory(entry, "cpu", "float32", context_tokens=100)
    assert fp32.weights_bytes == entry.n_parameters * 4
    assert fp32.kv_cache_bytes == 2 * 4 * 2 * 16 * 4 * 100  # 2 × layers × kv heads × head dim × bytes × tokens
    assert fp32.total_bytes > fp32.weights_bytes + fp32.kv_cache_bytes
    bf16 = memory.estimate_memory(entry, "cpu", "bf16", context_tokens=100)
    assert (bf16.dtype, bf16.weights_bytes, bf16.kv_cache_bytes) == ("bfloat16", fp32.weights_bytes // 2,
                                                                     fp32.kv_cache_bytes // 2)
    assert memory.estimate_memory(entry, "cpu", "float32").context_tokens == 256  # the model's context
    free = free_memory("cpu")
    assert isinstance(free, int) and free > 0 and fp32.free_bytes is not None and fp32.fits


def test_memory_check_refuses_before_loading(folders, monkeypatch):
    entry = catalog.describe_path(folders["target"], label="Tiny target")
    monkeypatch.setattr(memory, "free_memory", lambda device: 1000)
    with pytest.raises(OutOfMemoryError, match=r"Tiny target needs about .* of RAM .* only 1.0 KB is free"):
        memory.memory_check(entry, "cpu", "float32")
    with pytest.raises(OutOfMemoryError, match="pick a smaller model"):
        load_model(str(folders["target"]), device="cpu", dtype="float32")
    monkeypatch.setenv("SPECSCOPE_SKIP_MEMORY_CHECK", "1")
    assert load_model(str(folders["target"]), device="cpu", dtype="float32").n_layers == 4
    monkeypatch.setattr(memory, "free_memory", lambda device: None)  # unknown: never a reason to refuse
    monkeypatch.delenv("SPECSCOPE_SKIP_MEMORY_CHECK")
    assert memory.memory_check(entry, "cpu", "float32").fits is None


def test_the_builtin_model_is_described_and_not_refused():
    entry = catalog.describe_default()
    if entry.problem and "not installed" in entry.problem:
        pytest.skip(entry.problem)
    assert entry.usable and entry.name == "default" and entry.kind == "built-in"
    assert 130e6 < entry.n_parameters < 140e6 and entry.vocab_size == 49152 and entry.n_layers == 30
    estimate = memory.memory_check(entry, "cpu", "float32")
    assert estimate.weights_bytes == entry.n_parameters * 4 and estimate.fits


def test_real_tokenizers_mismatch_in_plain_words(folders):
    default_tok = load_tokenizer_only("default")
    tiny_tok = build_tiny_tokenizer()
    difference = tokenizer_difference(default_tok, tiny_tok)
    assert difference and difference.kind == "vocab-size" and "vocabulary sizes differ" in str(difference)
    words = explain_mismatch(difference)
    assert words.startswith("These two models split text into different pieces: the target knows 49,152 pieces "
                            "and the draft 400")
    assert "same family" in words
    other = tokenizer_difference(tiny_tok, build_other_tokenizer())
    assert "the target uses a BPE vocabulary and the draft a WordLevel one" in explain_mismatch(other)


@pytest.mark.parametrize("difference, message, fragment", [
    (TokenizerDifference("token", "ab", "cd", token_id=17), "token 17 differs: target 'ab', draft 'cd'",
     "piece number 17 is 'ab' for the target but 'cd' for the draft"),
    (TokenizerDifference("bos", 1, 0, target_text="<s>", draft_text="<|endoftext|>"),
     "BOS tokens differ: target 1 ('<s>'), draft 0 ('<|endoftext|>')",
     "mark the start of a text with different tokens (target 1 ('<s>'), draft 0 ('<|endoftext|>'))"),
    (TokenizerDifference("eos", 2, 0, target_text="</s>", draft_text="x"),
     "EOS tokens differ: target 2 ('</s>'), draft 0 ('x')", "mark the end of a text"),
    (TokenizerDifference("vocab-size", 49152, 400),
     "vocabulary sizes differ by 48752 (target 49152, draft 400; at most 128 allowed)",
     "the target knows 49,152 pieces and the draft 400 (48,752 apart)"),
    (TokenizerDifference("vocab-kind", "BPE", "Unigram"), "vocabulary types differ: target BPE, draft Unigram",
     "the target uses a BPE vocabulary and the draft a Unigram one"),
])
def test_explain_mismatch_shapes(difference, message, fragment):
    assert str(difference) == message
    words = explain_mismatch(difference)
    assert words.startswith("These two models split text into different pieces: ") and fragment in words
    assert words.endswith("Llama-3.2-1B for Llama-3.1-8B).")


def test_drafts_are_smaller_the_targets_tokenizer_first_then_another(folders):
    target, draft, stranger = (catalog.describe_path(folders[k]) for k in ("target", "draft", "stranger"))
    broken = catalog.describe_path(folders["draft"].parent / "nope")
    found = pairing.compatible_drafts(target, [target, stranger, draft, broken])
    # the stranger (another tokenizer) comes after the draft of the target's own, though listed before it
    assert found == [pairing.DraftCandidate(draft, True), pairing.DraftCandidate(stranger, False)]
    assert pairing.compatible_drafts(draft, [target]) == []  # same tokenizer, but bigger: no speed-up
    assert pairing.compatible_drafts(draft, [stranger]) == [pairing.DraftCandidate(stranger, False)]
    assert pairing.draft_difference(target, stranger)


def test_a_draft_of_another_tokenizer_that_cannot_be_loaded_is_left_out(folders, tmp_path):
    """The vocabulary sizes alone tell the tokenizers apart; the draft's own must still load to draft through
    text."""
    unreadable = tmp_path / "unreadable"
    shutil.copytree(folders["stranger"], unreadable)
    (unreadable / "tokenizer.json").write_text("{not json")
    target, entry = catalog.describe_path(folders["target"]), catalog.describe_path(unreadable)
    assert entry.usable and entry.vocab_size != target.vocab_size  # decided by size, without loading
    assert pairing.compatible_drafts(target, [entry]) == []


def test_cli_models_list_and_check(hf_cache, folders, capsys):
    assert main(["models", "list", "--json", "--device", "cpu", "--path", str(folders["draft"])]) == 0
    rows = json.loads(capsys.readouterr().out)
    names = [r["name"] for r in rows]
    assert names[0] == "default" and "acme/tiny-chat" in names and str(folders["draft"]) in names
    chat = rows[names.index("acme/tiny-chat")]
    assert chat["usable"] and chat["architecture"] == "LlamaForCausalLM" and chat["vocab_size"] == 400
    assert chat["memory"]["device"] == "cpu" and chat["memory"]["total_bytes"] > chat["memory"]["weights_bytes"]
    assert main(["models", "list", "--device", "cpu"]) == 0
    table = capsys.readouterr().out
    assert "acme/tiny-chat" in table and "LlamaForCausalLM" in table and "not finished" in table
    assert main(["models", "check", str(folders["target"]), str(folders["draft"])]) == 0
    assert "compatible" in capsys.readouterr().out
    assert main(["models", "check", str(folders["target"]), str(folders["stranger"])]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("different tokenizers: cross-tokenizer drafting (slower per draft, exact): ")
    assert out[1].startswith("They share ") and "tokens (spelled the same in both; target " in out[1]
    assert "sampling is refused" in out[1]  # a ten-word vocabulary shares too few pieces with a BPE
    shutil.rmtree(hf_cache)
    assert main(["models", "list", "--json"]) == 0  # no cache at all is fine


@pytest.mark.model
def test_gguf_facts_from_our_header_reader_match_gguf_py(tmp_path, monkeypatch):
    """The facts come from engine.backends.gguf_file's header walk (the vocabulary counted, not decoded): the
    same figures as gguf-py's own reader gives for the built-in model."""
    from gguf import GGMLQuantizationType, GGUFReader

    from engine.models.sources import default_model_gguf
    monkeypatch.setenv("SPECSCOPE_CACHE_DIR", str(tmp_path))  # nothing cached: read the file
    path = default_model_gguf()
    facts = gguf_facts.gguf_facts(path)
    reader = GGUFReader(str(path), "r")
    by_type: dict[str, int] = {}
    for tensor in reader.tensors:
        name = GGMLQuantizationType(tensor.tensor_type).name
        by_type[name] = by_type.get(name, 0) + int(tensor.n_elements)
    assert facts["n_parameters"] == sum(by_type.values()) and facts["dtype"] == max(by_type, key=by_type.get)
    assert facts["vocab_size"] == len(reader.fields["tokenizer.ggml.tokens"].data)
    assert facts["n_layers"] == int(reader.fields["llama.block_count"].contents())
    assert facts["context_length"] == int(reader.fields["llama.context_length"].contents())
