"""Two windows on one history: a chat open (and so claimed) in one window is read-only in a second, and says so
at the message box; a message typed there forks the chat, so the stored branch holds the turns the reply was
made from, then the new turn and its reply, and the first window's chat is left as it was."""

from gui.persistence.fork import BRANCH_MARK
from gui.persistence.store import HistoryStore


def chat_messages(store: HistoryStore, conversation_id: int) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in store.load_conversation(conversation_id).messages]


def test_a_chat_claimed_elsewhere_says_so_and_a_message_there_forks_it_with_its_turns(make_window, send_and_wait):
    first = make_window()
    send_and_wait(first, "Tell a short story about a storm")
    claimed = first.session.conversation_id
    stored_before = chat_messages(first.store, claimed)
    assert [role for role, _ in stored_before] == ["user", "assistant"]

    second = make_window()
    assert not second.compose_notice.isVisible()  # a new chat: nothing to say
    assert second.conversations.open(claimed)
    notice = second.compose_notice
    assert notice.isVisible() and notice.text() == second.session.recorder.read_only_reason
    assert "another SpecScope window" in notice.text() and "branch" in notice.text()
    assert notice.parentWidget() is second.message_box.parentWidget()  # at the message box, right above it
    assert notice.geometry().bottom() < second.message_box.geometry().top()

    turn = send_and_wait(second, "Now tell the same story from the point of view of the storm")
    branch = second.session.conversation_id
    assert branch not in (None, claimed) and not notice.isVisible()  # the branch is this window's own
    seen = [(m["role"], m["content"]) for m in second.engine.calls[-1].conversation if m["role"] != "system"]
    expected = stored_before + [("user", "Now tell the same story from the point of view of the storm"),
                                ("assistant", turn.text)]
    assert seen == expected[:-1]  # the reply was made from the first chat's turns and the new message
    assert chat_messages(second.store, branch) == expected  # ... and the stored chat holds what the model saw
    assert second.store.load_conversation(branch).title.endswith(BRANCH_MARK)
    assert chat_messages(second.store, claimed) == stored_before  # the first window's chat is untouched

    second.new_chat()
    assert second.conversations.open(claimed) and notice.isVisible()
    second.new_chat()
    assert not notice.isVisible()
