"""engine.core.tokens: the one fold of a round into display tokens (order, statuses, 0-based positions, p's,
replaced pieces, stops), and the terminal drawing from it."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from engine.core.events import RoundVerified, TokenStatus
from engine.cli.terminal import TerminalStream
from engine.core.tokens import committed_text, draft_position_words, fill_replacements, fold_round

A, R, S, B, P = (TokenStatus.ACCEPTED, TokenStatus.REJECTED, TokenStatus.SUBSTITUTED, TokenStatus.BONUS,
                 TokenStatus.PLAIN)


def make_round(index, draft, n_accepted, target, status, committed=None, p_draft=None):
    draft_ids = tuple(100 + i for i in range(len(draft)))
    pieces = tuple(draft[:n_accepted]) + (target,)
    ids = draft_ids[:n_accepted] + (7,)
    committed = len(pieces) if committed is None else committed
    return RoundVerified(
        index=index, drafter="draft-model" if draft else "target", draft_ids=draft_ids, draft_pieces=tuple(draft),
        n_accepted=n_accepted, target_id=7, target_status=status, target_piece=target,
        p_target=tuple(0.9 - 0.1 * i for i in range(len(draft))),
        p_draft=p_draft if p_draft is not None else tuple(0.8 for _ in draft),
        p_target_of_target_id=0.6, committed_ids=ids[:committed], committed_pieces=pieces[:committed],
        draft_seconds=0.01, verify_seconds=0.02, elapsed_seconds=0.1, n_committed_total=0)


def test_partial_acceptance_puts_ghosts_before_the_correction_with_0_based_positions():
    tokens = fold_round(make_round(3, [" is", " the", " big", " city"], 2, " capital", S))
    assert [(t.text, t.status, t.position) for t in tokens] == [
        (" is", A, 0), (" the", A, 1), (" big", R, 2), (" city", R, 3), (" capital", S, 2)]
    assert [t.token_id for t in tokens] == [100, 101, 102, 103, 7]
    assert all(t.round_index == 3 and t.draft_length == 4 and t.drafter == "draft-model" for t in tokens)
    assert tokens[2].p_target == pytest.approx(0.7) and tokens[2].p_draft == 0.8
    correction = tokens[-1]
    assert (correction.p_target, correction.p_draft) == (0.6, None)
    assert (correction.replaced, correction.replaced_p_target, correction.replaced_p_draft) == \
        (" big", pytest.approx(0.7), 0.8)
    assert [t.committed for t in tokens] == [True, True, False, False, True]
    assert committed_text(tokens) == " is the capital"


def test_bonus_plain_cut_and_one_hot_rounds():
    bonus = fold_round(make_round(1, [" of", " France"], 2, ".", B))
    assert [(t.status, t.position) for t in bonus] == [(A, 0), (A, 1), (B, 2)]
    assert bonus[-1].replaced is None
    plain = fold_round(make_round(0, [], 0, "Paris", P))
    assert [(t.text, t.status, t.position, t.drafter) for t in plain] == [("Paris", P, None, "target")]
    cut = fold_round(make_round(2, [" a", " b", " c"], 1, " d", S, committed=1))
    assert [(t.text, t.status) for t in cut] == [(" a", A)]  # a stop cut the rest: no ghosts, no correction
    one_hot = fold_round(make_round(4, [" x"], 0, " y", S, p_draft=(None,)))
    assert [(t.status, t.p_draft) for t in one_hot] == [(R, None), (S, None)]
    assert one_hot[-1].replaced == " x"


def test_fill_replacements_restores_what_a_stored_round_leaves_out():
    live = fold_round(make_round(3, [" is", " big"], 1, " the", S))
    bare = [t if t.status is not S else type(t)(**{**{f: getattr(t, f) for f in t.__slots__},
                                                   "replaced": None, "replaced_p_target": None,
                                                   "replaced_p_draft": None}) for t in live]
    assert bare != live
    assert fill_replacements(bare) == live


def test_position_words_count_from_one_for_a_person():
    partial = fold_round(make_round(1, [" is", " big"], 1, " the", S))
    assert draft_position_words(partial[0]) == "draft position 1 of 2"
    assert draft_position_words(partial[-1]) == "draft position 2 of 2"
    bonus = fold_round(make_round(1, [" of"], 1, ".", B))
    assert draft_position_words(bonus[-1]) == "draft position 2: after all 1 drafted tokens"
    plain = fold_round(make_round(0, [], 0, "Paris", P))
    assert draft_position_words(plain[0]).startswith("draft position: —")


@pytest.mark.parametrize("show_rejected", [True, False])
def test_terminal_draws_the_fold(show_rejected):
    out = io.StringIO()
    stream = TerminalStream(show_rejected=show_rejected, console=Console(file=out, force_terminal=False))
    stream.round(make_round(1, [" is", " big"], 1, " the", S))
    stream.round(make_round(2, [" a", " b", " c"], 1, " d", S, committed=1))  # cut: its ghosts are not drawn
    expected = " is big the a" if show_rejected else " is the a"
    assert out.getvalue() == expected


def test_a_cross_tokenizer_round_keeps_the_draft_pieces_of_each_drafted_token():
    import dataclasses
    event = dataclasses.replace(make_round(5, ["hello", " wor", "ld"], 2, " world", S),
                                draft_sources=("hel · lo", " world", " world"))
    tokens = fold_round(event)
    assert [(t.status, t.draft_source) for t in tokens] == [
        (A, "hel · lo"), (A, " world"), (R, " world"), (S, None)]
    assert all(t.draft_source is None for t in fold_round(make_round(1, [" of"], 1, ".", B)))
