"""The round focus in the window (issue 23, items 1 and 2): a hovered token highlights its round in the transcript
and the timeline, a hovered bar the reverse; a clicked token picks its round for the tree panel and opens its tree
beside it; a new reply clears the focus; View → Record each round's tree off: the next reply's rounds carry no
tree and the views say so."""

from PySide6.QtCore import QPoint

from gui import theme
from gui.views.live.round_tree import RoundTreePanel
from gui.views.live.timeline import RoundTimeline

WAIT_MS = 10_000


def _reply(make_window, send_and_wait):
    window = make_window()
    window.controls.apply(method="draft-model", draft="default", k=3, max_new_tokens=30)
    return window, send_and_wait(window)


def test_hover_and_click_move_the_focus_everywhere(make_window, send_and_wait, qtbot):
    window, turn = _reply(make_window, send_and_wait)
    focus, timeline, tree = window.round_focus, window.live.panel(RoundTimeline), window.live.panel(RoundTreePanel)
    record = turn.rounds[2]
    assert window.session.live.rounds == turn.rounds and record.detail is not None
    window.transcript.token_hovered.emit(record.serials[0])
    assert focus.hovered is record and timeline.hovered is record
    highlighted = {s.cursor.charFormat().property(theme.TOKEN_SERIAL_PROPERTY)
                   for s in window.transcript.extraSelections()}
    assert highlighted and highlighted <= set(record.serials)
    window.transcript.token_hovered.emit(-1)
    assert focus.hovered is None and timeline.hovered is None and not window.transcript.extraSelections()
    timeline.round_hovered.emit(turn.rounds[3])  # a bar hovered: the transcript shows its tokens
    assert focus.hovered is turn.rounds[3] and window.transcript.extraSelections()

    window.transcript.token_clicked.emit(record.serials[-1], QPoint(200, 200))
    assert focus.selected is record and tree.shown() is record and timeline.selected is record
    qtbot.waitUntil(window.token_popover.isVisible, timeout=WAIT_MS)
    shown = window.token_popover.view.text()
    assert f"Round {record.index}" in shown and record.event.target_piece.strip() in shown
    window.set_theme("dark")  # the popover follows the theme with the panels
    window.token_popover.close()
    tree.step(1)  # the tree's next button picks the next round for every view
    assert focus.selected is turn.rounds[3] and timeline.selected is turn.rounds[3]

    send_and_wait(window, "Another one")  # a new reply: the old focus is gone
    assert focus.selected is None and focus.hovered is None and tree.shown() is window.session.live.rounds[-1]


def test_recording_off_leaves_the_rounds_without_a_tree(make_window, send_and_wait):
    window, turn = _reply(make_window, send_and_wait)
    assert all(r.detail is not None for r in turn.rounds)
    window.record_action.setChecked(False)
    assert window.session.record_rounds is False
    again = send_and_wait(window, "Once more")
    assert again.rounds and all(r.detail is None for r in again.rounds)
    assert window.session.round_of(again.rounds[1].serials[0]) is again.rounds[1]
    window.transcript.token_clicked.emit(again.rounds[1].serials[0], QPoint(100, 100))
    assert "not recorded" in window.token_popover.view.text()
