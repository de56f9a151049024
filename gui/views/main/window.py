"""The main window: chat in the middle, settings on the left, live stats and graphs on the right.

It wires three things and holds no state of its own: the chat session (gui.sessions.chat: which model, the
request in flight, the baseline, the message being edited, the Models window's pending pair, the history
writes), the worker thread (gui.worker: the engine) and the views (gui.views.*: rendering). Events arrive once
per round through queued signals; the session folds them, the transcript appends each round at once, while the
live panels are redrawn from a 20 Hz timer (gui.views.main.live_dock), and only when something changed.

Widgets are built by gui.views.main.build and .menus; the reply actions, saved chats, model loading, the draft
list and the Tools windows are helpers beside it (replies, conversations, loading, drafts, tools).
May touch: gui.sessions.chat, gui.worker (signals and request types), gui.persistence (recorder, store,
settings), the views' public methods. Never the engine's objects.
"""

from __future__ import annotations

import sys

from PySide6.QtCore import QSize, Signal
from PySide6.QtWidgets import QApplication, QMainWindow

from engine.core.errors import ConfigError
from gui import theme
from gui.persistence.recorder import HistoryRecorder
from gui.persistence.settings import AppSettings
from gui.persistence.store import HistoryStore
from gui.sessions.chat import CHAT, ChatSession, Settings, spec_words
from gui.views.dialogs.training import TrainingFront
from gui.views.main.build import build_views
from gui.views.main.conversations import Conversations, open_store
from gui.views.main.dialogs import ask_yes_no
from gui.views.main.drafts import DraftLists
from gui.views.main.loading import ModelLoading
from gui.views.main.menus import build_menus, help_page
from gui.views.main.replies import ReplyActions
from gui.views.main.screen_fit import show_window
from gui.views.main.tools import ToolWindows
from gui.worker import EngineLoader, GenerationRequest, LoadOptions, ModelInfo, WorkerThread

COST_CURVE_TOKENS = 9  # the verify-cost curve up to k = 8 drafted tokens plus the target's own


class MainWindow(QMainWindow):
    # what happened (tests and the scripted mode wait on these)
    reply_finished = Signal(object)  # Turn
    request_failed = Signal(str)
    model_ready = Signal(object)  # ModelInfo
    baseline_measured = Signal(float)
    draft_choices_shown = Signal(object)  # gui.sessions.models.DraftChoices
    own_drafter_looked_up = Signal(object)  # the loaded target's catalog entry (None: not looked up)
    conversation_opened = Signal(int)
    consent_answered = Signal(str, str, bool)  # model, kind (remote-code | pickle), answer
    # asks, queued to the worker thread
    load_requested = Signal(str)
    cost_requested = Signal(int)  # measure (or read) the loaded target's verify-cost curve up to n tokens
    generation_requested = Signal(object)

    def __init__(self, loader: EngineLoader | None = None, palette: theme.Palette | None = None,
                 model: str | None = None, *, persist: bool = False, settings: AppSettings | None = None,
                 store: HistoryStore | None = None) -> None:
        """`persist`: keep the chat history (SQLite, gui/persistence/store.py) and restore/save the settings and
        window layout (QSettings, gui/persistence/settings.py). Off for scripted runs, benchmarks and most tests.
        The device, dtype, added models and safety answers always come from (and go to) `settings`."""
        super().__init__()
        self.setWindowTitle("SpecScope")
        self.palette_ = palette or theme.LIGHT
        self.persist = persist
        self.settings = settings if settings is not None else AppSettings()
        self.store, self.history_problem = open_store(store, persist)
        self.session = ChatSession(HistoryRecorder(self.store), make_request=GenerationRequest)
        # replaceable: the yes/no question of the safety checks (tests answer it without a modal dialog)
        self.confirm = lambda title, text: ask_yes_no(self, title, text)
        self.replies, self.conversations = ReplyActions(self), Conversations(self)
        self.loading, self.drafts, self.tools = ModelLoading(self), DraftLists(self), ToolWindows(self)
        self.training = TrainingFront(self)  # "Train a drafter…" and the offer to train an eagle head
        self.geometry_restored = False
        self._closed = False

        build_views(self, model or "default")
        build_menus(self)
        self.controls.method_picked.connect(self.training.method_picked)
        self.request_failed.connect(self.training.generation_failed)
        if persist:
            self.loading.restore_settings(model_given=model is not None)
        self.worker_thread = WorkerThread(loader)
        self.loading.attach(self.worker_thread.worker)
        self._connect_worker(self.worker_thread.worker)
        self.update_actions()

    def _connect_worker(self, worker) -> None:
        self.load_requested.connect(worker.load)
        self.generation_requested.connect(worker.generate)
        worker.consent_needed.connect(self.loading.consent_needed)
        worker.draft_consent_needed.connect(self.loading.draft_consent_needed)
        worker.model_load_started.connect(self._on_load_started)
        worker.model_load_progressed.connect(self.set_status)
        worker.status_reported.connect(self.set_status)  # "Loading draft model…" and the like
        worker.model_loaded.connect(self._on_model_loaded)
        self.cost_requested.connect(worker.measure_cost)
        worker.model_loaded.connect(lambda _info: self.cost_requested.emit(COST_CURVE_TOKENS))
        worker.cost_measured.connect(self.cost_curve.show_curve)
        worker.cost_failed.connect(self.cost_curve.show_failure)
        worker.load_failed.connect(self._on_load_failed)
        worker.generation_started.connect(self._on_generation_started)
        worker.round_verified.connect(self._on_round_verified)
        worker.generation_finished.connect(self._on_generation_finished)
        worker.generation_failed.connect(self._on_generation_failed)

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(1440, 900)

    # ------------------------------------------------------------------ what other windows and the app ask
    @property
    def model_info(self) -> ModelInfo | None:
        return self.session.model_info

    @property
    def generating(self) -> bool:
        return self.session.generating

    def load_options(self) -> LoadOptions:
        return self.loading.load_options()

    def set_device(self, device: str, dtype: str = "auto", remember: bool = True) -> None:
        """Device and dtype for the next load (the model manager's pickers; --device, for this run only)."""
        self.loading.set_device(device, dtype, remember)

    def set_backend(self, backend: str) -> None:
        """The backend for the next load (--backend), without loading."""
        self.controls.set_backend(backend)
        self.loading.sync()

    def set_compile(self, on: bool) -> None:
        """torch.compile'd runners for the next load (--compile), without loading."""
        self.controls.set_compile(on)
        self.loading.sync()

    def open_models(self):
        return self.tools.open_models()

    def open_settings(self):
        return self.tools.open_settings()

    def open_compare(self):
        return self.tools.open_compare()

    def open_fastest(self):
        return self.tools.open_fastest()

    def open_help(self, page: str):
        """A Help page: "guide" (the colours and figures) or "shortcuts" (read from the menus' actions)."""
        dialog = help_page(self, page)
        show_window(dialog)
        return dialog

    # ------------------------------------------------------------------ public actions
    def start(self) -> None:
        """Load the model chosen in the settings (in the background)."""
        self.load_model(self.controls.model_name())

    def load_model(self, name: str, force: bool = False) -> None:
        """Load `name` in the background. `force`: also when it is the loaded one (the device or dtype
        changed, a safety question was answered)."""
        name = self.session.wants_load(name, force)
        if name is not None:
            self.update_actions()
            self.load_requested.emit(name)

    def send(self, text: str | None = None, settings: Settings | None = None) -> bool:
        """Send the message box's text (or `text`) with the settings panel's settings (or `settings`); returns
        whether a request went out. A message being edited (Edit) forks the chat first."""
        if not self.session.ready or self.session.generating or self.tools.comparing():
            return False
        text = (text if text is not None else self.message_box.toPlainText()).strip()
        if not text:
            return False
        try:
            settings = settings if settings is not None else self.controls.read()
        except ConfigError as exc:
            self.controls.revalidate()
            self.set_status(f"Refused: {exc}")
            return False
        self.controls.show_runtime_problem(None)
        if self.session.fork_edited():  # the chat goes on from before the edited message; the history keeps both
            self.transcript.render_turns(self.session.turns)
        request = self.session.send(text, settings, self.controls.model_name())
        self.history_panel.refresh()  # a new chat is in the sidebar from its first message
        self.history_panel.set_current(self.session.conversation_id)
        self.transcript.append_user(self.session.turns[-1])
        self.message_box.clear()
        self._begin(request, f"Generating · {spec_words(settings.spec)}…")
        return True

    def stop(self) -> None:
        """Stop at the next round boundary; what was committed stays."""
        if self.session.generating:
            self.worker_thread.stop_generation()
            self.set_status("Stopping at the next round…")

    def new_chat(self) -> None:
        if self.session.generating:
            self.worker_thread.stop_generation()
            self.session.abandon("cancelled")  # what it wrote is kept, marked as stopped
            self._end_active()
        self.session.new_chat()
        self.controls.show_saved_settings(None)
        self.history_panel.set_current(None)
        self.history_panel.refresh()
        self.transcript.render_turns([])
        self.live.clear()
        self.refresh_live_views()
        info, baseline = self.session.model_info, self.session.baseline()
        plain = f"plain speed {baseline.describe()}" if baseline is not None else "plain speed not measured yet"
        self.set_status("New chat" + (f" · {info.describe()} · {plain}" if info else ""))
        self.update_actions()
        self.message_box.setFocus()

    def measure_baseline(self) -> None:
        """Re-run the last message with plain decoding, hidden, to measure this model's reference tok/s."""
        if self.tools.comparing():
            return
        try:
            settings = self.controls.read()
        except ConfigError:
            return
        request = self.session.baseline_request(settings.sampling, self.controls.model_name())
        if request is not None:
            self._begin(request, "Measuring plain decoding speed…")

    def set_show_rejected(self, show: bool) -> None:
        if self.transcript.show_rejected == show:
            return
        self.transcript.show_rejected = show
        self.rejected_action.setChecked(show)
        self.transcript.render_turns(self.session.turns, self.session.current)

    def set_colouring(self, mode: str) -> None:
        """What the tokens' colours show (gui.views.chat.colouring: status, acceptance, entropy, confidence)."""
        if self.transcript.colouring != mode:
            self.transcript.set_colouring(mode)
            self.legend.set_colouring(mode)  # when asked from elsewhere (its signal comes back here: a no-op)
            self.transcript.render_turns(self.session.turns, self.session.current)

    def set_theme(self, name_or_palette) -> None:
        palette = theme.resolve(name_or_palette) if isinstance(name_or_palette, str) else name_or_palette
        self.palette_ = palette
        for action in self.theme_actions.actions():
            action.setChecked(theme.THEMES[action.data()] == palette)
        app = QApplication.instance()
        if app is not None:
            theme.apply(app, palette)
        for view in (self.transcript, self.legend, self.live, self.history_panel, self.tools, self.training):
            view.set_palette(palette)
        self.transcript.render_turns(self.session.turns, self.session.current)
        self.refresh_live_views()

    def refresh_live_views(self) -> None:
        """Redraw every live panel now (at the end of a reply, on a theme change)."""
        self.live.feed()

    # ------------------------------------------------------------------ the request in flight
    def _begin(self, request: GenerationRequest, status: str) -> None:
        self.controls.set_pending_note(None)
        self.progress.show()
        self.set_status(status)
        self.update_actions()
        self.generation_requested.emit(request)

    def _end_active(self) -> None:
        self.progress.setVisible(self.session.loading is not None)
        self.controls.set_pending_note(None)
        self.update_actions()

    def settings_changed(self) -> None:
        """The settings panel changed: it applies from the next message."""
        if self.session.active is not None and self.session.active.purpose == CHAT:
            self.controls.set_pending_note("Changes apply from the next message.")
        self.drafts.refresh()
        self.update_actions()

    def update_actions(self) -> None:
        ready, idle = self.session.ready, not self.session.generating
        self.send_button.setEnabled(ready and idle and not self.tools.comparing()
                                    and self.controls.config_problem() is None)
        self.stop_button.setEnabled(not idle)
        self.stats_strip.set_measure_enabled(ready and idle)
        self.compose_notice.show_reason(self.session.recorder.read_only_reason)

    def set_status(self, text: str) -> None:
        self.status_label.setText(text)

    # ------------------------------------------------------------------ worker signals: loading
    def _on_load_started(self, name: str) -> None:
        self.session.load_started(name)
        self.progress.show()
        self.set_status(f"Loading {name} model…" if name == "default" else f"Loading {name}…")
        self.controls.set_model_state("loading…")
        self.transcript.setPlaceholderText(f"Loading {name}…")
        self.update_actions()

    def _on_model_loaded(self, info: ModelInfo) -> None:
        self.session.model_loaded(info)
        self.progress.setVisible(self.session.generating)
        self.controls.set_model_state(info.describe(), n_layers=info.n_layers, loaded_name=info.requested,
                                      backend=info.backend)
        self.transcript.setPlaceholderText(f"{info.name} is ready. Type a message below and press Enter.")
        self.message_box.setPlaceholderText("Message (Enter to send, Shift+Enter for a new line)")
        self.message_box.viewport().update()
        self.tools.apply_pending_pair(info.requested)
        self.drafts.refresh()
        self.drafts.look_up_own_drafter(info)
        if self.persist:
            self.session.remember_baselines(self.settings.baselines())
        self.loading.baseline_changed()
        self.set_status(self.loading.ready_words(info))
        self.update_actions()
        self.message_box.setFocus()
        self.model_ready.emit(info)

    def _on_load_failed(self, name: str, message: str) -> None:
        self.session.load_ended()
        self.session.pending_pair = None  # a model that fails to load never changes the chat's settings
        self.progress.setVisible(self.session.generating)
        text = f"Could not load {name}: {message}"
        self.set_status(text)
        self.controls.revert_model()
        info = self.session.model_info
        self.controls.set_model_state(info.describe() if info else "not loaded")
        self.controls.show_runtime_problem(text)
        if info is None:
            self.transcript.setPlaceholderText(text)
        self.transcript.append_notice(text)
        self.update_actions()
        self.request_failed.emit(text)

    # ------------------------------------------------------------------ worker signals: generation
    def _on_generation_started(self, request_id: int, event) -> None:
        turn = self.session.on_started(request_id, event)
        if turn is None:
            return
        self.transcript.begin_assistant(turn)
        self.live.clear()  # the reply's panels redraw from the timer
        self.live.start()

    def _on_round_verified(self, request_id: int, event) -> None:
        tokens = self.session.on_round(request_id, event)
        if tokens is not None:
            self.transcript.append_tokens(tokens)

    def _on_generation_finished(self, request_id: int, event) -> None:
        outcome = self.session.on_finished(request_id, event)
        if outcome is None:
            return
        self._end_active()
        self.set_status(outcome.status)
        self.loading.baseline_changed()
        if outcome.purpose != CHAT:
            if outcome.baseline is not None:
                self.refresh_live_views()
                self.baseline_measured.emit(outcome.baseline)
            return
        self.history_panel.refresh()
        if outcome.turn is not None:
            self.transcript.end_assistant(outcome.turn)
        self.refresh_live_views()
        if outcome.turn is not None:
            self.reply_finished.emit(outcome.turn)

    def _on_generation_failed(self, request_id: int, message: str) -> None:
        outcome = self.session.on_failed(request_id, message)
        if outcome is None:
            return
        self._end_active()
        if outcome.purpose == CHAT:
            self.history_panel.refresh()
            if outcome.restored_text is not None:
                self.transcript.render_turns(self.session.turns)
                if not self.message_box.toPlainText().strip():
                    self.message_box.setPlainText(outcome.restored_text)
            elif outcome.turn is not None:
                self.transcript.end_assistant(outcome.turn)
            self.transcript.append_notice(f"Not generated: {message}")
        self.controls.show_runtime_problem(message)
        self.set_status(outcome.status)
        self.refresh_live_views()
        self.request_failed.emit(message)

    # ------------------------------------------------------------------ shutdown
    def shutdown(self) -> None:
        """Stop the generator at the next round and join the worker thread (and the model manager's); save the
        settings and close the history. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self.live.stop()
        if self.persist:
            self.loading.save_settings()
        self.tools.shutdown()
        self.drafts.shutdown()
        self.training.shutdown()  # cancels a training run (its checkpoint is kept) and waits for it
        self.worker_thread.shutdown()
        self.session.abandon("closed")  # what it wrote is kept, marked as ended by closing (not an error)
        if self.store is not None:
            if self.session.recorder.close():  # writes a busy database still held back
                print(f"specscope: {self.session.recorder.last_error}", file=sys.stderr)
            self.store.close()

    def closeEvent(self, event) -> None:  # noqa: N802
        self.shutdown()
        super().closeEvent(event)
