"""SessionModel: events fold into transcript tokens (the fold's own DisplayTokens, numbered by serial) and stats
series (pure Python, no widgets). Positions are engine.core.tokens' 0-based draft indices. A server's rounds revised
at the end of its reply (RoundsRevised) replace the reply's tokens, rounds and figures, and no other turn's."""

import dataclasses

import pytest

from engine.core.events import GenerationFinished, GenerationStarted, RoundVerified, TokenStatus
from engine.core.stats import StatsAccumulator
from engine.core.tokens import fold_round
import revised_events
from gui.sessions.session_model import SessionModel


def started(method="draft-model", k=3, model="m"):
    return GenerationStarted(spec_label=f"{method}:k={k}", method=method, k=k, model=model, draft=None,
                             device="cpu", dtype="float32", greedy=True, prompt_tokens=5,
                             reused_prefix_tokens=0, max_new_tokens=64)


def round_event(index, draft, n_accepted, target, status, committed=None, elapsed=None, total=0):
    """draft: list of pieces; target: the target's piece."""
    pieces = tuple(draft[:n_accepted]) + (target,)
    ids = tuple(range(100 + 10 * index, 100 + 10 * index + len(pieces)))
    if committed is not None:
        pieces, ids = pieces[:committed], ids[:committed]
    return RoundVerified(
        index=index, drafter="draft-model" if draft else "none",
        draft_ids=tuple(range(500 + 10 * index, 500 + 10 * index + len(draft))), draft_pieces=tuple(draft),
        n_accepted=n_accepted, target_id=999, target_status=status, target_piece=target,
        p_target=tuple(0.9 - 0.2 * i for i in range(len(draft))), p_draft=tuple(0.7 for _ in draft),
        p_target_of_target_id=0.6, committed_ids=ids, committed_pieces=pieces, draft_seconds=0.01,
        verify_seconds=0.1, elapsed_seconds=elapsed if elapsed is not None else 0.1 * (index + 1),
        n_committed_total=total + len(ids))


def test_round_becomes_accepted_then_rejected_ghosts_then_correction():
    session = SessionModel()
    session.add_user("hi")
    session.start(started(k=3))
    session.apply_round(round_event(0, [], 0, "Hello", TokenStatus.PLAIN))
    event = round_event(1, [" big", " world", "!"], 1, " wide", TokenStatus.SUBSTITUTED, total=1)
    tokens = session.apply_round(event)
    assert tokens == [dataclasses.replace(t, serial=1 + i) for i, t in enumerate(fold_round(event))]
    assert [(t.text, t.status) for t in tokens] == [
        (" big", TokenStatus.ACCEPTED), (" world", TokenStatus.REJECTED), ("!", TokenStatus.REJECTED),
        (" wide", TokenStatus.SUBSTITUTED)]
    accepted, ghost, _, correction = tokens
    assert (accepted.position, accepted.draft_length, accepted.p_target, accepted.p_draft) == (0, 3, 0.9, 0.7)
    assert (ghost.position, ghost.p_target, ghost.p_draft) == (1, pytest.approx(0.7), 0.7)
    assert correction.position == 1 and correction.p_target == 0.6 and correction.replaced == " world"
    assert session.current.text == "Hello big wide"
    assert [t.serial for t in session.tokens] == list(range(5))


def test_bonus_position_is_after_the_whole_draft_and_plain_has_none():
    session = SessionModel()
    session.start(started(k=2))
    plain = session.apply_round(round_event(0, [], 0, "A", TokenStatus.PLAIN))[0]
    tokens = session.apply_round(round_event(1, ["b", "c"], 2, "d", TokenStatus.BONUS, total=1))
    assert plain.position is None and plain.status is TokenStatus.PLAIN
    assert [t.status for t in tokens] == [TokenStatus.ACCEPTED, TokenStatus.ACCEPTED, TokenStatus.BONUS]
    assert tokens[-1].position == 2  # one past the last drafted token


def test_a_round_cut_by_a_stop_shows_no_ghosts():
    session = SessionModel()
    session.start(started(k=3))
    tokens = session.apply_round(round_event(0, ["x", "y", "z"], 2, "w", TokenStatus.SUBSTITUTED, committed=1))
    assert [(t.text, t.status) for t in tokens] == [("x", TokenStatus.ACCEPTED)]
    assert session.current.text == "x"


def test_conversation_is_multi_turn_with_the_system_prompt():
    session = SessionModel(system_prompt="Be brief.")
    session.add_user("one")
    session.start(started())
    session.apply_round(round_event(0, [], 0, "first", TokenStatus.PLAIN))
    session.finish(GenerationFinished("eos", "first", (1,), StatsAccumulator(3).snapshot()))
    session.add_user("two")
    assert session.conversation() == [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "one"},
        {"role": "assistant", "content": "first"}, {"role": "user", "content": "two"}]


def test_failure_before_any_token_takes_the_message_back():
    session = SessionModel()
    session.add_user("keep me")
    assert session.fail("tokenizers differ") == "keep me"
    assert session.turns == []
    session.add_user("again")
    session.start(started())
    session.apply_round(round_event(0, [], 0, "partial", TokenStatus.PLAIN))
    assert session.fail("boom") is None
    assert session.turns[-1].error == "boom" and session.turns[-1].text == "partial"


def test_live_series_and_figures_follow_the_rounds():
    session = SessionModel()
    session.start(started(k=2))
    events = [round_event(0, [], 0, "a", TokenStatus.PLAIN, elapsed=0.5),
              round_event(1, ["b", "c"], 2, "d", TokenStatus.BONUS, elapsed=1.0, total=1),
              round_event(2, ["e", "f"], 0, "g", TokenStatus.SUBSTITUTED, elapsed=1.5, total=4)]
    for event in events:
        session.apply_round(event)
    x, y = session.live.acceptance_cumulative.data()
    assert x == [4, 5] and y == [1.0, 0.5]
    sx, sy = session.live.speed_cumulative.data()
    assert sx == [1.0, 1.5] and sy == pytest.approx([3 / 0.5, 4 / 1.0])
    rx, ry = session.live.acceptance_rolling.data()
    assert rx == [4, 5] and ry == [1.0, 0.5]
    rsx, rsy = session.live.speed_rolling.data()
    assert rsx == [1.0, 1.5] and rsy == pytest.approx([3 / 0.5, 4 / 1.0])
    figures = session.figures_against(None)
    assert figures.acceptance_rate == 0.5 and figures.speedup is None and figures.theoretical_speedup > 1
    assert figures.mean_accepted_length == pytest.approx(5 / 3)


def test_rolling_series_forget_what_left_their_window():
    """The rolling acceptance covers the last ROLLING_ROUNDS drafting rounds, the rolling tok/s the last
    ROLLING_SECONDS: engine.core.stats' definitions applied to those rounds alone."""
    from gui.sessions.session_model import ROLLING_ROUNDS, ROLLING_SECONDS

    session = SessionModel()
    session.start(started(k=2))
    session.apply_round(round_event(0, [], 0, "a", TokenStatus.PLAIN, elapsed=0.1))
    total, index = 1, 1
    for _ in range(ROLLING_ROUNDS):  # fully accepted drafts
        session.apply_round(round_event(index, ["b", "c"], 2, "d", TokenStatus.BONUS, elapsed=0.1 * (index + 1),
                                        total=total))
        total, index = total + 3, index + 1
    n_rejected = max(ROLLING_ROUNDS, int(ROLLING_SECONDS / 0.1)) + 5  # more than either window holds
    for _ in range(n_rejected):  # then fully rejected ones, 1 token each 0.1 s: the windows hold only these
        session.apply_round(round_event(index, ["x", "y"], 0, "z", TokenStatus.SUBSTITUTED,
                                        elapsed=0.1 * (index + 1), total=total))
        total, index = total + 1, index + 1
    _, rolling = session.live.acceptance_rolling.data()
    _, cumulative = session.live.acceptance_cumulative.data()
    assert rolling[-1] == 0.0 and cumulative[-1] == pytest.approx(ROLLING_ROUNDS / (ROLLING_ROUNDS + n_rejected))
    _, speed = session.live.speed_rolling.data()
    _, overall = session.live.speed_cumulative.data()
    assert speed[-1] == pytest.approx(1 / 0.1) and overall[-1] > speed[-1]




def test_revised_rounds_replace_the_replys_tokens_rounds_and_figures():
    session = SessionModel()
    session.add_user("hi")
    revised_events.fold(session, revised_events.events()[:-2])  # started and the plain rounds
    turn = session.current
    assert [t.status for t in turn.tokens] == [TokenStatus.PLAIN] * 8 and len(turn.rounds) == 8
    version = session.live.version
    tokens = session.revise(revised_events.revision())
    assert tokens == turn.tokens == session.tokens
    assert [(t.text, t.status) for t in tokens] == [
        ("Hello", TokenStatus.PLAIN), (",", TokenStatus.ACCEPTED), (" world", TokenStatus.ACCEPTED),
        ("!", TokenStatus.ACCEPTED), (" How", TokenStatus.BONUS), ("", TokenStatus.REJECTED),
        ("", TokenStatus.REJECTED), ("", TokenStatus.REJECTED), (" are", TokenStatus.SUBSTITUTED),
        (" you", TokenStatus.ACCEPTED), ("?", TokenStatus.ACCEPTED)]
    assert all(t.token_id == -1 for t in tokens[5:8]) and tokens[8].replaced == ""
    assert [t.serial for t in tokens] == list(range(11))
    assert [r.serials for r in turn.rounds] == [(0,), (1, 2, 3, 4), (5, 6, 7, 8), (9, 10)]
    assert all(session.round_of(s) is r for r in turn.rounds for s in r.serials)
    assert session.live.rounds == turn.rounds and turn.text == "".join(revised_events.PIECES)
    assert turn.notes == (revised_events.NOTE,)
    live = session.live.snapshot()
    assert (live.drafted_tokens, live.accepted_tokens, live.rounds, live.committed_tokens) == (
        revised_events.DRAFTED, revised_events.ACCEPTED, revised_events.STEPS, 8)
    assert session.live.version > version  # the panels that drew the plain rounds redraw
    assert session.live.acceptance_cumulative.data()[1] == pytest.approx([1.0, 0.5, 5 / 9])
    finished = session.finish(revised_events.finished())
    assert finished is turn and turn.stats.drafted_tokens == revised_events.DRAFTED


def test_a_revision_leaves_the_turns_before_it_alone():
    session = SessionModel()
    session.add_user("one")
    revised_events.fold(session, revised_events.events())
    first = list(session.tokens)
    session.add_user("two")
    revised_events.fold(session, revised_events.events())
    assert session.tokens[:11] == first and session.turns[1].tokens == first
    second = session.turns[3]
    assert [t.serial for t in second.tokens] == list(range(11, 22)) and session.tokens[11:] == second.tokens
    assert [r.serials[0] for r in second.rounds] == [11, 12, 16, 20] and [r.turn for r in second.rounds] == [3] * 4
    assert session.round_of(3).turn == 1 and session.round_of(14).turn == 3
    assert second.notes == (revised_events.NOTE,) and session.turns[1].notes == (revised_events.NOTE,)


def test_a_revision_with_no_reply_in_progress_is_an_error():
    with pytest.raises(RuntimeError, match="before GenerationStarted"):
        SessionModel().revise(revised_events.revision())
