"""The round timeline (gui.views.live.timeline): a bar per round of the reply, its hit test and focus, the scroll
that follows the newest round, plain rounds, clear; the compare window's lanes, one timeline per run; a server's
steps, one bar of wall time each."""

import dataclasses

import pytest
from PySide6.QtCore import QEvent, QPoint, QPointF, Qt
from PySide6.QtGui import QColor, QHelpEvent, QMouseEvent
from PySide6.QtWidgets import QApplication, QToolTip

from engine.core.config import SpecConfig, parse_spec
import revised_events
from fakes import FakeEngine
from gui import theme
from gui.sessions.rounds import RoundRecord, is_server_step, step_seconds
from gui.sessions.session_model import SessionModel
from gui.views.live.panel import LivePanel, RoundFocusPanel
from gui.views.live.timeline import (BAR_WIDTH, EMPTY_TEXT, SERVER_NOTE, STEP, RoundTimeline, nice_ceiling,
                                     round_tooltip, share_scale)

WAIT_MS = 10_000


def fake_rounds(spec: SpecConfig, tokens: int, record: bool = True) -> list[RoundRecord]:
    """A reply's RoundRecords as the chat folds them, from the scripted engine."""
    session = SessionModel()
    revised_events.fold(session, FakeEngine().generate([{"role": "user", "content": "tell me"}], spec=spec,
                                                       max_new_tokens=tokens, record=record))
    return session.live.rounds


def make_timeline(qtbot, palette=theme.LIGHT, width: int = 460) -> RoundTimeline:
    timeline = RoundTimeline(palette)
    qtbot.addWidget(timeline)
    timeline.setFixedWidth(width)
    timeline.show()
    timeline.adjustSize()
    QApplication.processEvents()
    return timeline


def centre(timeline: RoundTimeline, position: int) -> QPoint:
    canvas = timeline.canvas
    return QPoint(int(canvas.bar_x(position) + BAR_WIDTH / 2), int(canvas.plot_rect().center().y()))


def move(widget, point: QPoint) -> None:
    event = QMouseEvent(QEvent.Type.MouseMove, QPointF(point), QPointF(widget.mapToGlobal(point)),
                        Qt.MouseButton.NoButton, Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(widget, event)


def pixel(timeline: RoundTimeline, position: int, y: float) -> QColor:
    image = timeline.canvas.grab().toImage()
    return QColor(image.pixel(int(timeline.canvas.bar_x(position) + BAR_WIDTH / 2), int(y)))


def near(colour: QColor, hex_colour: str, tolerance: int = 12) -> bool:
    other = QColor(hex_colour)
    return all(abs(a - b) <= tolerance for a, b in ((colour.red(), other.red()), (colour.green(), other.green()),
                                                     (colour.blue(), other.blue())))


def test_the_dock_has_a_timeline_with_a_bar_per_round_of_the_reply(make_window, send_and_wait):
    window = make_window()
    timeline = window.live.panel(RoundTimeline)
    assert isinstance(timeline, LivePanel) and isinstance(timeline, RoundFocusPanel) and timeline.name == "timeline"
    assert timeline.count == 0
    window.controls.apply(method="prompt-lookup", k=3, max_new_tokens=30)
    send_and_wait(window)
    rounds = window.session.live.rounds
    assert len(rounds) > 3 and timeline.count == len(rounds) and list(timeline.rounds) == list(rounds)
    drafted = sum(r.n_drafted for r in rounds)
    assert f"{len(rounds)} rounds" in timeline.totals_text
    assert f"{sum(r.n_accepted for r in rounds)}/{drafted} accepted" in timeline.totals_text
    # the newest round is in view, drawn from the foot of its bar up: its draft part, or for a plain step its verify
    last = len(rounds) - 1
    assert last in timeline.canvas.visible_range()
    top = timeline.canvas.plot_rect().bottom() - 2
    assert near(pixel(timeline, last, top), theme.LIGHT.series_draft_time if rounds[last].n_drafted
                else theme.LIGHT.series_verify_time)


def test_hovering_and_clicking_a_bar_name_its_round(qtbot):
    rounds = fake_rounds(SpecConfig(method="prompt-lookup", k=3), 40)
    timeline = make_timeline(qtbot)
    timeline.show_rounds(rounds)
    canvas = timeline.canvas
    visible = list(canvas.visible_range())
    assert len(visible) >= 10
    for position in (visible[-1], visible[-4], visible[len(visible) // 2]):
        assert canvas.position_at(centre(timeline, position).x()) == position
        with qtbot.waitSignal(timeline.round_hovered, timeout=WAIT_MS) as hovered:
            move(canvas, centre(timeline, position))
        assert hovered.args[0] is rounds[position] and timeline.hovered is rounds[position]
    assert canvas.position_at(5) is None  # the scale's gutter
    with qtbot.waitSignal(timeline.round_hovered, timeout=WAIT_MS) as hovered:
        QApplication.sendEvent(canvas, QEvent(QEvent.Type.Leave))
    assert hovered.args[0] is None

    position = visible[-2]
    with qtbot.waitSignal(timeline.round_selected, timeout=WAIT_MS) as selected:
        qtbot.mouseClick(canvas, Qt.MouseButton.LeftButton, pos=centre(timeline, position))
    assert selected.args[0] is rounds[position] and timeline.selected_position() == position


def test_the_tooltip_names_the_rounds_figures(qtbot):
    rounds = fake_rounds(SpecConfig(method="prompt-lookup", k=3), 40)
    timeline = make_timeline(qtbot)
    timeline.show_rounds(rounds)
    last = timeline.count - 1
    point = centre(timeline, last)
    QApplication.sendEvent(timeline.canvas, QHelpEvent(QEvent.Type.ToolTip, point, timeline.canvas.mapToGlobal(point)))
    assert QToolTip.text() == round_tooltip(rounds[last])
    rejected = next(r for r in rounds if r.n_drafted and r.n_accepted < r.n_drafted)
    text = round_tooltip(rejected)
    assert text.startswith(f"round {rejected.index} · prompt-lookup · drafted 3, accepted {rejected.n_accepted}")
    assert f"draft {1000 * rejected.draft_seconds:.1f} ms" in text and "rollback 1.0 ms" in text
    assert f"verify {1000 * rejected.verify_seconds:.1f} ms" in text
    assert round_tooltip(rounds[0]).startswith("round 0 (prefill) · plain decoding · one token, no draft")


def test_plain_rounds_are_one_token_rounds_with_a_dot_and_no_draft_time(qtbot):
    rounds = fake_rounds(SpecConfig(method="none"), 25)
    assert len(rounds) == 25 and all(r.n_drafted == 0 and r.n_committed == 1 for r in rounds)
    timeline = make_timeline(qtbot)
    timeline.show_rounds(rounds)
    assert timeline.count == 25 and "accepted" not in timeline.totals_text
    plot = timeline.canvas.plot_rect()
    assert near(pixel(timeline, 24, plot.bottom() - 2), theme.LIGHT.series_verify_time)  # no draft part
    mark = plot.bottom() + 3 + 4  # the middle of the box under the bar: a hollow dot, never the accepted fill
    assert not near(pixel(timeline, 24, mark), theme.LIGHT.series_bars, 40)
    speculative = fake_rounds(SpecConfig(method="prompt-lookup", k=3), 25)
    full = next(i for i, r in enumerate(speculative) if r.n_drafted and r.n_accepted == r.n_drafted)
    timeline.show_rounds(speculative)
    assert timeline.count == len(speculative)
    assert near(pixel(timeline, full, mark), theme.LIGHT.series_bars)  # a fully accepted draft: a full box


def test_the_view_follows_the_newest_round_unless_scrolled_back(qtbot):
    everything = fake_rounds(SpecConfig(method="none"), 1000)
    timeline = make_timeline(qtbot)
    growing = everything[:100]
    timeline.show_rounds(growing)
    bar = timeline.scrollbar
    assert bar.maximum() > 0 and bar.value() == bar.maximum() and 99 in timeline.canvas.visible_range()
    growing.extend(everything[100:300])  # the live list grows in place
    timeline.show_rounds(growing)
    assert timeline.count == 300 and bar.value() == bar.maximum() == 300 * STEP - timeline.canvas.plot_width()
    assert 299 in timeline.canvas.visible_range()
    bar.setValue(0)  # the user scrolls back: it stays there
    growing.extend(everything[300:])
    timeline.show_rounds(growing)
    assert bar.value() == 0 and 0 in timeline.canvas.visible_range()
    visible = timeline.canvas.visible_range()
    assert len(visible) <= timeline.canvas.plot_width() // STEP + 2  # only what is in view is painted
    timeline.canvas.grab()
    bar.setValue(bar.maximum())  # back at the end: it follows again
    timeline.show_rounds(growing + [])  # (a new list: a new reply) still the end
    assert bar.value() == bar.maximum() and 999 in timeline.canvas.visible_range()


def test_show_focus_draws_the_hovered_and_the_selected_round_and_brings_a_pick_into_view(qtbot):
    rounds = fake_rounds(SpecConfig(method="draft-model", k=4, draft="default"), 400)
    for palette in (theme.LIGHT, theme.DARK):
        timeline = make_timeline(qtbot, palette)
        timeline.show_rounds(rounds)
        plain = timeline.canvas.grab().toImage()
        last = timeline.count - 1
        timeline.show_focus(rounds[last - 1], rounds[last - 3])
        assert timeline.hovered_position() == last - 1 and timeline.selected_position() == last - 3
        assert timeline.canvas.grab().toImage() != plain
        timeline.show_focus(None, rounds[2])  # picked elsewhere (the transcript): scrolled into view
        assert 2 in timeline.canvas.visible_range() and timeline.hovered_position() is None
        other_turn = dataclasses.replace(rounds[5], turn=99)  # another reply's round: nothing of this one lit
        timeline.show_focus(other_turn, None)
        assert timeline.hovered_position() is None and timeline.selected_position() is None
        timeline.canvas.grab()


def test_the_scale_is_nice_and_leaves_the_prefill_round_out(qtbot):
    assert [nice_ceiling(ms) for ms in (0.7, 1.0, 11.3, 12, 18, 45, 130)] == [0.8, 1.0, 15.0, 15.0, 20.0, 50.0, 150.0]
    rounds = fake_rounds(SpecConfig(method="prompt-lookup", k=3), 30)
    slow_prefill = [RoundRecord(rounds[0].turn, dataclasses.replace(rounds[0].event, verify_seconds=2.0),
                                rounds[0].serials), *rounds[1:]]
    timeline = make_timeline(qtbot)
    timeline.show_rounds(slow_prefill)
    assert timeline.scale_ms() == nice_ceiling(1000 * max(r.seconds for r in rounds[1:])) < 100
    timeline.scrollbar.setValue(0)
    timeline.canvas.grab()  # the prefill bar drawn clipped
    lane = make_timeline(qtbot)
    lane.show_rounds(fake_rounds(SpecConfig(method="none"), 30))
    assert lane.scale_ms() < timeline.scale_ms()
    share_scale([timeline, lane])
    assert lane.scale_ms() == timeline.scale_ms()


def test_clear_empties_the_timeline(qtbot):
    timeline = make_timeline(qtbot)
    rounds = fake_rounds(SpecConfig(method="prompt-lookup", k=3), 300)
    timeline.show_rounds(rounds)
    timeline.show_focus(rounds[-1], rounds[-2])
    assert timeline.scrollbar.maximum() > 0
    timeline.clear()
    assert timeline.count == 0 and timeline.scrollbar.maximum() == 0 and timeline.totals_text == ""
    assert timeline.hovered is None and timeline.selected is None
    assert timeline.canvas.position_at(centre(timeline, 0).x()) is None
    assert EMPTY_TEXT == "Rounds appear here as the reply is written"
    timeline.canvas.grab()
    timeline.show_rounds(rounds[:5])  # the next reply draws again
    assert timeline.count == 5


def test_the_palette_reaches_the_colour_keys(qtbot):
    timeline = make_timeline(qtbot)
    assert theme.LIGHT.series_draft_time in timeline.keys.text()
    timeline.set_palette(theme.DARK)
    assert theme.DARK.series_verify_time in timeline.keys.text() and theme.LIGHT.series_verify_time not in \
        timeline.keys.text()


def test_each_compare_pane_has_a_timeline_of_its_runs_rounds(make_window, qtbot):
    window = make_window(FakeEngine())
    compare = window.open_compare()
    qtbot.addWidget(compare)
    compare.resize(1300, 850)
    compare.set_specs([parse_spec("prompt-lookup:k=3"), parse_spec("draft-model:k=4,draft=default")])
    compare.prompt.setPlainText("Summarise: speculative decoding drafts and verifies.")
    compare.max_new_tokens.setValue(40)
    with qtbot.waitSignal(compare.comparison_finished, timeout=WAIT_MS) as blocker:
        assert compare.run_comparison()
    session = blocker.args[0]
    assert len(compare.panes) == 3
    for pane, run in zip(compare.panes, session.runs):
        rounds = run.session.live.rounds
        assert rounds and pane.timeline.count == len(rounds) and list(pane.timeline.rounds) == list(rounds)
        assert pane.isAncestorOf(pane.timeline)
    plain, lookup, draft = (pane.timeline for pane in compare.panes)
    assert all(r.n_drafted == 0 for r in plain.rounds) and plain.count == 40  # one token a round
    assert lookup.count < plain.count and draft.count < plain.count
    assert plain.scale_ms() == lookup.scale_ms() == draft.scale_ms()  # one scale: lanes compare
    compare.set_palette(theme.DARK)
    assert theme.DARK.series_draft_time in plain.keys.text()


def server_rounds(revised: bool = True) -> list[RoundRecord]:
    """The RoundRecords of revised_events' server reply: its four steps, or the eight plain rounds it streamed first."""
    session = SessionModel()
    session.start(revised_events.started())
    for event in revised_events.plain_rounds():
        session.apply_round(event)
    if revised:
        session.revise(revised_events.revision())
    return session.live.rounds


def test_a_servers_steps_are_bars_of_their_wall_time_and_the_panel_says_so(qtbot):
    timeline = make_timeline(qtbot)
    timeline.show_rounds(fake_rounds(SpecConfig(method="prompt-lookup", k=3), 20))
    assert not timeline.server_note.isVisible() and "Server step" not in timeline.keys.text()
    rounds = server_rounds()
    assert all(is_server_step(r) for r in rounds) and not any(is_server_step(r) for r in fake_rounds(SpecConfig(), 5))
    assert [step_seconds(rounds, i) for i in range(4)] == pytest.approx([0.05, 0.03, 0.03, 0.03])
    timeline.show_rounds(rounds)
    assert timeline.server_note.isVisible() and timeline.server_note.text() == SERVER_NOTE
    assert "Server step" in timeline.keys.text() and "Draft" not in timeline.keys.text()
    assert timeline.scale_ms() == 30.0  # the steps after the prefill: 30 ms each
    plot = timeline.canvas.plot_rect()
    for position in (1, 2, 3):  # one bar, the scale's full height, in one colour: no draft/verify split
        for y in (plot.bottom() - 2, plot.center().y(), plot.top() + 6):
            assert near(pixel(timeline, position, y), theme.LIGHT.series_baseline), (position, y)
    assert not near(pixel(timeline, 2, plot.bottom() + 3 + 4), theme.LIGHT.series_bars)  # kept 0 of 3
    assert near(pixel(timeline, 1, plot.bottom() + 3 + 4), theme.LIGHT.series_bars)  # kept 3 of 3
    point = centre(timeline, 2)
    QApplication.sendEvent(timeline.canvas, QHelpEvent(QEvent.Type.ToolTip, point, timeline.canvas.mapToGlobal(point)))
    assert QToolTip.text() == round_tooltip(rounds[2], 0.03) == (
        "round 2 · server step · drafted 3, accepted 0 · 30.0 ms since the step before (the server doesn't split "
        "draft and verify time)")
    plain = server_rounds(revised=False)  # as they streamed: a step's tokens arrive together (0 ms after the first)
    assert [round(step_seconds(plain, i), 3) for i in range(8)] == [0.05, 0.03, 0.0, 0.0, 0.0, 0.03, 0.03, 0.0]
    timeline.show_rounds(plain)
    assert timeline.count == 8 and timeline.server_note.isVisible()
    assert round_tooltip(plain[3], 0.0).startswith("round 3 · server step · one token, no draft · 0.00 ms")
    timeline.clear()
    assert not timeline.server_note.isVisible() and "Draft" in timeline.keys.text()


def test_a_round_verified_on_a_server_shows_its_network_share(qtbot):
    """Drafts made here, verified on a server (engine.remote.verify): the bar stacks draft, network and verify."""
    rounds = [dataclasses.replace(r, event=dataclasses.replace(r.event, verify_seconds=0.030, network_seconds=0.010,
                                                               rollback_seconds=0.0, draft_seconds=0.0))
              for r in fake_rounds(SpecConfig(method="prompt-lookup", k=3), 20)]
    timeline = make_timeline(qtbot)
    timeline.show_rounds(rounds)
    assert "Network" in timeline.keys.text() and "Verify" in timeline.keys.text()
    assert rounds[1].verify_seconds == pytest.approx(0.020) and rounds[1].network_seconds == 0.010
    plot = timeline.canvas.plot_rect()
    per_ms = plot.height() / timeline.scale_ms()
    assert near(pixel(timeline, 1, plot.bottom() - 5 * per_ms), theme.LIGHT.series_network_time)  # the first 10 ms
    assert near(pixel(timeline, 1, plot.bottom() - 20 * per_ms), theme.LIGHT.series_verify_time)
    assert "· network 10.0 ms · verify 20.0 ms ·" in round_tooltip(rounds[1])
    timeline.show_rounds(fake_rounds(SpecConfig(method="prompt-lookup", k=3), 20))
    assert "Network" not in timeline.keys.text()
