"""The round's tree (engine.core.recording, generate(record=True)): recording changes no token, the alternatives
equal a separate full-vocabulary computation from the target's logits, the draws decide exactly what was kept,
and min(1, p/q) and the residual are engine.core.sampling's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.core.config import SamplingConfig, SpecConfig
from engine.core.events import RoundDetail, event_to_dict
from engine.core.sampling import acceptance_probability, probabilities, residual
from engine.runtime import local_engine
from engine_testkit import ScriptedDrafter, check_round_invariants, factory_for, run

PROMPT = [5, 9, 20, 31, 5, 9, 20, 31, 5, 9]
SAMPLED = SamplingConfig(temperature=0.9, top_k=0, top_p=1.0, seed=7)


def _specs(draft_dir):
    return [SpecConfig(), SpecConfig("prompt-lookup", k=3), SpecConfig("draft-model", k=3, draft=str(draft_dir)),
            SpecConfig("early-exit", k=2, params={"layers": 2})]


@pytest.mark.parametrize("sampling", [SamplingConfig(), SAMPLED], ids=["greedy", "sampled"])
def test_recording_changes_no_token_for_any_method(tiny_model, tiny_draft_dir, sampling):
    for spec in _specs(tiny_draft_dir):
        plain = run(local_engine(tiny_model), PROMPT, spec=spec, sampling=sampling, max_new_tokens=24)
        recorded = run(local_engine(tiny_model), PROMPT, spec=spec, sampling=sampling, max_new_tokens=24,
                       record=True)
        assert recorded[2].output_ids == plain[2].output_ids, spec.label()
        check_round_invariants(recorded[1], recorded[2])
        assert all(r.detail is None for r in plain[1])
        for r in recorded[1]:
            assert len(r.detail.positions) == r.n_accepted + 1  # the positions the target decided
            assert 0.0 <= r.rollback_seconds <= r.verify_seconds
            assert RoundDetail.from_dict(event_to_dict(r)["detail"]) is not None


def _target_rows(model, ids: list[int], n: int, sampling) -> torch.Tensor:
    """The target's probabilities after each of the last n prefixes of `ids`, one fresh pass each."""
    rows = []
    with torch.inference_mode():
        for end in range(len(ids) - n + 1, len(ids) + 1):
            runner = model.new_runner()
            rows.append(probabilities(runner.forward(ids[:end], 1), sampling)[0])
            runner.release()
    return torch.stack(rows)


@pytest.mark.parametrize("sampling", [SamplingConfig(), SAMPLED], ids=["greedy", "sampled"])
def test_alternatives_equal_a_full_vocabulary_computation(tiny_model, tiny_draft_dir, sampling):
    spec = SpecConfig("draft-model", k=3, draft=str(tiny_draft_dir))
    _, rounds, _ = run(local_engine(tiny_model), PROMPT, spec=spec, sampling=sampling, max_new_tokens=16,
                       record=True)
    context = list(PROMPT)
    checked = 0
    for r in rounds[:6]:
        m = len(r.draft_ids)
        expected = _target_rows(tiny_model, context + list(r.draft_ids), m + 1, sampling)
        assert len(r.detail.positions) == r.n_accepted + 1
        for i, position in enumerate(r.detail.positions):
            top = torch.topk(expected[i], 5)
            assert position.target.probs == pytest.approx(top.values.tolist(), abs=2e-4)
            # the same ids, allowing a swap of two alternatives whose probabilities are within float noise
            for got, want, p in zip(position.target.ids, top.indices.tolist(), top.values.tolist()):
                assert got == want or abs(float(expected[i][got]) - p) < 2e-4
            entropy = float(-(expected[i][expected[i] > 0] * expected[i][expected[i] > 0].log2()).sum())
            assert position.entropy_bits == pytest.approx(entropy, abs=1e-3)
            if i < m:
                assert position.draft is not None and len(position.draft.ids) == 5
                assert position.draft.probs[0] >= position.draft.probs[-1]
            checked += 1
        context += list(r.committed_ids)
    assert checked >= 6


@pytest.mark.parametrize("method", ["draft-model", "one-hot"])
def test_draws_decide_what_was_kept_and_the_residual_is_samplings(tiny_model, tiny_draft_dir, method):
    if method == "one-hot":  # a drafter with no distribution, drafting the same guess every round
        spec = SpecConfig("prompt-lookup", k=3)
        engine = local_engine(tiny_model, drafter_factory=factory_for(ScriptedDrafter([[5, 9, 20]] * 40)))
    else:
        spec, engine = SpecConfig(method, k=3, draft=str(tiny_draft_dir)), local_engine(tiny_model)
    _, rounds, _ = run(engine, PROMPT * 3, spec=spec, sampling=SAMPLED, max_new_tokens=48, record=True)
    substitutions = 0
    for r in rounds:
        for i in range(min(r.n_accepted + 1, len(r.draft_ids))):
            position = r.detail.positions[i]
            p, q = r.p_target[i], r.p_draft[i]
            ratio = acceptance_probability(p, q)
            assert ratio == pytest.approx(min(1.0, p / (1.0 if q is None else q)))
            kept = position.draw * (1.0 if q is None else q) < p  # the rule as rejection_sample applies it
            assert kept == (i < r.n_accepted)
        if r.n_accepted < len(r.draft_ids):
            at = r.detail.positions[r.n_accepted]
            assert at.residual is not None and sum(at.residual.probs) <= 1.0 + 1e-5
            assert r.target_id in at.residual.ids or r.p_target_of_target_id < at.residual.probs[-1] + 1e-3
            substitutions += 1
    assert substitutions > 0 or method == "draft-model"  # a near copy of the target may keep every draft


def test_residual_and_acceptance_probability_by_hand():
    p = torch.tensor([[0.5, 0.3, 0.2, 0.0]])
    q = torch.tensor([[0.2, 0.5, 0.2, 0.1]])
    by_hand = np.maximum(0, p.numpy() - q.numpy())
    by_hand /= by_hand.sum()
    assert residual(p, q).numpy() == pytest.approx(by_hand)
    assert residual(p, p).numpy() == pytest.approx(p.numpy())  # nothing left over: the target itself
    assert acceptance_probability(0.3, 0.5) == pytest.approx(0.6)
    assert acceptance_probability(0.3, None) == pytest.approx(0.3)  # one-hot draft
    assert acceptance_probability(0.6, 0.5) == 1.0 and acceptance_probability(None, 0.5) is None
