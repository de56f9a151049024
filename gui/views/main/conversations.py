"""The main window's saved chats: open one from the chats list (coloured as it was made, its last reply's stats
and graphs folded again from its rounds), take its settings, follow a deletion, export the chat shown.

What a saved chat holds is read by gui.persistence (store, recorder, replay); the chat session shows it. May
touch: gui.persistence.store / recorder / replay (read), the window's views and public methods.
"""

from __future__ import annotations

from engine.core.errors import ConfigError
from gui.persistence.recorder import turns_from_conversation
from gui.persistence.replay import apply_values, saved_run, settings_words
from gui.persistence.store import HistoryError, HistoryStore
from gui.persistence.user_history import open_user_history


def open_store(store: HistoryStore | None, persist: bool) -> tuple[HistoryStore | None, str | None]:
    """The chat history: `store`, else (with `persist`) the user's; and why there is none, if it failed."""
    if store is None and persist:
        try:
            return open_user_history(), None
        except HistoryError as exc:
            return None, f"Chat history is off: {exc}"
    return store, None


class Conversations:
    def __init__(self, window) -> None:
        self.window = window

    def open(self, conversation_id: int) -> bool:
        """Show a saved conversation, coloured as it was made; the next message continues it."""
        window = self.window
        if window.store is None:
            return False
        if window.session.generating or window.tools.comparing():
            window.set_status("Stop the reply first, then open another chat")
            window.history_panel.set_current(window.session.conversation_id)
            return False
        try:
            conversation = window.store.load_conversation(conversation_id)
        except HistoryError as exc:
            window.set_status(f"Could not open the chat: {exc}")
            return False
        run = saved_run(conversation)
        window.session.open_saved(conversation_id, *turns_from_conversation(conversation), run=run)
        window.transcript.render_turns(window.session.turns)
        window.live.clear()
        window.refresh_live_views()  # its last reply's stats cards and graphs, folded again from its rounds
        window.history_panel.set_current(conversation_id)
        window.controls.show_saved_settings(settings_words(run.settings) if run is not None else None)
        window.update_actions()  # a chat another window writes says so at the message box
        window.set_status(f"Opened “{conversation.title}”")
        window.conversation_opened.emit(conversation_id)
        return True

    def apply_saved_settings(self) -> None:
        """The settings panel takes what the reopened chat's last reply ran with (loading its model if
        another one is loaded)."""
        window = self.window
        saved = window.session.saved_settings
        if not saved:
            return
        values = apply_values(saved)
        model = values.pop("model", None)
        try:
            window.controls.apply(**values)
        except ConfigError as exc:
            window.set_status(f"Could not use this chat's settings: {exc}")
            return
        window.controls.show_saved_settings(None)
        window.set_status(f"Settings of this chat: {settings_words(saved)}")
        if model and model != window.session.model_name(model):
            window.controls.apply(model=model)
            window.load_model(model)

    def deleted(self, conversation_id: int) -> None:
        if self.window.session.conversation_id == conversation_id:
            self.window.new_chat()

    def export(self, fmt: str) -> None:
        window = self.window
        if window.session.conversation_id is None:
            window.set_status("Nothing to export yet: this chat has no saved message")
            return
        if window.history_panel.export(window.session.conversation_id, fmt=fmt) is not None:
            window.set_status("Chat exported")
