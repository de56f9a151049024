"""The chat session's small state the main window asks about: the message being edited, the Models window's
pending pair, and which draft-list look-up is awaited (gui.sessions.drafts); none of it needs Qt."""

import subprocess
import sys

from gui.sessions.drafts import DraftLookups
from test_chat_session import INFO, ROOT, loaded, run, settings


def test_an_edited_message_forks_the_chat_before_it_once():
    session = loaded()
    for text in ("first question", "second question"):
        run(session, session.send(text, settings(), "default"))
    assert session.edit(2) == "second question" and session.editing == 2
    assert session.fork_edited()
    assert [t.text for t in session.turns if t.role == "user"] == ["first question"] and len(session.turns) == 2
    assert session.editing is None and not session.fork_edited()  # forked once


def test_cancelling_or_a_new_chat_forgets_the_edit():
    session = loaded()
    run(session, session.send("a question", settings(), "default"))
    session.edit(0)
    assert session.cancel_edit() and not session.cancel_edit()
    session.edit(0)
    session.new_chat()
    assert session.editing is None and not session.fork_edited()


def test_the_models_windows_pair_waits_for_its_target():
    session = loaded()
    assert session.expect_pair(INFO.requested, "draft-a")  # the loaded target: nothing to wait for
    assert session.take_pair(INFO.requested) == (INFO.requested, "draft-a")
    assert session.take_pair(INFO.requested) is None  # taken once
    assert not session.expect_pair("acme/other", None)
    assert session.take_pair("default") is None  # another model loaded: the choice is dropped
    assert session.pending_pair is None


def test_a_draft_list_is_looked_up_once_per_target_and_only_its_answer_counts():
    lookups = DraftLookups()
    assert not lookups.wants_choices(None, needs_draft=True)  # nothing loaded
    assert not lookups.wants_choices("default", needs_draft=False)  # the method needs no draft
    assert lookups.wants_choices("default", needs_draft=True)
    lookups.choices_submitted("default", 7)
    assert not lookups.wants_choices("default", needs_draft=True)
    assert lookups.is_choices(7) and not lookups.is_choices(6)
    lookups.forget_target()  # a download finished
    assert lookups.wants_choices("default", needs_draft=True)
    lookups.own_job = 8
    assert lookups.is_own(8) and not lookups.is_own(7)


def test_the_models_and_drafts_sessions_import_no_qt():
    code = "import sys, gui.sessions.models, gui.sessions.drafts; assert 'PySide6' not in sys.modules"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
