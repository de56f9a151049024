"""Method `mtp` on a tiny DeepSeek-V3 built here with 4 chained MTP layers saved in the released checkpoint
layout and loaded back through transformers' MtpModel: greedy output equals plain decoding for k = 1…4 and
transformers' own generate(use_mtp=True); a rejection at position 0 and a fully accepted draft both occur;
sampling stays lossless; a model without MTP layers, k beyond them, or a checkpoint without their weights is
refused with the reason."""

from __future__ import annotations

import pytest
import torch

from engine.core.config import SamplingConfig, SpecConfig, check_backend
from engine.core.errors import ConfigError
from engine.drafters.mtp import check_mtp
from engine.models.load import load_model
from engine.runtime import local_engine
from engine_testkit import check_round_invariants, device_under_test, run
from selfdraft_testkit import MTP_LAYERS, mtp_weight_patterns, save_mtp_model

PROMPT = "The quick brown fox"
N_NEW = 24


@pytest.fixture(scope="module", autouse=True)
def tiny_mtp_patterns():
    """transformers looks for DeepSeek-V3's MTP weights at the released model's layer index (61); the tiny
    model keeps them right after its 2 layers."""
    from transformers import DeepseekV3ForCausalLM
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(DeepseekV3ForCausalLM, "_keys_to_ignore_on_load_unexpected", mtp_weight_patterns(2, MTP_LAYERS))
        yield


@pytest.fixture(scope="module")
def mtp_model(tmp_path_factory, tiny_tokenizer):
    folder = save_mtp_model(tmp_path_factory.mktemp("tiny-mtp"), tiny_tokenizer)
    return load_model(str(folder), device=device_under_test(), dtype="float32")


def save_two_way_model(folder, tokenizer, agree: bool):
    """The tiny MTP model with an output head that can only say one of two tokens (rows ±w, the rest 0),
    shared by the MTP layers. Random weights make target and heads each say one token all along: with the MTP
    layers' output norms negated (`agree`) the first head says the target's token (drafts kept whole), else
    the other one (every draft rejected at position 0)."""
    from safetensors.torch import load_file, save_file
    save_mtp_model(folder, tokenizer)
    weights = load_file(str(folder / "model.safetensors"))
    head = torch.zeros_like(weights["lm_head.weight"])
    w = torch.randn(head.shape[1], generator=torch.Generator().manual_seed(5))
    head[10], head[11] = w, -w
    weights["lm_head.weight"] = head
    for key in list(weights):
        if agree and key.startswith("model.layers.") and ".post_norm." in key and int(key.split(".")[2]) >= 2:
            weights[key] = -weights[key]
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return load_model(str(folder), device=device_under_test(), dtype="float32")


@pytest.fixture(scope="module")
def agreeing_model(tmp_path_factory, tiny_tokenizer):
    return save_two_way_model(tmp_path_factory.mktemp("tiny-mtp-agree"), tiny_tokenizer, agree=True)


@pytest.fixture(scope="module")
def disagreeing_model(tmp_path_factory, tiny_tokenizer):
    return save_two_way_model(tmp_path_factory.mktemp("tiny-mtp-disagree"), tiny_tokenizer, agree=False)


def prompt_ids(model):
    return model.tokenizer.encode(PROMPT, add_special_tokens=False)


def test_greedy_mtp_equals_plain_decoding_for_k_1_to_4(mtp_model):
    engine = local_engine(mtp_model)
    prompt = prompt_ids(mtp_model)
    _, _, plain = run(engine, prompt, max_new_tokens=N_NEW)
    for k in range(1, MTP_LAYERS + 1):
        _, rounds, finished = run(engine, prompt, spec=SpecConfig(method="mtp", k=k), max_new_tokens=N_NEW)
        assert finished.output_ids == plain.output_ids, f"k={k}"
        assert all(len(r.draft_ids) <= k for r in rounds) and any(len(r.draft_ids) == k for r in rounds)
        assert {r.drafter for r in rounds if r.draft_ids} == {"mtp"}
        check_round_invariants(rounds, finished)


def test_greedy_mtp_equals_transformers_use_mtp(mtp_model):
    prompt = prompt_ids(mtp_model)
    _, _, ours = run(local_engine(mtp_model), prompt, spec=SpecConfig(method="mtp", k=MTP_LAYERS), max_new_tokens=12)
    with torch.no_grad():
        theirs = mtp_model.model.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False, use_mtp=True)
    assert list(ours.output_ids) == theirs[0, len(prompt):].tolist()


def test_rejection_at_position_0_and_full_acceptance_occur(agreeing_model, disagreeing_model):
    seen = {}
    for model in (agreeing_model, disagreeing_model):
        engine = local_engine(model)
        prompt = prompt_ids(model)
        _, _, plain = run(engine, prompt, max_new_tokens=N_NEW)
        for k in (1, MTP_LAYERS):
            _, rounds, finished = run(engine, prompt, spec=SpecConfig(method="mtp", k=k), max_new_tokens=N_NEW)
            assert finished.output_ids == plain.output_ids, f"k={k}"
            check_round_invariants(rounds, finished)
            for r in rounds:
                if r.draft_ids:
                    seen.setdefault(r.n_accepted == len(r.draft_ids), r.n_accepted)
                    seen.setdefault("zero" if r.n_accepted == 0 else "some", r.n_accepted)
    assert True in seen and "zero" in seen  # a draft kept whole (bonus) and one rejected at position 0


def test_mtp_sampling_follows_the_target(agreeing_model):
    """The first sampled token after a prompt, over many seeds, with mtp k=2 against plain sampling: the same
    distribution (a two-sample test on how often id 10, one of the head's two live rows, comes out)."""
    prompt = prompt_ids(agreeing_model)
    counts = {}
    for method in ("none", "mtp"):
        engine = local_engine(agreeing_model)
        tally = torch.zeros(2)
        for seed in range(150):
            _, _, finished = run(engine, prompt, spec=SpecConfig(method=method, k=2),
                                 sampling=SamplingConfig(temperature=1.0, seed=seed), max_new_tokens=3)
            for token in finished.output_ids[1:3]:  # tokens 2 and 3: drafted by the MTP heads in mtp
                tally[0 if token == 10 else 1] += 1
        counts[method] = tally
    a, b = counts["none"], counts["mtp"]
    n_a, n_b = float(a.sum()), float(b.sum())
    pooled = (a[0] + b[0]) / (n_a + n_b)
    z = float((a[0] / n_a - b[0] / n_b) / torch.sqrt(pooled * (1 - pooled) * (1 / n_a + 1 / n_b)))
    assert abs(z) < 4.9  # p ≈ 1e-6: lossless sampling passes; a biased sampler shifts this by far more


def test_a_model_without_mtp_layers_is_refused(tiny_model):
    with pytest.raises(ConfigError, match="multi-token-prediction layers"):
        local_engine(tiny_model).generate_ids([1, 2, 3], spec=SpecConfig(method="mtp", k=1))


def test_k_beyond_the_mtp_layers_is_refused_with_the_bound(mtp_model):
    with pytest.raises(ConfigError, match=f"at most {MTP_LAYERS} tokens a round"):
        local_engine(mtp_model).generate_ids(prompt_ids(mtp_model), spec=SpecConfig(method="mtp", k=MTP_LAYERS + 1))


def test_a_checkpoint_without_mtp_weights_is_refused(tmp_path, tiny_tokenizer):
    folder = save_mtp_model(tmp_path / "no-mtp-weights", tiny_tokenizer, with_mtp_weights=False)
    model = load_model(str(folder), device=device_under_test(), dtype="float32")
    with pytest.raises(ConfigError, match="no usable MTP weights"):
        local_engine(model).generate_ids(prompt_ids(model), spec=SpecConfig(method="mtp", k=1))


def test_mtp_runs_on_both_backends_and_qwen35_on_transformers_is_sent_to_llama_cpp(tiny_model):
    """mtp is served on llama.cpp too (tests/engine/backends/test_llama_cpp_mtp.py runs it); a Qwen 3.5 / 3.6 or
    Qwen3-Next model on transformers is refused with the way out: transformers drops their mtp.* weights."""
    import dataclasses
    import types
    check_backend("mtp", "llama.cpp")
    check_backend("mtp", "transformers")
    config = types.SimpleNamespace(model_type="qwen3_5", get_text_config=lambda: config)
    qwen = dataclasses.replace(tiny_model, label="Qwen3.6-27B", model=types.SimpleNamespace(config=config))
    with pytest.raises(ConfigError, match="transformers does not load Qwen3.6-27B's MTP layers .*run its GGUF on "
                                          "llama.cpp.*--backend llama.cpp") as info:
        check_mtp(qwen, 1)
    assert "\n" not in str(info.value)


def test_the_catalog_marks_a_model_that_drafts_for_itself(tmp_path, tiny_tokenizer, tiny_dir):
    from engine.models import catalog
    folder = save_mtp_model(tmp_path / "tiny-mtp", tiny_tokenizer, with_mtp_weights=False)
    method, words = catalog.own_drafter(catalog.describe_path(folder))
    assert method == "mtp" and f"{MTP_LAYERS} MTP layers" in words
    assert catalog.own_drafter(catalog.describe_path(tiny_dir)) is None
    gemma = catalog.CatalogEntry(name="google/gemma-4-E2B-it", label="gemma-4-E2B-it", kind="hub-cache",
                                 path=tmp_path, repo_id="google/gemma-4-E2B-it")
    assert catalog.own_drafter(gemma) == ("assistant", "drafts with its assistant "
                                          "google/gemma-4-E2B-it-assistant (method assistant)")
