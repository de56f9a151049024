"""Reply actions: Copy (the reply's text only, from the link, the shortcut and a Ctrl+C selection), Regenerate (the
settings it ran with, or the current ones) and Edit and resend, each forking the chat with both branches in the
history; the shortcuts in the menus."""

from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QGuiApplication, QKeySequence, QTextCursor
from PySide6.QtWidgets import QMenu

from engine.core.events import TokenStatus
from fakes import FakeEngine
from gui.views.chat.transcript import ACTION_SCHEME

WAIT_MS = 10_000


def click_action(qtbot, window, action: str, index: int) -> None:
    """Click the transcript's link for `action` on turn `index`."""
    view = window.transcript
    document = view.document()
    href = f"{ACTION_SCHEME}{action}:{index}"
    block = document.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            if fragment.charFormat().anchorHref() == href:
                for offset in range(1, fragment.length()):  # a character of the link (a wrapped line has two rects)
                    cursor = QTextCursor(document)
                    cursor.setPosition(fragment.position() + offset)
                    view.setTextCursor(cursor)
                    view.ensureCursorVisible()
                    qtbot.wait(1)  # let the layout and the scroll happen
                    rect = view.cursorRect(cursor)
                    point = QPoint(rect.left() - 2, rect.center().y())
                    if view.anchorAt(point) == href:
                        break
                assert view.anchorAt(point) == href
                qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=point)
                return
            it += 1
        block = block.next()
    raise AssertionError(f"no link {href} in the transcript")


def test_copy_gives_the_reply_without_rejected_drafts(make_window, send_and_wait, qtbot):
    window = make_window()
    window.controls.apply(method="draft-model", draft="default", k=4, max_new_tokens=40)
    turn = send_and_wait(window)
    ghosts = [t.text for t in turn.tokens if t.status is TokenStatus.REJECTED]
    assert ghosts and window.transcript.show_rejected
    clipboard = QGuiApplication.clipboard()
    clipboard.clear()
    click_action(qtbot, window, "copy", 1)
    assert clipboard.text() == turn.text
    assert "↵" not in clipboard.text() and not any(ghost in clipboard.text() for ghost in (" quickly", " seven"))
    clipboard.clear()
    window.findChild(QMenu).actions()  # the menu is built
    shortcut = next(a for a in window.findChildren(type(window.rejected_action)) if a.text() == "&Copy last reply")
    assert shortcut.shortcut() == QKeySequence("Ctrl+Shift+C")
    shortcut.trigger()
    assert clipboard.text() == turn.text


def test_a_selection_copied_with_ctrl_c_leaves_the_ghosts_out(make_window, send_and_wait, qtbot):
    window = make_window()
    window.controls.apply(method="draft-model", draft="default", k=4, max_new_tokens=40)
    turn = send_and_wait(window)
    view = window.transcript
    assert " quickly" in view.toPlainText() or " seven" in view.toPlainText()  # the ghosts are drawn
    view.selectAll()
    QGuiApplication.clipboard().clear()
    view.setFocus()
    qtbot.keyClick(view, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier)
    copied = QGuiApplication.clipboard().text()
    assert copied
    ghosts = {t.text for t in turn.tokens if t.status is TokenStatus.REJECTED}
    assert not any(ghost in copied for ghost in ghosts) and "↵" not in copied
    body = turn.text.replace("\n\n", "\n").strip()
    assert body in copied  # the committed text, paragraphs on lines of their own


def test_regenerate_forks_the_chat_with_the_same_settings(make_window, send_and_wait, qtbot):
    engine = FakeEngine()
    window = make_window(engine)
    window.controls.apply(method="draft-model", draft="default", k=3, max_new_tokens=12)
    send_and_wait(window, "first question")
    send_and_wait(window, "second question")
    old_id = window.session.conversation_id
    window.controls.apply(method="prompt-lookup", k=5)  # the current settings differ from the reply's
    with qtbot.waitSignal(window.reply_finished, timeout=WAIT_MS):
        click_action(qtbot, window, "regenerate", 3)
    assert (engine.calls[-1].spec.method, engine.calls[-1].spec.k) == ("draft-model", 3)
    assert engine.calls[-1].conversation[-1] == {"role": "user", "content": "second question"}
    assert [t.role for t in window.session.turns] == ["user", "assistant", "user", "assistant"]
    new_id = window.session.conversation_id
    assert new_id != old_id
    store = window.store
    old, new = store.load_conversation(old_id), store.load_conversation(new_id)
    assert [m.content for m in old.messages if m.role == "user"] == ["first question", "second question"]
    assert [m.role for m in new.messages] == ["user", "assistant", "user", "assistant"]
    assert new.messages[1].content == old.messages[1].content and new.messages[1].rounds  # copied with its rounds
    assert new.messages[2].content == "second question"
    # with the current settings (Ctrl+Shift+R)
    with qtbot.waitSignal(window.reply_finished, timeout=WAIT_MS):
        assert window.replies.regenerate(current=True)
    assert (engine.calls[-1].spec.method, engine.calls[-1].spec.k) == ("prompt-lookup", 5)
    assert len(window.session.turns) == 4
    assert len({c.id for c in store.list_conversations()}) == 3


def test_edit_and_resend_forks_from_the_edited_message(make_window, send_and_wait, qtbot):
    engine = FakeEngine()
    window = make_window(engine)
    window.controls.apply(max_new_tokens=8)
    send_and_wait(window, "first question")
    send_and_wait(window, "second question")
    old_id = window.session.conversation_id
    window.message_box.setFocus()
    qtbot.keyClick(window.message_box, Qt.Key.Key_Up)  # Up in an empty box: edit the last message
    assert window.session.editing == 2 and window.message_box.toPlainText() == "second question"
    window.message_box.setPlainText("second question, edited")
    with qtbot.waitSignal(window.reply_finished, timeout=WAIT_MS):
        qtbot.keyClick(window.message_box, Qt.Key.Key_Return)
    assert [t.text for t in window.session.turns if t.role == "user"] == ["first question", "second question, edited"]
    assert engine.calls[-1].conversation[-1]["content"] == "second question, edited"
    assert len([m for m in engine.calls[-1].conversation if m["role"] == "assistant"]) == 1
    new = window.store.load_conversation(window.session.conversation_id)
    old = window.store.load_conversation(old_id)
    assert [m.content for m in new.messages if m.role == "user"] == ["first question", "second question, edited"]
    assert [m.content for m in old.messages if m.role == "user"] == ["first question", "second question"]
    # editing the first message from its link starts a branch with no earlier turn; Esc cancels an edit
    click_action(qtbot, window, "edit", 0)
    assert window.message_box.toPlainText() == "first question"
    window.replies.escape()
    assert window.session.editing is None and not window.message_box.toPlainText()
    window.replies.edit_message(0)
    with qtbot.waitSignal(window.reply_finished, timeout=WAIT_MS):
        assert window.send("a new first question")
    assert [t.role for t in window.session.turns] == ["user", "assistant"]
    assert [m.content for m in window.store.load_conversation(window.session.conversation_id).messages
            if m.role == "user"] == ["a new first question"]


def test_the_actions_have_shortcuts_in_the_menu_and_say_them(make_window):
    window = make_window()
    actions = {a.text(): a for a in window.findChildren(type(window.rejected_action))}
    expected = {"&Copy last reply": "Ctrl+Shift+C", "&Regenerate last reply": "Ctrl+R",
                "Regenerate with the c&urrent settings": "Ctrl+Shift+R", "&Edit last message": "Ctrl+E"}
    for text, keys in expected.items():
        assert actions[text].shortcut() == QKeySequence(keys)
        assert keys in actions[text].toolTip()
    every = [a.shortcut().toString() for a in actions.values() if not a.shortcut().isEmpty()]
    assert len(every) == len(set(every)), "two actions share a shortcut"
    assert not window.replies.regenerate() and "No reply" in window.status_label.text()


def test_a_new_chat_forgets_the_message_being_edited(make_window, send_and_wait, qtbot):
    window = make_window()
    window.controls.apply(max_new_tokens=6)
    send_and_wait(window, "a question")
    assert window.replies.edit_message()
    window.new_chat()
    assert window.session.editing is None
    turn = send_and_wait(window, "a fresh start")
    assert [t.text for t in window.session.turns if t.role == "user"] == ["a fresh start"] and turn.text
