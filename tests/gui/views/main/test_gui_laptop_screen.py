"""A 1366 × 768 laptop screen: the main window opens at 90 % of it and every stats card shows its whole words
(titles, figures, details, buttons: each text measured with QFontMetrics against its widget's width); every
other top-level window (compare, models, training, fastest, settings, help) opens within the screen's available
area by the one screen-fit rule (gui.views.main.screen_fit.show_window), and the compare window's whole content
can be scrolled to. The screen is faked (QScreen.availableGeometry): the offscreen platform's is 800 × 800."""

import pytest
from PySide6.QtCore import QRect, QSize
from PySide6.QtGui import QFontMetrics, QScreen
from PySide6.QtWidgets import QLabel, QPushButton, QStyle, QStyleOptionButton, QWidget

from engine.core.config import parse_spec
from gui import theme
from gui.sessions.session_model import Figures
from gui.views.live.stats import StatsStrip
from gui.views.main.screen_fit import place_on_screen, show_window

LAPTOP = QRect(0, 0, 1366, 768)
OPENED = QSize(1229, 691)  # 90 % of it: where the main window opens
NOT_YET = Figures(0.0, None, 0.0, None, None, None, None, 0.0, 0.0, 0, False)
OFFERED = Figures(123.4, 0.67, 2.45, None, None, 2.31, None, 0.123, 1.234, 1234, True, measure_offer_seconds=12)
MEASURED = Figures(1234.5, 0.67, 2.45, 12.34, 1234.5, 2.31, 0.87, 0.123, 1.234, 1234, True,
                   by_drafter=(("ngram-mod", 10, 5, 0.45), ("early-exit", 10, 8, 0.8)))


@pytest.fixture
def laptop_screen(monkeypatch):
    monkeypatch.setattr(QScreen, "availableGeometry", lambda _screen: QRect(LAPTOP))


def cut_texts(strip: StatsStrip) -> list[str]:
    """Every text shown in the strip that is wider than the room its widget gives it, or elided."""
    cut = []
    for label in strip.findChildren(QLabel):
        if label.isVisibleTo(strip) and label.text():
            cut += too_wide(label, label.text(), label.contentsRect().width())
    for button in strip.findChildren(QPushButton):
        if button.isVisibleTo(strip):
            option = QStyleOptionButton()
            button.initStyleOption(option)
            room = button.style().subElementRect(QStyle.SubElement.SE_PushButtonContents, option, button)
            cut += too_wide(button, button.text(), room.width())
    return cut


def too_wide(widget: QWidget, text: str, room: int) -> list[str]:
    need = QFontMetrics(widget.font()).horizontalAdvance(text)
    return [f"{text!r}: {need} px in {room}"] if need > room or "…" in text else []


def show_in_turn(strip: StatsStrip, qtbot) -> None:
    """The cards as a chat goes: nothing measured, a speculative reply offering the measurement, measured."""
    for described, figures in ((None, NOT_YET), (None, OFFERED), ("1234.5 tok/s, measured today", MEASURED)):
        strip.show_baseline(described)
        strip.show_figures(figures)
        qtbot.wait(0)
        assert not cut_texts(strip), (strip.columns, cut_texts(strip))


def test_at_1366x768_the_cards_show_whole_words_and_every_window_opens_on_the_screen(make_window, laptop_screen,
                                                                                        qtbot):
    window = make_window()
    window.hide()
    place_on_screen(window, restored=False)
    window.show()
    qtbot.waitUntil(lambda: window.size() == OPENED, timeout=5_000)
    strip = window.stats_strip
    qtbot.waitUntil(lambda: strip.width() <= window.live_scroll.viewport().width(), timeout=5_000)
    assert strip.columns == 2  # the dock is narrow here: the short words are the ones that must fit
    show_in_turn(strip, qtbot)

    opened = {"compare": window.open_compare(), "models": window.open_models(), "fastest": window.open_fastest(),
              "settings": window.open_settings(), "help": window.open_help("guide"),
              "shortcuts": window.open_help("shortcuts"), "training": window.training.open("default", "default")}
    qtbot.waitUntil(lambda: opened["models"].device_row.free_label.text() != "", timeout=5_000)  # a long line, come later
    for name, top_level in opened.items():
        assert top_level.isVisible() and LAPTOP.contains(top_level.frameGeometry()), (name, top_level.geometry())
    settings = opened["settings"]
    assert settings.height() >= settings.heightForWidth(settings.width())  # its wrapped words are not squeezed
    compare_content_is_reachable(opened["compare"], qtbot)


def compare_content_is_reachable(compare, qtbot) -> None:
    scroll = compare.centralWidget()
    content = scroll.widget()
    qtbot.waitUntil(lambda: content.width() >= content.minimumSizeHint().width(), timeout=5_000)
    assert scroll.horizontalScrollBar().maximum() == 0  # two settings: all of it in view, no scrolling
    compare.set_specs([parse_spec(text) for text in ("prompt-lookup:k=5", "early-exit:k=3,layers=8",
                                                     "suffix:k=4", "draft-model:k=4,draft=default")])
    qtbot.waitUntil(lambda: all(row.isVisible() for row in compare.setting_rows), timeout=5_000)  # shown queued
    qtbot.waitUntil(lambda: content.width() >= content.minimumSizeHint().width() > scroll.viewport().width(),
                    timeout=5_000)
    assert LAPTOP.contains(compare.frameGeometry())  # four wide settings: the window still fits, its content scrolls
    rightmost = (compare.legend.show_rejected, compare.source_label, compare.note, compare.diff_view,
                 compare.setting_rows[2].remove, compare.strict_button)  # the widest row's last control
    for widget in rightmost:  # scrolled to, each is wholly in view
        assert widget.isVisibleTo(compare), widget
        scroll.ensureWidgetVisible(widget, 0, 0)
        qtbot.wait(0)
        seen = QRect(widget.mapTo(scroll.viewport(), widget.rect().topLeft()), widget.size())
        assert scroll.viewport().rect().contains(seen), (widget, seen, scroll.viewport().rect())


def test_a_window_shown_again_off_the_screen_comes_back_and_keeps_its_size(laptop_screen, qtbot):
    window = QWidget()
    qtbot.addWidget(window)
    window.resize(2000, 500)  # its maker's size, wider than the screen
    show_window(window)
    assert window.size() == QSize(int(1366 * 0.9), 500) and LAPTOP.contains(window.frameGeometry())
    window.hide()
    window.setGeometry(QRect(1300, 100, 600, 400))  # left partly off the screen (a monitor gone since)
    show_window(window)
    framed = window.frameGeometry()
    assert window.size() == QSize(600, 400) and LAPTOP.contains(framed) and framed.right() == LAPTOP.right()
    window.hide()
    window.setGeometry(QRect(20, 30, 600, 400))  # where the user put it: stays
    show_window(window)
    assert window.geometry() == QRect(20, 30, 600, 400)


def test_the_cards_in_three_columns_show_whole_words_too(qtbot):
    strip = StatsStrip(theme.LIGHT)
    qtbot.addWidget(strip)
    strip.resize(600, strip.sizeHint().height())
    strip.show()
    qtbot.waitUntil(lambda: strip.columns == 3, timeout=5_000)
    show_in_turn(strip, qtbot)
