"""A chat remembers how it ran (reopened: its stats cards, graphs and settings, offered to apply; new chats in
the sidebar from their first message), and one baseline per model, device and dtype (measured once, with its
date, used by every reply and kept over New chat and a restart)."""

import pytest

from fakes import FakeEngine
from gui import theme
from gui.views.main.window import MainWindow

WAIT_MS = 10_000


def stat(window, tile):
    return getattr(window.stats_strip, tile).value.text()


def test_reopened_chat_restores_its_stats_graphs_and_settings(make_window, send_and_wait, qtbot):
    window = make_window()
    window.controls.apply(method="prompt-lookup", k=3, max_new_tokens=40, temperature=0.7, seed=11)
    with qtbot.waitSignal(window.reply_finished, timeout=WAIT_MS) as blocker:
        assert window.send("Tell me about the sea")
        assert window.history_panel.titles() == ["Tell me about the sea"]  # in the sidebar as soon as it starts
    turn = blocker.args[0]
    cid = window.session.conversation_id
    live = window.session.live
    shown = {tile: stat(window, tile) for tile in ("tok_per_s", "acceptance", "mean_length")}
    series = (live.acceptance_cumulative.data(), live.speed_cumulative.data())
    window.new_chat()
    assert stat(window, "acceptance") != shown["acceptance"]
    window.controls.apply(method="none", k=6, temperature=0.0, seed=-1)
    assert window.conversations.open(cid)
    live = window.session.live
    assert live.snapshot() == turn.stats  # the final stats, as saved
    assert live.acceptance_cumulative.data() == series[0]  # the same fold again (times stored to the µs)
    assert [pytest.approx(v, rel=1e-3) for v in live.speed_cumulative.data()[1]] == series[1][1]
    assert {tile: stat(window, tile) for tile in shown} == shown
    acceptance_x, _ = window.plots.acceptance_cumulative_curve.getData()
    assert acceptance_x is not None and len(acceptance_x) == len(series[0][0]) > 0
    # the settings it ran with are offered, and applied on request
    controls = window.controls
    assert controls.saved_box.isVisibleTo(controls)
    assert controls.saved_note.text() == "This chat ran with prompt-lookup:k=3 · temperature 0.7 · seed 11 · 40 tokens."
    assert controls.method_name() == "none"  # nothing changes until asked
    controls.saved_apply.click()
    assert (controls.method_name(), controls.k.value(), controls.sampling_box.sampling().seed) == ("prompt-lookup", 3, 11)
    assert controls.sampling_box.sampling().temperature == pytest.approx(0.7) and controls.max_new_tokens.value() == 40
    assert not controls.saved_box.isVisibleTo(controls)
    window.new_chat()
    assert not controls.saved_box.isVisibleTo(controls)


def test_one_baseline_measured_once_dated_and_used_everywhere(make_window, send_and_wait, qtbot):
    window = make_window()
    window.controls.apply(method="prompt-lookup", k=4, max_new_tokens=30)
    send_and_wait(window)
    with qtbot.waitSignal(window.baseline_measured, timeout=WAIT_MS) as blocker:
        window.stats_strip.measure.click()
    baseline = blocker.args[0]
    assert window.stats_strip.measure.text() == "Measure plain speed again"
    assert f"{baseline:.1f} tok/s, measured " in window.stats_strip.measure.toolTip()
    assert f"{baseline:.1f} tok/s, measured " in window.stats_strip.speedup.toolTip()  # the figure's date
    # a plain reply is the reference: no "0.80×" against itself, and it does not replace the measurement
    window.controls.apply(method="none")
    send_and_wait(window, "plain now")
    assert stat(window, "speedup") == "—"
    assert window.session.baseline().tok_per_s == baseline
    # New chat says the same figure the next reply uses
    window.new_chat()
    assert f"plain speed {baseline:.1f} tok/s, measured " in window.status_label.text()
    window.controls.apply(method="prompt-lookup")
    turn = send_and_wait(window, "again")
    assert window.session.figures().speedup == pytest.approx(turn.stats.tok_per_s / baseline)
    assert window.plots.baseline_line.value() == baseline
    key = "default · cpu · float32"
    assert window.settings.baselines()[key]["tok_per_s"] == baseline


def test_the_baseline_survives_a_restart(qtbot):
    engine = FakeEngine()
    windows = []
    for _ in range(2):
        window = MainWindow(loader=lambda name, progress=None, **options: engine, palette=theme.LIGHT, persist=True)
        qtbot.addWidget(window)
        windows.append(window)
        with qtbot.waitSignal(window.model_ready, timeout=WAIT_MS):
            window.start()
        if len(windows) == 1:
            with qtbot.waitSignal(window.baseline_measured, timeout=WAIT_MS):
                window.measure_baseline()
            measured = window.session.baseline()
        window.shutdown()
    remembered = windows[1].session.baseline()
    assert remembered.tok_per_s == pytest.approx(measured.tok_per_s)
    assert remembered.measured_at == pytest.approx(measured.measured_at)
    assert windows[1].stats_strip.measure.text() == "Measure plain speed again"
