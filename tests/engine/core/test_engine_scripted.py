"""A scripted drafter forces each verification outcome (rejection at position 0, partial acceptance, full
acceptance with a bonus token) and the round events are checked against the target's own numbers."""

from __future__ import annotations

import pytest
import torch

from engine.core.chat import IncrementalDetokenizer
from engine.core.config import SamplingConfig, SpecConfig
from engine.core.drafting import Proposal
from engine.core.events import TokenStatus
from engine.runtime import local_engine
from engine_testkit import ScriptedDrafter, check_round_invariants, factory_for, run

SPEC = SpecConfig("prompt-lookup", k=4)  # any method that drafts; the scripted drafter replaces it


@pytest.fixture(scope="module")
def prompt(tiny_tokenizer) -> list[int]:
    return tiny_tokenizer.encode("The quick brown fox jumps over", add_special_tokens=False)


@pytest.fixture(scope="module")
def baseline(tiny_model, prompt) -> list[int]:
    _, _, finished = run(local_engine(tiny_model), prompt, max_new_tokens=16)
    assert finished.stop_reason == "max-new-tokens"
    return list(finished.output_ids)


@pytest.fixture(scope="module")
def target_probs(tiny_model, prompt, baseline) -> torch.Tensor:
    """The target's probabilities at every position, from one uncached forward pass over prompt + output."""
    with torch.inference_mode():
        logits = tiny_model.model(torch.tensor([prompt + baseline])).logits[0].float()
    return torch.softmax(logits, dim=-1)


def clean_token(tokenizer, avoid: int) -> int:
    """An id that decodes to a plain ASCII word on its own (so its piece is the same in any context)."""
    for text in ("Z", "Q", "X", "q"):
        token = tokenizer.convert_tokens_to_ids(text)
        if token != avoid and token != tokenizer.unk_token_id:
            return token
    raise AssertionError("no plain ASCII token in the tiny vocabulary")


def in_context_pieces(tokenizer, prompt, output_before, draft_ids) -> tuple[str, ...]:
    """The text of each drafted token, decoded after the prompt, the output so far and the drafts before it."""
    reference = IncrementalDetokenizer(tokenizer, prompt)
    reference.add(output_before)
    return tuple(reference.peek(draft_ids))


def p_at(target_probs, prompt, position: int, token: int) -> float:
    """Target probability of `token` as output token number `position` (0-based)."""
    return float(target_probs[len(prompt) + position - 1, token])


def test_rejection_at_zero_partial_and_full_acceptance(tiny_model, tiny_tokenizer, prompt, baseline,
                                                       target_probs):
    b = baseline
    wrong1 = clean_token(tiny_tokenizer, b[1])
    wrong4 = clean_token(tiny_tokenizer, b[4])
    script = [
        [wrong1, b[2]],  # output position 1: rejected at once
        [b[2], b[3], wrong4, b[5]],  # position 2: two kept, the third rejected
        [b[5], b[6], b[7], b[8]],  # position 5: all four kept, then a bonus
        [],  # position 10: nothing drafted, a plain step
    ]
    drafter = ScriptedDrafter(script)
    engine = local_engine(tiny_model, drafter_factory=factory_for(drafter))
    started, rounds, finished = run(engine, prompt, spec=SPEC, max_new_tokens=12)

    # The output is still exactly the target's greedy output.
    assert list(finished.output_ids) == b[:12]
    assert finished.stop_reason == "max-new-tokens"
    check_round_invariants(rounds, finished)
    prefill, reject0, partial, full, plain = rounds[:5]

    assert prefill.draft_ids == () and prefill.target_status is TokenStatus.PLAIN
    assert prefill.committed_ids == (b[0],) and prefill.drafter == "target"

    # Rejection at position 0: the target substitutes its own token; nothing drafted survives.
    assert reject0.draft_ids == (wrong1, b[2])
    assert reject0.n_accepted == 0 and reject0.accepted_ids == ()
    assert reject0.target_status is TokenStatus.SUBSTITUTED
    assert reject0.correction_id == b[1] and reject0.bonus_id is None
    assert reject0.committed_ids == (b[1],)
    assert reject0.committed_statuses == (TokenStatus.SUBSTITUTED,)
    assert reject0.rejected_ids == (wrong1, b[2])
    assert reject0.rejected_pieces == reject0.draft_pieces
    assert reject0.draft_pieces == in_context_pieces(tiny_tokenizer, prompt, b[:1], reject0.draft_ids)
    assert reject0.drafter == "scripted"

    # Partial acceptance: two kept, the correction replaces the third.
    assert partial.n_accepted == 2
    assert partial.target_status is TokenStatus.SUBSTITUTED and partial.correction_id == b[4]
    assert partial.committed_ids == (b[2], b[3], b[4])
    assert partial.committed_statuses == (TokenStatus.ACCEPTED, TokenStatus.ACCEPTED, TokenStatus.SUBSTITUTED)
    assert partial.rejected_ids == (wrong4, b[5])
    assert partial.draft_pieces[:2] == partial.committed_pieces[:2]
    assert partial.draft_pieces == in_context_pieces(tiny_tokenizer, prompt, b[:2], partial.draft_ids)

    # Full acceptance: all four kept plus the target's bonus token.
    assert full.n_accepted == 4 and full.rejected_ids == ()
    assert full.target_status is TokenStatus.BONUS
    assert full.bonus_id == b[9] and full.correction_id is None
    assert full.committed_ids == tuple(b[5:10])
    assert full.committed_statuses == (TokenStatus.ACCEPTED,) * 4 + (TokenStatus.BONUS,)
    assert full.draft_pieces == full.committed_pieces[:4]

    assert plain.draft_ids == () and plain.target_status is TokenStatus.PLAIN and plain.committed_ids == (b[10],)

    # p_target of each drafted token is the target's probability there (one uncached pass to compare).
    for event, start in ((reject0, 1), (partial, 2), (full, 5)):
        # (past the first rejection the target saw the rejected tokens, not the output: compare up to it)
        upto = min(len(event.draft_ids), event.n_accepted + 1)
        expected = [p_at(target_probs, prompt, start + i, t) for i, t in enumerate(event.draft_ids[:upto])]
        assert event.p_target[:upto] == pytest.approx(expected, abs=1e-4)
        assert all(0.0 <= p <= 1.0 for p in event.p_target)
        assert event.p_draft == (None,) * len(event.draft_ids)  # a one-hot drafter has no distribution
        own_position = start + event.n_accepted
        assert event.p_target_of_target_id == pytest.approx(
            float(target_probs[len(prompt) + own_position - 1].max()), abs=1e-4)
    assert reject0.p_target[0] < reject0.p_target_of_target_id  # the drafted token was not the argmax

    # Committed text round by round, and in all.
    assert finished.text == tiny_tokenizer.decode(b[:12], skip_special_tokens=True)
    assert "".join(r.text for r in rounds) == finished.text
    assert full.text == "".join(full.committed_pieces)

    # What the drafter was asked and told: the committed context each time, k capped by the budget,
    # and how many of its tokens were kept (the prefill round reports 0).
    assert drafter.contexts[:4] == [prompt + b[:1], prompt + b[:2], prompt + b[:5], prompt + b[:10]]
    assert drafter.ks[:4] == [4, 4, 4, 1]  # at position 10 only one token of budget is left to draft
    assert drafter.observed[:5] == [0, 0, 2, 4, 0]
    assert drafter.began == 1

    stats = finished.stats
    assert stats.drafted_tokens == 10 and stats.accepted_tokens == 6
    assert stats.accept_length_histogram == (1, 0, 1, 0, 1)
    assert stats.per_position_acceptance == pytest.approx((2 / 3, 2 / 3, 1 / 2, 1 / 2))


def test_budget_caps_k_so_that_the_bonus_token_still_fits(tiny_model, prompt, baseline):
    drafter = ScriptedDrafter([baseline[1:9]])  # 8 ids offered; the drafter keeps to the k it is given
    engine = local_engine(tiny_model, drafter_factory=factory_for(drafter))
    _, rounds, finished = run(engine, prompt, spec=SPEC, max_new_tokens=4)
    assert drafter.ks == [2]  # after the prefill 3 tokens are left: k = min(4, 3 − 1)
    assert rounds[1].draft_ids == tuple(baseline[1:3])
    assert rounds[1].target_status is TokenStatus.BONUS and rounds[1].bonus_id == baseline[3]
    assert rounds[1].committed_ids == tuple(baseline[1:4])
    assert list(finished.output_ids) == baseline[:4]
    assert finished.stop_reason == "max-new-tokens" and len(rounds) == 2


def test_draft_probabilities_are_reported_for_a_drafter_with_a_distribution(tiny_model, prompt, baseline):
    vocab = tiny_model.vocab_size
    ids = [baseline[1], baseline[2]]
    p_draft = torch.full((2, vocab), 0.5 / (vocab - 1))
    p_draft[0, ids[0]] = 0.5
    p_draft[1, ids[1]] = 0.5
    drafter = ScriptedDrafter([Proposal(ids, p_draft)])
    engine = local_engine(tiny_model, drafter_factory=factory_for(drafter))
    _, rounds, finished = run(engine, prompt, spec=SPEC, max_new_tokens=6)
    assert rounds[1].p_draft == pytest.approx((0.5, 0.5))
    assert rounds[1].n_accepted == 2
    assert list(finished.output_ids) == baseline[:6]


def test_rejected_pieces_are_decoded_after_the_accepted_tokens(tiny_model, tiny_tokenizer, prompt, baseline):
    """A kept token that ends inside a multi-byte character and a rejected one that completes it: the rejected
    piece must be the whole character, decoded in context (after the kept tokens), not a lone byte."""
    tok = tiny_tokenizer
    candidates = []
    for j in range(1, len(baseline) - 3):
        head = baseline[j]
        if not tok.decode([head]).endswith("\ufffd"):
            continue
        for c in range(len(tok)):
            if c != baseline[j + 1] and "\ufffd" not in tok.decode([head, c]) and tok.decode([c]) == "\ufffd":
                candidates.append((j, c))
                break
        if candidates:
            break
    if not candidates:
        pytest.fail("the tiny model's output has no token that ends inside a character; change the prompt")
    j, completion = candidates[0]
    drafter = ScriptedDrafter([[]] * (j - 1) + [[baseline[j], completion]])
    engine = local_engine(tiny_model, drafter_factory=factory_for(drafter))
    _, rounds, finished = run(engine, prompt, spec=SPEC, max_new_tokens=j + 3)  # room for k = 2
    event = rounds[j]
    assert event.draft_ids == (baseline[j], completion) and event.n_accepted == 1
    reference = IncrementalDetokenizer(tok, prompt)
    reference.add(baseline[:j])
    expected = reference.peek([baseline[j], completion])
    assert expected[1]  # the character completes with the rejected token
    assert event.rejected_pieces == (expected[1],)


def test_sampling_round_events_with_a_scripted_drafter(tiny_model, prompt, baseline):
    script = [baseline[1:5], baseline[5:9], [7, 8, 9, 10]] * 3
    sampling = SamplingConfig(temperature=0.8, top_k=50, seed=1234)
    outs = []
    for _ in range(2):
        drafter = ScriptedDrafter(list(script))
        engine = local_engine(tiny_model, drafter_factory=factory_for(drafter))
        _, rounds, finished = run(engine, prompt, spec=SPEC, sampling=sampling, max_new_tokens=24)
        check_round_invariants(rounds, finished)
        assert not rounds[0].draft_ids
        for r in rounds[1:]:
            assert all(0.0 <= p <= 1.0 for p in r.p_target)
            assert r.p_draft == (None,) * len(r.draft_ids)
            assert 0.0 < r.p_target_of_target_id <= 1.0  # a sampled token always has probability > 0
            if r.draft_ids:
                assert r.target_status in (TokenStatus.SUBSTITUTED, TokenStatus.BONUS)
        outs.append((finished.output_ids, [r.n_accepted for r in rounds]))
    assert outs[0] == outs[1]  # the same seed gives the same reply


def test_nothing_past_an_end_of_sequence_is_verified(tiny_model, tiny_tokenizer, prompt, baseline):
    """A draft that ends the reply early is cut after its end-of-sequence id: the tokens past it could never be
    committed, so they are neither verified nor counted as drafted (nor as accepted)."""
    b = baseline
    engine = local_engine(tiny_model, drafter_factory=factory_for(ScriptedDrafter([[b[1], engine_eos(tiny_model),
                                                                                 b[3], b[4]]])))
    _, rounds, finished = run(engine, prompt, spec=SPEC, max_new_tokens=8)
    assert list(finished.output_ids) == b[:8]
    drafting = rounds[1]
    assert drafting.draft_ids == (b[1], engine_eos(tiny_model))  # cut after the end-of-sequence id
    assert drafting.n_accepted == 1 and drafting.target_id == b[2]
    assert (finished.stats.drafted_tokens, finished.stats.accepted_tokens) == (2, 1)


def engine_eos(tiny_model) -> int:
    return min(local_engine(tiny_model).eos_ids)


def test_a_proposal_ends_at_its_first_end_of_sequence():
    proposal = Proposal([5, 6, 2, 7, 2], torch.eye(8)[[5, 6, 2, 7, 2]], bucket=3, sources=("a", "b", "c", "d", "e"))
    ended = proposal.ended({2})
    assert ended.ids == [5, 6, 2] and ended.sources == ("a", "b", "c") and ended.bucket == 3
    assert torch.equal(ended.p_draft, proposal.p_draft[:3])
    assert proposal.ended({9}) is proposal and Proposal.empty().ended({2}).ids == []
