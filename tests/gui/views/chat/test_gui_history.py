"""Chat history in the window: saved as it happens (rounds before the reply ends), listed, renamed, searched,
deleted, reopened coloured; an out-of-memory finish keeps the partial reply; the token lives in the keyring only;
settings and layout survive a restart (QSettings under SPECSCOPE_SETTINGS_DIR)."""

from __future__ import annotations

import keyring
from keyring.backends import fail
from PySide6.QtCore import Qt

from engine.core.config import SamplingConfig
from engine.core.events import GenerationFinished, RoundVerified, TokenStatus
from engine.core.stats import StatsAccumulator
from gui import theme
from fakes import FakeEngine
from engine.models.secrets import TokenStorage, TokenStore
from gui.persistence.records import COMPLETE, STREAMING
from gui.persistence.store import HistoryStore
from gui.views.chat.history_panel import HistoryPanel
from gui.views.main.window import MainWindow
from gui.views.dialogs.settings import SettingsDialog
from transcript_probe import background, fragments

WAIT_MS = 10_000
TOKEN = "hf_GuiTestToken_0123456789abcdef"
OOM = "cpu ran out of memory after 9 new tokens; the reply so far is kept."


def drawn_tokens(window):
    """(status, text, background, strike-out, underline style) of every token fragment in the transcript."""
    return [(token.status, text, background(fmt), fmt.fontStrikeOut(), fmt.underlineStyle())
            for token, fmt, text, _ in fragments(window)]


def test_chat_is_saved_listed_renamed_searched_and_deleted(make_window, send_and_wait, qtbot):
    window = make_window()
    panel = window.history_panel
    assert panel.titles() == [] and "appear here" in panel.empty.text()
    window.controls.apply(max_new_tokens=20)
    send_and_wait(window, "Tell me about speculative decoding")
    send_and_wait(window, "And about zebras?")
    cid = window.session.recorder.conversation_id
    assert panel.conversation_ids() == [cid] and panel.titles() == ["Tell me about speculative decoding"]
    stored = window.store.load_conversation(cid)
    assert [m.role for m in stored.messages] == ["user", "assistant", "user", "assistant"]
    assert stored.messages[1].state == COMPLETE and stored.messages[1].settings["max_new_tokens"] == 20

    window.new_chat()
    send_and_wait(window, "A second chat about the sea")
    assert panel.titles() == ["A second chat about the sea", "Tell me about speculative decoding"]

    # a panel on the same history that answers its questions itself: a new title, then "no" and "yes" to delete
    deletes = iter([False, True])
    panel = HistoryPanel(window.store, theme.LIGHT, ask_text=lambda *args: "Zebra facts",
                         ask_yes_no=lambda *args: next(deletes))
    qtbot.addWidget(panel)
    assert panel.titles() == ["A second chat about the sea", "Tell me about speculative decoding"]
    panel.list.setCurrentRow(1)
    assert panel.rename()
    assert panel.titles() == ["A second chat about the sea", "Zebra facts"]

    panel.search.setText("ZEBRA")  # title and message text, any case
    assert panel.conversation_ids() == [cid]
    panel.search.setText("the sea")
    assert panel.titles() == ["A second chat about the sea"]
    panel.search.setText("nothing like this")
    assert panel.titles() == [] and "No chat mentions" in panel.empty.text()
    panel.search.clear()

    assert not panel.delete(cid) and cid in panel.conversation_ids()  # "no" keeps it
    assert panel.delete(cid)
    assert cid not in panel.conversation_ids() and len(window.store.list_conversations()) == 1


def test_reopened_conversation_rerenders_coloured_tokens(make_window, send_and_wait, qtbot, tmp_path):
    window = make_window()
    window.controls.apply(method="draft-model", draft="default", k=4, max_new_tokens=40)
    turn = send_and_wait(window)
    live = drawn_tokens(window)
    assert {status for status, *_ in live} == {TokenStatus.PLAIN, TokenStatus.ACCEPTED, TokenStatus.REJECTED,
                                               TokenStatus.SUBSTITUTED, TokenStatus.BONUS}
    cid = window.session.recorder.conversation_id
    window.new_chat()
    assert drawn_tokens(window) == []

    panel = window.history_panel
    rect = panel.list.visualItemRect(panel.list.item(0))
    with qtbot.waitSignal(window.conversation_opened, timeout=WAIT_MS):
        qtbot.mouseClick(panel.list.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert drawn_tokens(window) == live  # same pieces, same statuses, same formats
    assert window.session.turns[-1].text == turn.text
    text = window.transcript.toPlainText()
    assert "40 tokens" in text and "acceptance" in text  # the footer with the stats it ran with
    substituted = next(t for t in window.session.tokens if t.status is TokenStatus.SUBSTITUTED)
    assert substituted.replaced is not None and substituted.position is not None
    # the next message continues the reopened conversation, with the saved turns as context
    send_and_wait(window, "Go on")
    assert len(window.store.load_conversation(cid).messages) == 4
    assert [m["role"] for m in window.engine.calls[-1].conversation][-3:] == ["user", "assistant", "user"]
    # export: Markdown and JSON
    markdown = panel.export(cid, fmt="markdown", path=str(tmp_path / "chat.md"))
    assert markdown.read_text().startswith("# Tell me about speculative decoding")
    exported = panel.export(cid, fmt="json", path=str(tmp_path / "chat.json"))
    assert '"status": "substituted"' in exported.read_text()


def test_rounds_are_stored_as_they_arrive(make_window, qtbot, send_and_wait):
    window = make_window(FakeEngine(pause_after=3))
    window.controls.apply(method="draft-model", draft="default", k=4, max_new_tokens=60)
    with qtbot.waitSignal(window.reply_finished, timeout=WAIT_MS, raising=False) as finished:
        assert window.send("Write something long")
        qtbot.waitUntil(lambda: window.session.recorder.rounds_written == 3, timeout=WAIT_MS)
        # the engine is paused mid-reply: the store already has every round so far (a SIGKILL now keeps them)
        reader = HistoryStore(window.store.path, recover=False)
        try:
            reply = reader.load_conversation(window.session.recorder.conversation_id).messages[-1]
        finally:
            reader.close()
        assert window.generating and not finished.signal_triggered
        assert reply.state == STREAMING and [r.index for r in reply.rounds] == [0, 1, 2]
        assert reply.content == "".join(t.text for t in window.session.current.tokens if t.committed)
        window.engine.resume.set()
    assert finished.signal_triggered
    reply = window.store.load_conversation(window.session.recorder.conversation_id).messages[-1]
    assert reply.state == COMPLETE and reply.content == finished.args[0].text
    print(f"history writes: {window.session.recorder.rounds_written} rounds, "
          f"{1000 * window.session.recorder.write_seconds / window.session.recorder.rounds_written:.3f} ms per round")


class OutOfMemoryEngine(FakeEngine):
    """Ends every reply after 3 rounds the way the real engine does when the device runs out of memory."""

    def generate(self, conversation, **kwargs):
        accumulator, pieces = StatsAccumulator(kwargs["spec"].k), []
        for event in super().generate(conversation, **kwargs):
            if isinstance(event, RoundVerified):
                if event.index == 3:
                    yield GenerationFinished(stop_reason="out-of-memory", text="".join(pieces), output_ids=(),
                                             stats=accumulator.snapshot(), error=OOM)
                    return
                accumulator.add_round(event)
                pieces += event.committed_pieces
            yield event


def test_out_of_memory_ends_the_reply_with_a_message_and_keeps_it(make_window, send_and_wait):
    window = make_window(OutOfMemoryEngine())
    window.controls.apply(method="draft-model", draft="default", k=4, max_new_tokens=60)
    turn = send_and_wait(window)
    assert turn.stop_reason == "out-of-memory" and turn.error == OOM and turn.text
    text = window.transcript.toPlainText()
    assert "⚠ " + OOM in text and "out of memory · " in text
    kept = "".join(piece for status, piece, *_ in drawn_tokens(window) if status is not TokenStatus.REJECTED)
    assert kept == turn.text.replace("\n", "")  # the partial reply stays, coloured
    assert OOM in window.status_label.text()
    stored = window.store.load_conversation(window.session.recorder.conversation_id).messages[-1]
    assert stored.error == OOM and stored.content == turn.text and stored.stop_reason == "out-of-memory"
    again = send_and_wait(window, "Shorter, please")  # the app keeps working
    assert again.text and window.send_button.isEnabled()


def test_failed_request_with_nothing_generated_leaves_no_trace(make_window, qtbot):
    engine = FakeEngine(fail_with=RuntimeError("boom"))
    window = make_window(engine)
    with qtbot.waitSignal(window.request_failed, timeout=WAIT_MS):
        window.send("This one fails")
    assert window.store.list_conversations() == [] and window.history_panel.titles() == []


def test_token_goes_to_the_keyring_and_into_no_file(make_window, send_and_wait, private_app_dirs):
    window = make_window()
    dialog = window.open_settings()
    assert "No token set" in dialog.token_state.text()
    dialog.token.setText(TOKEN)
    dialog.save_button.click()
    assert private_app_dirs["keyring"].items == {("specscope", "huggingface"): TOKEN}
    assert dialog.token.text() == "" and "hf_…cdef" in dialog.token_state.text()
    assert "system keyring" in dialog.token_state.text() and TOKEN not in dialog.token_state.text()
    send_and_wait(window, "Hello")
    window.close()  # saves the settings, closes the history
    written = [p for folder in (private_app_dirs["data"], private_app_dirs["settings"]) for p in folder.rglob("*")
               if p.is_file()]
    assert {p.suffix for p in written} >= {".ini", ".sqlite3"}
    for path in written:
        assert TOKEN.encode() not in path.read_bytes(), path
    dialog.remove_button.click()
    assert private_app_dirs["keyring"].items == {}


def test_without_a_keyring_the_token_is_kept_for_the_session(qtbot):
    keyring.set_keyring(fail.Keyring())  # the autouse fixture puts the previous backend back
    dialog = SettingsDialog(store=TokenStore())
    qtbot.addWidget(dialog)
    assert "session only" in dialog.token_state.text()
    dialog.token.setText(TOKEN)
    assert dialog.save_token() is TokenStorage.SESSION
    assert "session only" in dialog.token_state.text() and "forgotten when SpecScope quits" in \
        dialog.token_state.text()
    assert dialog.store.get() == TOKEN


def test_settings_and_layout_survive_a_restart(qtbot, private_app_dirs):
    engine = FakeEngine()

    def make():
        window = MainWindow(loader=lambda name, progress=None, **options: engine, palette=theme.LIGHT, persist=True)
        qtbot.addWidget(window)
        window.show()
        with qtbot.waitSignal(window.model_ready, timeout=WAIT_MS):
            window.start()
        return window

    first = make()
    with qtbot.waitSignal(first.model_ready, timeout=WAIT_MS):
        first.load_model("acme/other-model")
    first.controls.apply(method="prompt-lookup", k=6, temperature=0.7, top_p=0.9, seed=42, max_new_tokens=99,
                         system_prompt="Be brief.")
    first.set_show_rejected(False)
    first.resize(1500, 820)  # at least the window's minimum size
    first.live_dock.hide()
    first.close()
    assert (private_app_dirs["settings"] / "specscope.ini").is_file()

    second = make()
    try:
        controls = second.controls
        assert second.model_info.requested == "acme/other-model"  # the last model is the one loaded
        assert controls.method.currentData() == "prompt-lookup" and controls.k.value() == 6
        assert controls.sampling_box.sampling() == SamplingConfig(temperature=0.7, top_p=0.9, seed=42)
        assert controls.max_new_tokens.value() == 99 and controls.system_prompt.toPlainText() == "Be brief."
        assert not second.transcript.show_rejected
        # the geometry is restored (offscreen, Qt then fits it to the 800×600 virtual screen, so no exact size)
        assert second.geometry_restored
        assert second.live_dock.isHidden() and not second.history_dock.isHidden()
    finally:
        second.shutdown()
