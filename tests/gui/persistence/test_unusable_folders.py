"""A data or settings folder that can't be made (gui.persistence.store, gui.persistence.settings): the history is
off for the session and the settings hold for the session only, each saying why in the chats panel, and the
window chats as ever."""

from __future__ import annotations

from pathlib import Path

import pytest

from gui.persistence.settings import AppSettings
from gui.persistence.store import HistoryError, HistoryStore
from gui.views.main.conversations import open_store


@pytest.fixture
def unusable(tmp_path, monkeypatch) -> Path:
    """A file where the folders should be: nothing can be made under it."""
    file = tmp_path / "a-file"
    file.write_text("not a folder")
    monkeypatch.setenv("SPECSCOPE_DATA_DIR", str(file / "data"))
    monkeypatch.setenv("SPECSCOPE_SETTINGS_DIR", str(file / "settings"))
    return file


def test_the_history_is_off_for_the_session_saying_why(unusable):
    with pytest.raises(HistoryError, match=r"its folder .*a-file/data can't be made \(Not a directory\), so nothing "
                                           "is saved this session"):
        HistoryStore()
    store, problem = open_store(None, persist=True)
    assert store is None and problem.startswith("Chat history is off: its folder ")


def test_the_settings_hold_for_the_session_saying_why(unusable):
    settings = AppSettings()
    assert settings.problem() == (f"Settings are kept for this session only: {unusable}/settings/specscope.ini "
                                  "can't be written (its folder can't be made, or it is read-only).")
    settings.set_value("chat/k", 7)
    assert settings.value("chat/k", kind=int) == 7  # for this session
    assert unusable.read_text() == "not a folder"


def test_usable_settings_have_no_problem(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSCOPE_SETTINGS_DIR", str(tmp_path / "settings"))
    assert AppSettings().problem() is None


def test_the_window_says_both_in_the_chats_panel_and_still_chats(unusable, make_window, send_and_wait):
    window = make_window()
    notice = window.history_panel.notice
    assert window.store is None and notice.isVisible()
    assert notice.text().startswith("Chat history is off: its folder ") and "so nothing is saved this session. " \
        "Settings are kept for this session only: " in notice.text()
    assert send_and_wait(window, "Tell me about speculative decoding").text
