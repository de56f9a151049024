"""A server's reply in the main window (gui/views/main/reply_events.py): streamed plain, then its rounds revised at
the end (revised_events: the worker's rounds_revised). The reply is drawn again with the revised colours, a draft the
server does not name as a struck-through ▯ with its tooltip, the note under the reply's header; the live panels
redraw from the revised rounds (acceptance, the timeline's server steps); the history keeps the revised rounds, so
the chat reopens so; a revision of another request, an earlier turn and another window are left alone."""

from __future__ import annotations

from PySide6.QtWidgets import QApplication

import revised_events
from engine.core.events import TokenStatus
from gui.sessions.rounds import token_acceptance
from gui.views.chat.transcript import describe_token
from gui.views.live.timeline import SERVER_NOTE, RoundTimeline
from revised_events import RevisingEngine
from transcript_probe import fragments

WAIT_MS = 10_000
P, A, R, S, B = (TokenStatus.PLAIN, TokenStatus.ACCEPTED, TokenStatus.REJECTED, TokenStatus.SUBSTITUTED,
                 TokenStatus.BONUS)
REVISED = [("Hello", P), (",", A), (" world", A), ("!", A), (" How", B), ("▯", R), ("▯", R), ("▯", R), (" are", S),
           (" you", A), ("?", A)]


def drawn(window) -> list[tuple[str, TokenStatus]]:
    """(text drawn, status) of every token fragment in the transcript."""
    return [(text, token.status) for token, _fmt, text, _ in fragments(window)]


def send_paused(window, qtbot, text: str = "Hello?") -> None:
    """Send; wait for the plain rounds (the engine holds the revision until `resume`)."""
    assert window.send(text)
    qtbot.waitUntil(lambda: len(window.session.tokens) >= 8 and window.session.current is not None, timeout=WAIT_MS)
    QApplication.processEvents()


def test_a_servers_revised_rounds_redraw_the_reply_the_panels_and_the_reopened_chat(make_window, qtbot):
    engine = RevisingEngine(pause_after=0)
    window = make_window(engine)
    timeline = window.live.panel(RoundTimeline)
    send_paused(window, qtbot)
    assert drawn(window) == [(piece, P) for piece in revised_events.PIECES]
    window.refresh_live_views()
    assert timeline.count == 8 and timeline.server_note.isVisible() and timeline.server_note.text() == SERVER_NOTE
    with qtbot.waitSignal(window.reply_finished, timeout=WAIT_MS) as finished:
        engine.resume.set()
    turn = finished.args[0]
    assert drawn(window) == REVISED
    ghost_format = next(fmt for token, fmt, text, _ in fragments(window) if text == "▯")
    assert ghost_format.fontStrikeOut()  # the rejected style, not colour alone
    ghost = next(token for token in turn.tokens if token.status is R)
    assert "does not say which" in describe_token(ghost, window.session.round_of)
    assert "server does not name" in describe_token(turn.tokens[8], window.session.round_of)  # the substitution
    kept = describe_token(turn.tokens[1], window.session.round_of)
    assert "p_draft — (the server does not say)" in kept and "one-hot" not in kept
    assert token_acceptance(turn.tokens[1]) is None  # colour by acceptance: no value, not a one-hot guess
    text = window.transcript.toPlainText()
    assert revised_events.NOTE in text and text.index(revised_events.NOTE) < text.index("Hello, world! How▯▯▯ are you?")
    assert window.stats_strip.acceptance.value.text() == "56%"
    assert timeline.count == 4 and timeline.totals_text == "4 rounds · 5/9 accepted"
    assert timeline.server_note.isVisible() and "Server step" in timeline.keys.text()
    assert "Draft" not in timeline.keys.text()  # the server's steps have no draft/verify split to key

    document_end = window.transcript.document().characterCount() - 1
    assert "How are you?" in window.transcript.text_between(0, document_end)  # a copy leaves the drafts out
    window.set_show_rejected(False)
    assert drawn(window) == [item for item in REVISED if item[1] is not R]
    window.set_show_rejected(True)

    cid = window.session.conversation_id
    window.new_chat()
    assert drawn(window) == []
    assert window.conversations.open(cid)
    assert drawn(window) == REVISED  # the history kept the revised rounds
    assert timeline.count == 4 and window.stats_strip.acceptance.value.text() == "56%"


def test_a_revision_of_another_request_an_earlier_turn_and_another_window_are_left_alone(make_window, qtbot,
                                                                                          send_and_wait):
    other = make_window()  # a local engine's chat beside it, on the same history
    send_and_wait(other, "A local reply")
    other_drawn, other_id = drawn(other), other.session.conversation_id
    other_stored = other.store.load_conversation(other_id).messages[1].tokens

    engine = RevisingEngine(pause_after=0)
    window = make_window(engine)
    send_paused(window, qtbot)
    request_id = window.session.active.request_id
    window.reply_events.rounds_revised(request_id + 1, revised_events.revision())  # a stopped request's straggler
    assert drawn(window) == [(piece, P) for piece in revised_events.PIECES]
    with qtbot.waitSignal(window.reply_finished, timeout=WAIT_MS):
        engine.resume.set()
    first = drawn(window)
    assert first == REVISED
    send_and_wait(window, "Again?")  # a second reply, revised in its turn
    assert drawn(window) == REVISED + REVISED
    assert [t.serial for t in window.session.tokens] == list(range(22))
    assert [r.serials[0] for r in window.session.turns[3].rounds] == [11, 12, 16, 20]
    assert other.session.conversation_id == other_id and drawn(other) == other_drawn
    assert other.store.load_conversation(other_id).messages[1].tokens == other_stored


def test_a_recorded_vllm_reply_is_drawn_by_the_servers_steps(make_window, send_and_wait):
    window = make_window(RevisingEngine(stream=revised_events.recorded_vllm))
    turn = send_and_wait(window)
    steps = [(" sat", A), (" on", A), (" the", A), (" mat", B), ("▯", R), ("▯", R), ("▯", R), (".", S)]
    assert drawn(window) == [("The", P), (" cat", P)] + steps  # the end of sequence has no text to draw
    assert turn.text == "The cat sat on the mat." and turn.stats.drafted_tokens == 9
    assert window.stats_strip.acceptance.value.text() == "56%"
    assert window.live.panel(RoundTimeline).count == 5
    cid = window.session.conversation_id
    window.new_chat()
    assert window.conversations.open(cid) and drawn(window) == [("The", P), (" cat", P)] + steps
