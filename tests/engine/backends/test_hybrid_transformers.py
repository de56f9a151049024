"""Hybrid models (linear-attention layers beside attention layers: Qwen 3.5, Qwen3-Next) roll back on the
transformers backend (engine.backends.hybrid_cache): after any rollback the runner's logits are a fresh
runner's, and greedy speculative decoding equals plain decoding token for token, on a tiny random Qwen 3.5
text model built here."""

from __future__ import annotations

import random

import pytest
import torch

from engine.core.config import SpecConfig
from engine.core.drafting import Drafter, Proposal
from engine.core.errors import ConfigError
from engine.models.load import load_model
from engine.runtime import local_engine
from engine_testkit import check_round_invariants, device_under_test, factory_for, run, save_tiny_hybrid_model

N_NEW = 32
PROMPTS = ("hello world, how are you?", "the lazy dog. the lazy dog. the lazy")


@pytest.fixture(scope="session")
def hybrid_dir(tmp_path_factory, tiny_tokenizer):
    return save_tiny_hybrid_model(tmp_path_factory.mktemp("tiny-hybrid"), tiny_tokenizer, seed=0)


@pytest.fixture(scope="session")
def hybrid_draft_dir(tmp_path_factory, tiny_tokenizer):
    """The hybrid's weights plus noise: a draft that agrees with it often, not always."""
    return save_tiny_hybrid_model(tmp_path_factory.mktemp("tiny-hybrid-draft"), tiny_tokenizer, seed=0, noise=0.01)


@pytest.fixture(scope="session")
def hybrid_model(hybrid_dir):
    return load_model(str(hybrid_dir), device=device_under_test(), dtype="float32")


@pytest.fixture(scope="module")
def baselines(hybrid_model):
    """Plain greedy output (method none) per prompt: (prompt ids, output ids)."""
    engine = local_engine(hybrid_model)
    out = {}
    for prompt in PROMPTS:
        _, _, finished = run(engine, prompt, max_new_tokens=N_NEW)
        out[prompt] = (engine.prompt_ids(prompt), list(finished.output_ids))
    return out


def fresh_logits(model, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return model.new_runner().forward(ids, 1)[-1]


def test_the_tiny_model_is_hybrid(hybrid_model, tiny_model):
    kinds = {type(layer).__name__ for layer in _cache_of(hybrid_model).layers}
    assert kinds == {"LinearAttentionLayer", "DynamicLayer"}
    llama = tiny_model.new_runner()
    with torch.inference_mode():
        llama.forward([1, 2, 3], 1)
    llama.rollback(1)
    assert llama.rollback_cost() is None  # a plain KV cache: nothing to say, nothing snapshotted
    assert llama._hybrid is None


def _cache_of(model):
    runner = model.new_runner()
    with torch.inference_mode():
        runner.forward([1, 2], 1)
    return runner.cache


def test_random_rollbacks_leave_the_logits_of_a_fresh_runner(hybrid_model, tiny_tokenizer):
    """Passes in inference mode, rollbacks outside it (as the engine syncs), of random depth: within the last
    pass, across several, past every snapshot; the next logits and the kept hidden rows are a fresh runner's."""
    rng = random.Random(0)
    vocab = len(tiny_tokenizer)
    runner = hybrid_model.new_runner()
    runner.record_outputs()  # MTP heads draft from these rows: they must survive a restore too
    with torch.inference_mode():
        runner.forward([rng.randrange(vocab) for _ in range(12)], 1)
    depths = set()
    for step in range(24):
        with torch.inference_mode():
            for _ in range(rng.randint(1, 3)):  # one pass (a verify) or several (a draft model's steps)
                runner.forward([rng.randrange(vocab) for _ in range(rng.randint(1, 5))], 1)
        depth = rng.choice([0, 1, 2, 3, 5, 8, 30]) if step else 40
        length = max(1, len(runner.ids) - depth)
        kept = runner.ids[:length]
        runner.rollback(length)
        depths.add(depth)
        assert runner.ids == kept
        assert runner.hidden.rows(0).shape[0] == length
        nxt = rng.randrange(vocab)
        with torch.inference_mode():
            logits = runner.forward([nxt], 1)[-1]
        torch.testing.assert_close(logits, fresh_logits(hybrid_model, kept + [nxt]), atol=1e-4, rtol=1e-4)
    reference = hybrid_model.new_runner()
    reference.record_outputs()
    with torch.inference_mode():
        reference.forward(list(runner.ids), 1)
    torch.testing.assert_close(runner.hidden.rows(0), reference.hidden.rows(0), atol=1e-4, rtol=1e-4)
    cost = runner.rollback_cost()
    assert cost["restores"] > 0 and cost["refills"] > 0  # both kinds of rollback happened


def test_rollback_cost_reports_the_snapshot_and_the_restore(hybrid_model):
    runner = hybrid_model.new_runner()
    assert runner.rollback_cost() is None  # not known before the first pass made a cache
    with torch.inference_mode():
        runner.forward(list(range(10, 30)), 1)
        runner.forward(list(range(30, 35)), 5)
    runner.rollback(22)
    cost = runner.rollback_cost()
    assert set(cost) >= {"kind", "snapshot_bytes", "mean_restore_ms", "restores"}
    assert cost["kind"] == "recurrent-state snapshot"
    # 3 linear layers: a 4 × 16 × 16 recurrent state and 128 channels × 4 conv inputs each, float32
    assert cost["snapshot_bytes"] == 3 * (4 * 16 * 16 + 128 * 4) * 4
    assert cost["restores"] == 1 and cost["mean_restore_ms"] > 0 and cost["refills"] == 0
    runner.rollback(len(runner.ids))  # nothing cut: nothing restored
    assert runner.rollback_cost()["restores"] == 1


SPECS = [
    ("prompt-lookup-k3", lambda target, draft: SpecConfig("prompt-lookup", k=3)),
    ("draft-model-noisy-k4", lambda target, draft: SpecConfig("draft-model", k=4, draft=str(draft))),
    ("draft-model-same-k3", lambda target, draft: SpecConfig("draft-model", k=3, draft=str(target))),
    ("early-exit-2-layers-k3", lambda target, draft: SpecConfig("early-exit", k=3, params={"layers": 2})),
]


@pytest.mark.parametrize("spec_id, make_spec", SPECS, ids=[s[0] for s in SPECS])
def test_speculative_greedy_equals_plain(hybrid_model, hybrid_dir, hybrid_draft_dir, baselines, spec_id, make_spec):
    spec = make_spec(hybrid_dir, hybrid_draft_dir)
    engine = local_engine(hybrid_model)
    drafted = accepted = 0
    for prompt in PROMPTS:
        _, baseline = baselines[prompt]
        _, rounds, finished = run(engine, prompt, spec=spec, max_new_tokens=N_NEW)
        assert list(finished.output_ids) == baseline, f"{spec_id} on {prompt!r} differs from plain greedy"
        check_round_invariants(rounds, finished)
        drafted += finished.stats.drafted_tokens
        accepted += finished.stats.accepted_tokens
    assert 0 < accepted <= drafted
    if spec_id != "draft-model-same-k3":  # the same model as draft agrees with itself
        assert accepted < drafted
        assert engine.runner.rollback_cost()["restores"] > 0  # rejected drafts were rolled back


def test_plain_decoding_matches_transformers_generate(hybrid_model, baselines):
    """The baseline itself is right: transformers' own generate() (its cache never rolled back) agrees."""
    for prompt_ids, output in baselines.values():
        with torch.inference_mode():
            out = hybrid_model.model.generate(torch.tensor([prompt_ids]), max_new_tokens=N_NEW, do_sample=False,
                                              pad_token_id=hybrid_model.tokenizer.eos_token_id)
        assert out[0, len(prompt_ids):].tolist()[:len(output)] == output


class OracleDrafter(Drafter):
    """Drafts the target's own greedy continuation (all accepted) on even rounds, and a wrong first token
    before it (rejected at position 0) on odd rounds."""

    name = "oracle"
    free_to_propose = True
    note = None

    def __init__(self, prompt_ids: list[int], output: list[int], vocab: int) -> None:
        self.prompt_ids, self.output, self.vocab = prompt_ids, output, vocab
        self.round = 0

    def begin(self, sampling, generator) -> None:
        self.round = 0

    def propose(self, context_ids: list[int], k: int) -> Proposal:
        done = len(context_ids) - len(self.prompt_ids)
        right = self.output[done:done + k]
        self.round += 1
        if self.round % 2 or not right:
            return Proposal(right, None)
        wrong = (right[0] + 1) % self.vocab
        return Proposal([wrong] + right[:k - 1], None)

    def observe(self, n_accepted: int) -> None:
        pass

    def release(self) -> None:
        pass


def test_full_acceptance_and_rejection_at_the_first_token(hybrid_model, baselines, tiny_tokenizer):
    prompt = PROMPTS[0]
    prompt_ids, baseline = baselines[prompt]
    drafter = OracleDrafter(prompt_ids, baseline, len(tiny_tokenizer))
    engine = local_engine(hybrid_model, drafter_factory=factory_for(drafter))
    _, rounds, finished = run(engine, prompt, spec=SpecConfig("prompt-lookup", k=4), max_new_tokens=N_NEW)
    assert list(finished.output_ids) == baseline
    check_round_invariants(rounds, finished)
    drafted = [r for r in rounds if r.draft_ids]
    assert any(r.n_accepted == len(r.draft_ids) == 4 for r in drafted)
    assert any(r.n_accepted == 0 for r in drafted)
    assert {r.n_accepted for r in drafted} <= {0, 4, len(drafted[-1].draft_ids)}
    cost = engine.runner.rollback_cost()
    assert cost["snapshot_bytes"] > 0 and cost["restores"] >= sum(r.n_accepted == 0 for r in drafted)


def test_early_exit_over_linear_attention_layers_only_is_refused(hybrid_model):
    """The tiny hybrid's layer 0 is linear attention: a one-layer early exit has no attention layer, which
    transformers' cache can't run; two layers (linear, full) can."""
    engine = local_engine(hybrid_model)
    with pytest.raises(ConfigError, match="early-exit: the first 1 layer of .* is linear attention only.*use "
                                          "layers ≥ 2") as info:
        engine.validate(SpecConfig("early-exit", k=2, params={"layers": 1}))
    assert "\n" not in str(info.value)
    engine.validate(SpecConfig("early-exit", k=2, params={"layers": 2}))
