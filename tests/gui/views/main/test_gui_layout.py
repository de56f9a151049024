"""The window fits a laptop: its minimum size, no self-resize during a reply, the Speculation panel's reflow and
scrolling, the docks' remembered layout, and the scripted mode's --window-size."""

import json

from PySide6.QtCore import QSize, Qt

from fakes import FakeEngine
from gui.persistence.settings import AppSettings
from gui.views.main.window import MainWindow
from test_gui_scripted import run_gui

WAIT_MS = 10_000


def minimum(window) -> QSize:
    return window.minimumSizeHint().expandedTo(window.minimumSize())


def test_minimum_size_fits_1280_by_720(make_window):
    window = make_window()
    size = minimum(window)
    assert size.width() <= 1280 and size.height() <= 720, size
    window.resize(1280, 720)
    assert (window.width(), window.height()) == (1280, 720)


def test_no_methods_settings_are_cut_off_at_the_right_of_the_settings_dock(make_window, qtbot):
    """A method's parameter rows (suffix's long labels) fit the dock: a field that doesn't fit beside its label
    goes under it, the dock widens where the panel still needs it, and the window still fits a laptop."""
    from PySide6.QtCore import QPoint
    from PySide6.QtWidgets import QWidget
    window = make_window()
    window.resize(1600, 1000)
    controls, scroll = window.controls, window.controls_dock.widget()

    def cut_off() -> list[str]:
        right = scroll.viewport().width()
        return [f"{type(w).__name__} {w.objectName()}" for w in controls.findChildren(QWidget)
                if w.isVisible() and w.width() > 0 and w.mapTo(scroll.viewport(), QPoint(w.width(), 0)).x() > right]

    checked = []
    for row in range(controls.method.count()):
        method = controls.method.itemData(row)
        if not method or not controls.method.model().item(row).isEnabled():
            continue
        checked.append(method)
        controls.apply(method=method)
        qtbot.waitUntil(lambda: scroll.minimumWidth() > controls.minimumSizeHint().width(), timeout=2_000)
        qtbot.waitUntil(lambda: not cut_off(), timeout=2_000)
        assert minimum(window).width() <= 1229, (method, minimum(window))
    assert {"suffix", "ngram-map", "prompt-lookup+draft-model"} <= set(checked)


def test_the_window_never_resizes_itself_during_a_reply(make_window, qtbot):
    window = make_window(FakeEngine(delay=0.002))
    window.resize(1280, 720)
    qtbot.waitUntil(lambda: window.size() == QSize(1280, 720), timeout=WAIT_MS)
    window.controls.apply(method="draft-model", draft="default", k=4, max_new_tokens=120)
    sizes, minimums = set(), set()

    def record(*_):
        sizes.add((window.width(), window.height()))
        minimums.add((minimum(window).width(), minimum(window).height()))

    window.worker_thread.worker.round_verified.connect(record)
    with qtbot.waitSignal(window.reply_finished, timeout=WAIT_MS):
        assert window.send("Tell me a long story about speculative decoding")
    window.refresh_live_views()
    window.measure_baseline()
    qtbot.waitUntil(lambda: not window.generating, timeout=WAIT_MS)
    qtbot.wait(50)  # let posted layout requests run
    record()
    # the figures, the long status line and the stats' details all changed; the window's size did not
    assert "tok/s" in window.status_label.text()
    assert sizes == {(1280, 720)}
    assert all(w <= 1280 and h <= 720 for w, h in minimums)


def test_the_stats_tiles_reflow_and_the_panel_scrolls_when_short(make_window, qtbot):
    window = make_window()
    strip = window.stats_strip
    window.resize(1900, 1000)
    window.resizeDocks([window.live_dock], [620], Qt.Orientation.Horizontal)
    qtbot.waitUntil(lambda: strip.columns == 3, timeout=WAIT_MS)
    window.resizeDocks([window.live_dock], [strip.minimumWidth() + 30], Qt.Orientation.Horizontal)
    qtbot.waitUntil(lambda: strip.columns == 2, timeout=WAIT_MS)
    positions = {window.stats_strip.grid.getItemPosition(window.stats_strip.grid.indexOf(tile))[:2]
                 for tile in strip.tiles}
    assert len(positions) == len(strip.tiles) and max(column for _, column in positions) == 1
    window.resize(1280, 720)
    qtbot.waitUntil(lambda: window.live_scroll.verticalScrollBar().maximum() > 0, timeout=WAIT_MS)
    assert window.live_scroll.widget().height() > window.live_scroll.viewport().height()


def test_docks_remember_their_layout(qtbot, tmp_path):
    settings = AppSettings()

    def make():
        window = MainWindow(loader=lambda name, progress=None, **options: FakeEngine(), persist=True,
                            settings=settings)
        qtbot.addWidget(window)
        window.resize(1300, 800)
        window.show()
        return window

    first = make()
    first.live_dock.hide()
    first.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, first.history_dock)
    first.shutdown()
    second = make()
    try:
        assert second.live_dock.isHidden()
        assert second.dockWidgetArea(second.history_dock) == Qt.DockWidgetArea.RightDockWidgetArea
        assert second.dockWidgetArea(second.controls_dock) == Qt.DockWidgetArea.LeftDockWidgetArea
    finally:
        second.shutdown()


def test_scripted_window_size_and_min_size_in_the_json_line(tmp_path):
    png = tmp_path / "window.png"
    result = run_gui("gui", "--demo", "--max-new-tokens", "20", "--prompt", "Explain it", "--window-size",
                     "1366x768", "--screenshot", str(png), "--quit-when-done")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout.strip().splitlines()[-1])
    width, height = record["window_min_size"]
    assert width <= 1280 and height <= 720
    assert record["window_size"] == [1366, 768]
    from PySide6.QtGui import QImage

    assert QImage(str(png)).size() == QSize(1366, 768)


def test_a_window_size_below_the_minimum_or_malformed_is_refused():
    small = run_gui("gui", "--demo", "--prompt", "hi", "--window-size", "640x400", "--quit-when-done")
    assert small.returncode == 2
    assert "smaller than the window's minimum size" in small.stderr and small.stderr.count("\n") == 1
    bad = run_gui("gui", "--window-size", "wide")
    assert bad.returncode == 2 and "expected WIDTHxHEIGHT" in bad.stderr
