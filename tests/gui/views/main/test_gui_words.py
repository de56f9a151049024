"""Words and small things: stopped, closed and error told apart; the status line says the method's label and
"Stopped" after Esc; the placeholder clears when ready; plurals; one keyring story in Settings; the active
theme checked; Settings has a shortcut; Help lists the shortcuts and explains the colours and figures."""

import keyring
from keyring.backends import fail
from PySide6.QtCore import Qt

from engine.models.secrets import TokenStore
from fakes import FakeEngine
from gui import theme
from gui.persistence.recorder import turns_from_conversation
from gui.persistence.store import HistoryStore
from gui.views.main.window import MainWindow
from gui.views.dialogs.settings import SettingsDialog
from gui.views.chat.transcript import footer_text

WAIT_MS = 10_000


def test_status_line_says_the_methods_label_and_stopped_after_escape(make_window, qtbot):
    engine = FakeEngine(pause_after=3)
    window = make_window(engine)
    window.controls.apply(method="prompt-lookup", k=4)
    assert window.send("go")
    assert window.status_label.text() == "Generating · prompt lookup (n-gram), k=4…"
    qtbot.waitUntil(lambda: window.session.live.accumulator.rounds == 3, timeout=WAIT_MS)
    with qtbot.waitSignal(window.reply_finished, timeout=WAIT_MS):
        qtbot.keyClick(window.message_box, Qt.Key.Key_Escape)
    assert window.status_label.text().startswith("Stopped · ")  # as the reply's footer says: stopped
    assert "stopped" in window.transcript.toPlainText()
    engine.pause_after = None
    window.controls.apply(method="none", max_new_tokens=5)
    with qtbot.waitSignal(window.reply_finished, timeout=WAIT_MS):
        window.send("plain")
        assert window.status_label.text() == "Generating · none (plain decoding)…"
    assert window.status_label.text().startswith("Done · 5 tokens")


def test_placeholder_clears_when_the_model_is_ready(make_window):
    window = make_window()
    assert "Loading" not in window.message_box.placeholderText()
    assert window.message_box.placeholderText().startswith("Message (Enter to send")


def test_closing_mid_reply_is_closed_and_a_new_chat_stopped_never_an_error(qtbot, private_app_dirs):
    engine = FakeEngine(pause_after=3)
    window = MainWindow(loader=lambda name, progress=None, **options: engine, palette=theme.LIGHT, persist=True)
    qtbot.addWidget(window)
    with qtbot.waitSignal(window.model_ready, timeout=WAIT_MS):
        window.start()
    window.send("first")
    qtbot.waitUntil(lambda: window.session.live.accumulator.rounds == 3, timeout=WAIT_MS)
    first = window.session.conversation_id
    window.new_chat()
    engine.resume.clear()
    window.send("second")
    qtbot.waitUntil(lambda: window.session.live.accumulator.rounds == 3, timeout=WAIT_MS)
    second = window.session.conversation_id
    path = window.store.path
    window.close()
    engine.resume.set()
    with HistoryStore(path) as store:
        for cid, reason in ((first, "cancelled"), (second, "closed")):
            reply = store.load_conversation(cid).messages[-1]
            assert (reply.stop_reason, reply.error) == (reason, None) and reply.content
            assert reply.stats["committed_tokens"] > 0  # its figures so far are kept
            turns, _ = turns_from_conversation(store.load_conversation(cid))
            assert turns[-1].error is None and turns[-1].stop_reason == reason
            words = footer_text(turns[-1])  # the transcript's footer, in words
            assert words.startswith("stopped: SpecScope was closed · " if reason == "closed" else "stopped · ")


def test_plurals_theme_check_settings_shortcut_and_help(make_window, qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    window = make_window()
    manager = window.open_models()
    qtbot.addWidget(manager)
    qtbot.waitUntil(lambda: "found" in manager.status.text(), timeout=WAIT_MS)
    assert manager.status.text().startswith("1 model found, 1 ready to load")
    checked = [a.text() for a in window.theme_actions.actions() if a.isChecked()]
    assert checked == ["Light theme"]
    window.set_theme("dark")
    assert [a.text() for a in window.theme_actions.actions() if a.isChecked()] == ["Dark theme"]
    actions = {a.text(): a for menu in window.menuBar().actions() for a in menu.menu().actions()}
    assert not actions["&Settings…"].shortcut().isEmpty()
    shortcuts = window.open_help("shortcuts")
    qtbot.addWidget(shortcuts)
    text = shortcuts.text.toPlainText()
    for line in ("Ctrl+Shift+F", "Which setting is fastest here?", "Ctrl+M", "Esc", "Shift+Enter",
                 actions["&Settings…"].shortcut().toString()):
        assert line in text
    guide = window.open_help("guide")
    qtbot.addWidget(guide)
    text = guide.text.toPlainText()
    for word in (*theme.STATUS_LABELS.values(), "acceptance", "mean accepted length", "speed-up", "efficiency"):
        assert word in text


def test_the_keyring_note_tells_one_story(qtbot):
    dialog = SettingsDialog(store=TokenStore())
    qtbot.addWidget(dialog)
    assert "system's keyring only" in dialog.token_help.text() and "keyring" in dialog.token_state.text()
    keyring.set_keyring(fail.Keyring())  # the autouse fixture puts the previous backend back
    dialog = SettingsDialog(store=TokenStore())
    qtbot.addWidget(dialog)
    assert "keyring only" not in dialog.token_help.text()
    assert "session only" in dialog.token_help.text() and "session only" in dialog.token_state.text()
