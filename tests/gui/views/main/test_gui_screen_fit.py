"""The window fits the screen it opens on: the first window at most 90 % of the screen's available area,
centred; a remembered geometry clamped to the current screen; a laptop-sized window (90 % of 1366 × 768) lays
out with nothing cut off (the settings and the live dock at their minimum, the verify-cost table folded)."""

from PySide6.QtCore import QPoint, QRect, QSize
from PySide6.QtGui import QGuiApplication

from engine.core.stats import VerifyCost
from gui import theme
from gui.views.live.cost_curve import CostCurveView
from gui.views.main.screen_fit import SCREEN_SHARE, fit_to_screen, place_on_screen
from gui.worker import CostCurve

LAPTOP = QRect(0, 0, 1366, 768)
FULL_HD = QRect(0, 0, 1920, 1080)
RIGHT_MONITOR = QRect(1920, 0, 2560, 1440)  # a second screen, right of the first (non-zero origin)
FIRST = QSize(1440, 900)  # MainWindow.sizeHint


def test_a_first_window_is_at_most_90_percent_of_a_laptop_screen_and_centred():
    placed = fit_to_screen(FIRST, LAPTOP)
    assert placed.size() == QSize(1229, 691)  # int(0.9 × 1366), int(0.9 × 768)
    assert placed.center() == LAPTOP.center() or abs(placed.center().x() - LAPTOP.center().x()) <= 1
    assert LAPTOP.contains(placed)


def test_a_first_window_that_fits_keeps_its_size_centred():
    placed = fit_to_screen(FIRST, FULL_HD)
    assert placed.size() == FIRST  # 1440 × 900 is under 90 % of 1920 × 1080
    assert placed.topLeft() == QPoint(240, 90)


def test_a_first_window_on_a_screen_with_a_non_zero_origin():
    placed = fit_to_screen(QSize(4000, 3000), RIGHT_MONITOR)
    assert placed.size() == QSize(int(2560 * SCREEN_SHARE), int(1440 * SCREEN_SHARE))
    assert RIGHT_MONITOR.contains(placed) and placed.left() == 1920 + 128 and placed.top() == 72
    # a panel at the top (availableGeometry starts below it)
    below_panel = QRect(0, 32, 1366, 736)
    assert fit_to_screen(FIRST, below_panel).top() == 32 + (736 - int(736 * SCREEN_SHARE)) // 2


def test_a_remembered_geometry_that_fits_stays_where_it_was():
    saved = QRect(30, 50, 1300, 700)  # 95 % of the width, on the screen: the user's choice
    assert fit_to_screen(saved, LAPTOP) == saved
    on_second = QRect(2000, 100, 1600, 1000)
    assert fit_to_screen(on_second, RIGHT_MONITOR) == on_second


def test_a_remembered_geometry_bigger_than_the_screen_shrinks_to_90_percent_on_it():
    saved_on_big_monitor = QRect(200, 100, 2400, 1350)
    placed = fit_to_screen(saved_on_big_monitor, LAPTOP)
    assert placed.size() == QSize(1229, 691)
    assert LAPTOP.contains(placed)
    assert placed.topLeft() == QPoint(137, 77)  # moved only as far as it must: fully on the screen


def test_a_remembered_geometry_off_the_screen_moves_fully_onto_it():
    on_disconnected_monitor = QRect(2100, 200, 1200, 700)  # the monitor right of this one is gone
    placed = fit_to_screen(on_disconnected_monitor, FULL_HD)
    assert placed.size() == QSize(1200, 700) and FULL_HD.contains(placed)
    assert placed.center() == FULL_HD.center() or abs(placed.center().x() - FULL_HD.center().x()) <= 1
    half_off = QRect(1500, 800, 1000, 600)  # partly off the bottom-right corner
    placed = fit_to_screen(half_off, FULL_HD)
    assert placed == QRect(920, 480, 1000, 600)
    above_and_left = QRect(-300, -50, 1000, 600)  # saved on a monitor left of the primary one
    assert fit_to_screen(above_and_left, FULL_HD) == QRect(0, 0, 1000, 600)
    too_big_and_off = QRect(-2560, 0, 2560, 1440)
    assert fit_to_screen(too_big_and_off, LAPTOP) == QRect(QPoint(68, 38), QSize(1229, 691))


def test_the_window_minimum_wins_over_the_screen():
    placed = fit_to_screen(FIRST, QRect(0, 0, 800, 600), minimum=QSize(1000, 400))
    assert placed.size() == QSize(1000, 540) and placed.topLeft() == QPoint(0, 30)


def test_the_main_window_opens_within_its_screen(make_window):
    window = make_window()
    available = (window.screen() or QGuiApplication.primaryScreen()).availableGeometry()
    window.hide()
    place_on_screen(window, restored=False)
    minimum = window.minimumSizeHint().expandedTo(window.minimumSize())
    expected = QSize(FIRST).boundedTo(QSize(int(available.width() * SCREEN_SHARE),
                                            int(available.height() * SCREEN_SHARE))).expandedTo(minimum)
    assert window.size() == expected


def test_a_remembered_geometry_off_the_screen_is_brought_back(make_window):
    window = make_window()
    available = (window.screen() or QGuiApplication.primaryScreen()).availableGeometry()
    window.hide()
    minimum = window.minimumSizeHint().expandedTo(window.minimumSize())
    saved = QRect(available.right() + 5000, available.top(), minimum.width(), minimum.height())
    place_on_screen(window, restored=True, saved=saved)
    assert window.pos().x() < available.right() and window.size() == minimum


def test_a_laptop_sized_window_lays_out_without_cutting_anything_off(make_window, qtbot):
    window = make_window()
    minimum = window.minimumSizeHint().expandedTo(window.minimumSize())
    assert minimum.width() <= 1229 and minimum.height() <= 691, minimum
    window.cost_curve.show_curve(CostCurve("default", "llama.cpp", "cpu",
                                           VerifyCost(tuple(0.0072 * n ** 0.9 for n in range(1, 9)))))
    window.resize(1229, 691)
    qtbot.waitUntil(lambda: window.size() == QSize(1229, 691), timeout=5_000)
    qtbot.wait(50)
    assert window.centralWidget().width() >= 400  # the transcript keeps a readable width
    scroll = window.live_scroll
    assert scroll.widget().width() <= scroll.viewport().width()  # the live panels are not clipped at the right
    assert window.cost_curve.transposed  # the table runs down, a row per pass size


def test_the_cost_table_folds_into_columns_when_narrow_and_back(qtbot):
    view = CostCurveView(theme.LIGHT)
    qtbot.addWidget(view)
    view.resize(600, 200)
    view.show()
    view.show_curve(CostCurve("default", "llama.cpp", "cpu", VerifyCost((0.007, 0.018, 0.025, 0.031, 0.039))))
    assert view.transposed is False
    assert view.grid.getItemPosition(view.grid.indexOf(view.cells[(1, 4)]))[:2] == (1, 4)  # ms of n = 4
    view.resize(view.wide_width - 1, 200)
    qtbot.waitUntil(lambda: view.transposed, timeout=5_000)
    assert view.grid.getItemPosition(view.grid.indexOf(view.cells[(1, 4)]))[:2] == (4, 1)
    assert view.minimumSizeHint().width() < view.wide_width  # the table never widens the dock
    view.resize(view.wide_width + 20, 200)
    qtbot.waitUntil(lambda: view.transposed is False, timeout=5_000)


def test_the_saved_geometry_is_remembered_as_it_was_and_brought_onto_the_screen(qtbot):
    from fakes import FakeEngine
    from gui.persistence.settings import AppSettings
    from gui.views.main.window import MainWindow

    settings = AppSettings()

    def make():
        window = MainWindow(loader=lambda name, progress=None, **options: FakeEngine(), persist=True,
                            settings=settings)
        qtbot.addWidget(window)
        return window

    first = make()
    saved = QRect(5000, 40, 1700, 1000)  # on a big monitor right of this (offscreen: 800 × 800) screen
    first.setGeometry(saved)
    first.shutdown()  # saves the settings
    second = make()
    try:
        assert second.geometry_restored and second.saved_geometry == saved  # as saved, not Qt's fit
        place_on_screen(second, second.geometry_restored, second.saved_geometry)
        available = (second.screen() or QGuiApplication.primaryScreen()).availableGeometry()
        minimum = second.minimumSizeHint().expandedTo(second.minimumSize())
        assert second.size() == QSize(int(available.width() * SCREEN_SHARE),
                                      int(available.height() * SCREEN_SHARE)).expandedTo(minimum)
        assert second.pos().x() < available.right()
    finally:
        second.shutdown()
