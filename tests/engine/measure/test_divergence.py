"""engine.measure.divergence: a greedy output that differs from plain decoding is diagnosed, a numerics near-tie told
apart from a real error. Classification on hand-made logits; the round located and its verification batch
rebuilt from the events; bf16 on the CPU (tiny model: many near-ties, all classified near-tie with the margin
within the discrepancy); planted errors (a wrong token committed after verification, verification read one
row off) classified mismatch; float32 exactly identical, with no diagnosis at all."""

from __future__ import annotations

import itertools

import pytest
import torch

from engine.core.loop import Checked

from engine.measure.compare import comparison_events, summary_rows
from engine.core.config import SpecConfig
from engine.measure.divergence import MISMATCH, NEAR_TIE, SAMPLING_NOTE, Divergence, classify, diagnose, locate
from engine.core.events import GenerationFinished
from engine.models.load import load_model
from engine.core.engine import Engine
from engine.runtime import DraftProvider, local_engine
from engine_testkit import PROMPTS, ScriptedDrafter, factory_for, run

PL = SpecConfig("prompt-lookup", k=5)
N_NEW = 32


def logits(values: dict[int, float], vocab: int = 8) -> torch.Tensor:
    row = torch.zeros(vocab)
    for token, value in values.items():
        row[token] = value
    return row


# ------------------------------------------------------------------ classification

def test_a_flip_within_the_discrepancy_is_a_near_tie():
    one = logits({3: 10.0, 5: 9.875})  # plain decoding's pass prefers 3 by 0.125
    batched = logits({3: 9.9375, 5: 10.0})  # the batch prefers 5 by 0.0625
    kind, margin, discrepancy, one_result, batched_result = classify(one, batched, 3, 5)
    assert kind == NEAR_TIE
    assert margin == 0.125 and discrepancy == 0.125
    assert (one_result.argmax, batched_result.argmax) == (3, 5)
    assert one_result.top2_margin == 0.125 and batched_result.top2_margin == 0.0625


def test_an_exact_tie_is_a_near_tie_whichever_token_argmax_returns():
    tied = logits({2: 20.25, 6: 20.25})  # bf16 logits are often exactly equal
    kind, margin, _, _, _ = classify(tied, tied.clone(), 6, 2)
    assert kind == NEAR_TIE and margin == 0.0


def test_a_gap_that_closes_by_up_to_twice_the_discrepancy_is_a_near_tie_and_a_tie_goes_to_the_lower_id():
    # seen on an AVX-512 Xeon in bf16: the one-token pass puts 345 one ulp (0.0039) above 30, the batched pass
    # ties them, and the logits move by at most 0.0034: each token's logit moved, so their gap moved by ≤ 2D
    one = logits({30: 1.0, 345: 1.00390625}, vocab=400)
    batched = logits({30: 1.00048828125, 345: 1.00048828125}, vocab=400)
    batched[7] = 0.00341796875  # the largest move elsewhere in the row
    kind, margin, discrepancy, one_result, batched_result = classify(one, batched, 345, 30)
    assert discrepancy == 0.00341796875 < margin == 0.00390625 <= 2 * discrepancy
    assert kind == NEAR_TIE
    assert (one_result.argmax, batched_result.argmax) == (345, 30)  # greedy's argmax: the lower id on a tie
    assert batched_result.top2_margin == 0.0
    # the same gap with passes that agree to within a third of it is no rounding: a mismatch
    assert classify(one, one + 0.0013 * (torch.arange(400) == 30), 345, 30)[0] == MISMATCH


def test_both_passes_preferring_plains_token_by_more_than_they_disagree_is_a_mismatch():
    one = logits({3: 10.0, 5: 8.0})
    batched = logits({3: 10.015625, 5: 8.0})
    kind, margin, discrepancy, one_result, batched_result = classify(one, batched, 3, 5)
    assert kind == MISMATCH and margin == 2.015625 and discrepancy == 0.015625
    assert one_result.argmax == batched_result.argmax == 3


def test_a_missing_token_or_no_difference_is_a_mismatch():
    row = logits({1: 1.0})
    assert classify(row, row, 1, None)[0] == MISMATCH
    assert classify(row, row, 1, 1)[0] == MISMATCH
    assert classify(row, row, 1, 99)[0] == MISMATCH  # beyond the vocabulary


# ------------------------------------------------------------------ locating the round

def test_locate_rebuilds_each_rounds_verification_batch(tiny_model):
    engine = local_engine(tiny_model, drafter_factory=factory_for(ScriptedDrafter([[5, 6, 7], [], [8, 9]])))
    prompt = tiny_model.tokenizer.encode("def add(a, b):", add_special_tokens=False)
    _, rounds, finished = run(engine, prompt, spec=SpecConfig("prompt-lookup", k=3), max_new_tokens=8)
    output = list(finished.output_ids)
    for position in range(len(output)):
        batch = locate(rounds, prompt, output, position)
        event = rounds[batch.round_index]
        start = event.n_committed_total - len(event.committed_ids)
        assert start <= position < event.n_committed_total
        fed = prompt if start == 0 else [output[start - 1]]
        assert batch.batch_ids == fed + list(event.draft_ids) and batch.row == len(fed) - 1 + position - start
    assert locate(rounds, prompt, output, len(output)) is None


# ------------------------------------------------------------------ bf16: near-ties, counted

def bf16_prompts(target) -> list[list[int]]:
    """24 prompts of 12 kinds: the kit's texts, cut at two lengths (the tiny model holds 256), as chat prompts."""
    texts = list(PROMPTS.values()) + ["Hello there, how are you?", "List three colours.", "Write a haiku.",
                                       "Explain recursion to a child.", "What is 17 times 23?",
                                       "Repeat: the cat sat on the mat. The cat sat on the mat.",
                                       "Café crème, naïve façade.", "日本語のテキスト"]
    engine = local_engine(target)
    return [engine.prompt_ids(text[:cut]) for text, cut in itertools.product(texts[:12], (150, 60))]


def divergences_of(engine, prompt_ids: list[int], spec: SpecConfig = PL) -> Divergence | None:
    _, _, plain = run(engine, prompt_ids, max_new_tokens=N_NEW)
    engine.release()
    _, rounds, other = run(engine, prompt_ids, spec=spec, max_new_tokens=N_NEW)
    engine.release()
    return diagnose(engine.target, prompt_ids, plain.output_ids, other.output_ids, rounds)


@pytest.fixture(scope="module")
def tiny_bf16(tiny_dir):
    return load_model(str(tiny_dir), device="cpu", dtype="bf16")


@pytest.fixture(scope="module")
def bf16_survey(tiny_bf16) -> list[tuple[list[int], Divergence | None]]:
    """Every bf16 prompt with its diagnosis (None: identical to plain decoding), computed once."""
    engine = local_engine(tiny_bf16)
    return [(ids, divergences_of(engine, ids)) for ids in bf16_prompts(tiny_bf16)]


@pytest.mark.slow
def test_bf16_on_the_cpu_every_divergence_is_a_near_tie_within_the_discrepancy(bf16_survey):
    differing = [d for _, d in bf16_survey if d is not None]
    print(f"\nbf16, tiny model, prompt lookup k=5, {N_NEW} tokens: {len(bf16_survey) - len(differing)} identical, "
          f"{sum(d.is_near_tie for d in differing)} near-ties of {len(bf16_survey)}; diagnosis "
          f"{max((d.seconds for d in differing), default=0):.2f} s at most")
    assert len(bf16_survey) >= 20 and differing, "bf16 should flip some near-ties on this model"
    for d in differing:
        assert d.kind == NEAR_TIE, d.explanation()
        assert d.top2_margin <= 2 * d.pass_discrepancy
        # the passes disagree, or the two tokens tie exactly (and the argmax broke the tie another way)
        assert d.pass_discrepancy > 0 or d.top2_margin == 0
        assert d.plain_token != d.spec_token and d.dtype == "bfloat16" and d.backend == "transformers"
        assert "rounding difference" in d.explanation() and d.short().startswith("≈ near-tie at token")


# ------------------------------------------------------------------ planted errors

class WrongAfterVerification(Engine):
    """Verifies as the engine does, then commits the token the target ranks last in place of its own, at
    round `at` (a real error, far from any tie)."""

    def __init__(self, target, at: int = 3):
        super().__init__(target, DraftProvider(target))
        self.at, self.rounds_seen = at, 0

    def _verify(self, feed, proposal, sampling, generator, piece=None):
        from engine.core.verify import verify_greedy
        draft_ids = list(proposal.ids)
        m = len(draft_ids)
        logits = self.runner.forward(feed + draft_ids, m + 1)
        n_accepted, target_id, p_target, p_own = verify_greedy(logits, draft_ids)
        if self.rounds_seen == self.at:
            target_id = int(logits[n_accepted].argmin())
        self.rounds_seen += 1
        self.runner.rollback(len(self.runner.ids) - (m - n_accepted))
        return Checked(n_accepted, target_id, p_target, [None] * m, p_own, 0.0), proposal


class ShiftedVerification(Engine):
    """Reads verification one row off: the draft token at i is checked against the logits of i + 1."""

    def __init__(self, target):
        super().__init__(target, DraftProvider(target))

    def _verify(self, feed, proposal, sampling, generator, piece=None):
        from engine.core.verify import verify_greedy
        draft_ids = list(proposal.ids)
        m = len(draft_ids)
        logits = self.runner.forward(feed + draft_ids, m + 1)
        shifted = torch.cat([logits[1:], logits[-1:]]) if m else logits
        n_accepted, target_id, p_target, p_own = verify_greedy(shifted, draft_ids)
        self.runner.rollback(len(self.runner.ids) - (m - n_accepted))
        return Checked(n_accepted, target_id, p_target, [None] * m, p_own, 0.0), proposal


@pytest.mark.parametrize("dtype", ["float32", "bf16"])
def test_a_wrong_token_committed_after_verification_is_a_mismatch(tiny_dir, tiny_bf16, dtype):
    target = tiny_bf16 if dtype == "bf16" else load_model(str(tiny_dir), device="cpu", dtype="float32")
    prompt = bf16_prompts(target)[1]
    _, _, plain = run(local_engine(target), prompt, max_new_tokens=16)
    broken = WrongAfterVerification(target, at=3)
    _, rounds, other = run(broken, prompt, spec=PL, max_new_tokens=16)
    d = diagnose(target, prompt, plain.output_ids, other.output_ids, rounds)
    assert d is not None and d.kind == MISMATCH, d
    assert d.replayed  # the runs' own passes were replayed before it was called an error
    assert d.batched.argmax == d.one_token.argmax == d.plain_token != d.spec_token
    text = d.explanation()
    assert text.startswith("MISMATCH") and "report" in text and str(list(d.batch_ids)) in text
    assert d.short().startswith("✗ MISMATCH at token")


def test_verification_shifted_by_one_is_a_mismatch(tiny_model):
    prompt = tiny_model.tokenizer.encode("The quick brown fox jumps over the lazy dog. The quick brown",
                                         add_special_tokens=False)
    _, _, plain = run(local_engine(tiny_model), prompt, max_new_tokens=24)
    _, rounds, other = run(ShiftedVerification(tiny_model), prompt, spec=PL, max_new_tokens=24)
    assert any(r.draft_ids for r in rounds)
    d = diagnose(tiny_model, prompt, plain.output_ids, other.output_ids, rounds)
    assert d is not None and d.kind == MISMATCH
    assert d.pass_discrepancy < 1e-3 < d.top2_margin  # float32: the passes agree, the tokens don't


# ------------------------------------------------------------------ float32: exact, nothing to diagnose

def test_float32_comparisons_are_identical_and_carry_no_divergence(tiny_engine):
    specs = [SpecConfig("prompt-lookup", k=3), SpecConfig("prompt-lookup", k=8)]
    for text in [t[:150] for t in list(PROMPTS.values())[:3]]:  # the tiny model holds 256
        events = list(comparison_events(tiny_engine, text, specs, max_new_tokens=N_NEW))
        assert not [e for _, e in events if isinstance(e, Divergence)]
        finished = {i: e for i, e in events if isinstance(e, GenerationFinished)}
        rows = summary_rows(specs, finished, greedy=True)
        assert [r.equality for r in rows] == ["identical"] * 3 and all(r.divergence is None for r in rows)
        assert all(r.as_dict()["divergence"] is None for r in rows)


@pytest.mark.slow
def test_a_comparison_yields_the_diagnosis_after_a_differing_run_and_its_row_carries_it(tiny_bf16, bf16_survey):
    prompt = next(ids for ids, d in bf16_survey if d is not None)
    events = list(comparison_events(_IdsEngine(tiny_bf16), prompt, [PL], max_new_tokens=N_NEW))
    kinds = [type(e).__name__ for _, e in events]
    assert kinds[-2:] == ["GenerationFinished", "Divergence"]
    finished = {i: e for i, e in events if isinstance(e, GenerationFinished)}
    divergences = {i: e for i, e in events if isinstance(e, Divergence)}
    rows = summary_rows([PL], finished, greedy=True, divergences=divergences)
    assert rows[1].identical_to_plain is False and rows[1].equality == NEAR_TIE
    record = rows[1].as_dict()["divergence"]
    assert set(record) >= {"position", "kind", "top2_margin", "pass_discrepancy", "plain_token", "spec_token"}
    assert record["kind"] == "near-tie" and record["position"] == rows[1].first_difference


class _IdsEngine(Engine):
    """An engine whose 'prompt' is already ids (generate → generate_ids), so a test picks its exact prompt."""

    def __init__(self, target):
        super().__init__(target, DraftProvider(target))

    def generate(self, conversation, *, system=None, **kwargs):
        return self.generate_ids(conversation, **kwargs)

    def prompt_ids(self, conversation, system=None):
        return list(conversation)


def test_sampled_rows_are_not_compared_token_for_token(tiny_engine):
    from engine.core.config import SamplingConfig
    sampling = SamplingConfig(temperature=0.8, seed=1)
    events = list(comparison_events(tiny_engine, "Hi", [PL], max_new_tokens=8, sampling=sampling))
    assert not [e for _, e in events if isinstance(e, Divergence)]
    rows = summary_rows([PL], {i: e for i, e in events if isinstance(e, GenerationFinished)}, greedy=False)
    assert rows[1].equality == "sampled" and rows[1].divergence is None
    assert "statistical" in SAMPLING_NOTE and "not compared token for token" in SAMPLING_NOTE
