"""The main window: chat in the middle, settings on the left, live stats and graphs on the right.

Wiring only: it makes its views (chat column, settings panel, chats list, live dock, status line, menus) in its
own __init__ and connects them to the chat session (gui.sessions.chat) and the worker thread (gui.worker), reached
by queued signals only. Helpers beside it: reply_events, loading, replies, conversations, drafts, tools, remembered.
May touch: gui.sessions.chat, gui.worker (signals and request types), gui.persistence (recorder, store, settings),
the views' public methods. Never the engine's objects.
"""

from __future__ import annotations

import sys
from functools import partial

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import QApplication, QMainWindow

from engine.core.errors import ConfigError
from gui import theme
from gui.persistence.recorder import HistoryRecorder
from gui.persistence.settings import AppSettings
from gui.persistence.store import HistoryStore
from gui.sessions.chat import ChatSession, Settings, spec_words
from gui.sessions.purpose import Purpose
from gui.views.chat.controls import ControlsPanel
from gui.views.chat.history_panel import HistoryPanel
from gui.views.chat.token_popover import TokenPopover
from gui.views.dialogs.training import TrainingFront
from gui.views.live.cost_curve import CostCurveView
from gui.views.live.plots import LivePlots
from gui.views.live.stats import StatsStrip
from gui.views.main.chat_column import ChatColumn
from gui.views.main.conversations import Conversations, open_store
from gui.views.main.dialogs import ask_yes_no
from gui.views.main.docks import StatusLine, history_notice, place_docks
from gui.views.main.drafts import DraftLists
from gui.views.main.live_dock import LiveDock
from gui.views.main.loading import Confirm, LoadingViews, ModelLoading
from gui.views.main.menus import build_menus, help_page
from gui.views.main.remembered import ViewChoices, remembered_chat_values, restore_window, save_window
from gui.views.main.replies import ReplyActions
from gui.views.main.reply_events import ReplyEvents, ReplyViews
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
                 store: HistoryStore | None = None, confirm: Confirm | None = None) -> None:
        """`persist`: keep the chat history (gui.persistence.store) and restore/save the settings and layout
        (gui.persistence.settings); off for scripted runs, benchmarks and most tests. The device, dtype, added models
        and safety answers always come from (and go to) `settings`. `confirm`: the safety checks' yes/no question."""
        super().__init__()
        self.setWindowTitle("SpecScope")
        self.palette_ = palette or theme.LIGHT
        self.persist = persist
        self.settings = settings if settings is not None else AppSettings()
        self.store, self.history_problem = open_store(store, persist)
        self.session = ChatSession(HistoryRecorder(self.store), make_request=GenerationRequest)
        self.replies, self.conversations = ReplyActions(self), Conversations(self)
        self.drafts, self.tools = DraftLists(self), ToolWindows(self)
        self.training = TrainingFront(self)  # "Train a drafter…" and the offer to train an eagle head
        self.geometry_restored, self.saved_geometry = False, None  # the remembered geometry (persist)
        self._closed = False
        self._make_views(model or "default")
        self.loading = ModelLoading(self.session, self.settings, LoadingViews(self.controls, self.chat,
                                    self.status_line, self.stats_strip), confirm or partial(ask_yes_no, self),
                                    persist=persist, parent=self)
        self.reply_events = ReplyEvents(self.session, ReplyViews(self.chat, self.history_panel, self.controls,
                                        self.live, self.status_line), self.loading, parent=self)
        self.rejected_action, self.record_action, self.theme_actions = build_menus(self)
        self._connect_views()
        if persist:
            self._restore(model_given=model is not None)
        self.worker_thread = WorkerThread(loader)
        self._connect_worker(self.worker_thread.worker)
        self.loading.sync()
        self.update_actions()

    def _make_views(self, model: str) -> None:
        self.chat = chat = ChatColumn(self.session, self.palette_)
        self.legend, self.transcript, self.compose_notice = chat.legend, chat.transcript, chat.compose_notice
        self.message_box, self.send_button, self.stop_button = chat.message_box, chat.send_button, chat.stop_button
        self.setCentralWidget(chat)
        self.controls = ControlsPanel()
        self.controls.apply(model=model)
        self.history_panel = HistoryPanel(self.store, self.palette_)
        if notice := history_notice(self.history_problem, self.settings.problem()):  # why nothing is kept
            self.history_panel.show_notice(notice)
        self.token_popover = TokenPopover(self.palette_, self)  # a clicked token's round, beside it
        self.live = live = LiveDock(self.palette_, self.session, self, popover=self.token_popover)
        self.refresh_timer, self.live_scroll, self.round_focus = live.timer, live.widget, live.focus
        self.stats_strip, self.cost_curve, self.plots = (live.panel(StatsStrip), live.panel(CostCurveView),
                                                         live.panel(LivePlots))
        self.stats_strip.show_figures(self.session.figures())  # the empty chat's
        self.round_focus.attach(self.transcript)  # hovering a token highlights its round; a click opens its tree
        self.history_dock, self.controls_dock, self.live_dock = place_docks(self, self.history_panel, self.controls,
                                                                            live.widget)
        self.status_line = StatusLine(self.statusBar())
        self.status_label, self.progress = self.status_line.label, self.status_line.progress

    def _connect_views(self) -> None:
        chat, controls = self.chat, self.controls
        chat.legend.show_rejected_toggled.connect(self.set_show_rejected)
        chat.legend.colouring_changed.connect(self.set_colouring)
        chat.transcript.action_requested.connect(self.replies.run)
        chat.transcript.code_copied.connect(lambda text: self.set_status(f"Copied the code ({len(text)} characters)"))
        chat.transcript.token_hovered.connect(self.round_focus.hover_token)
        chat.transcript.token_clicked.connect(self.round_focus.click_token)
        chat.message_box.send_requested.connect(self.send)
        chat.message_box.edit_last_requested.connect(self.replies.edit_message)
        chat.send_button.clicked.connect(self.send)
        chat.stop_button.clicked.connect(self.stop)
        chat.new_chat_button.clicked.connect(self.new_chat)
        QShortcut(QKeySequence(Qt.Key.Key_Escape), self, activated=self.replies.escape)
        controls.settings_changed.connect(self.settings_changed)
        controls.model_change_requested.connect(self.load_model)
        controls.backend_change_requested.connect(self.tools.backend_changed)  # the Models window's choice too
        controls.backend_change_requested.connect(self.loading.backend_changed)
        controls.backend_noted.connect(self.set_status)  # a method that runs on another backend: why, and costs
        controls.models_requested.connect(self.open_models)
        controls.download_requested.connect(self.tools.download_suggested)
        controls.saved_settings_requested.connect(self.conversations.apply_saved_settings)
        controls.method_picked.connect(self.training.method_picked)
        self.history_panel.conversation_opened.connect(self.conversations.open)
        self.history_panel.conversation_deleted.connect(self.conversations.deleted)
        self.stats_strip.baseline_requested.connect(self.measure_baseline)
        self.request_failed.connect(self.training.generation_failed)
        self.loading.reload_requested.connect(lambda name: self.load_model(name, force=True))
        self.loading.consent_answered.connect(self.consent_answered)
        self.loading.load_state_changed.connect(self.update_actions)
        self.loading.load_failed.connect(self.request_failed)
        self.reply_events.ended.connect(self.update_actions)
        self.reply_events.reply_finished.connect(self.reply_finished)
        self.reply_events.baseline_measured.connect(self.baseline_measured)
        self.reply_events.request_failed.connect(self.request_failed)

    def _connect_worker(self, worker) -> None:
        self.loading.options_changed.connect(worker.set_load_options)  # queued: the worker lives on its thread
        self.load_requested.connect(worker.load)
        self.generation_requested.connect(worker.generate)
        worker.consent_needed.connect(self.loading.consent_needed)
        worker.draft_consent_needed.connect(self.loading.draft_consent_needed)
        worker.model_loaded_on.connect(self.loading.loaded_elsewhere)
        worker.model_load_started.connect(self.loading.load_started)
        worker.model_load_progressed.connect(self.set_status)
        worker.status_reported.connect(self.set_status)  # "Loading draft model…" and the like
        worker.model_loaded.connect(self._on_model_loaded)
        self.cost_requested.connect(worker.measure_cost)
        worker.model_loaded.connect(lambda _info: self.cost_requested.emit(COST_CURVE_TOKENS))
        worker.cost_measured.connect(self.cost_curve.show_curve)
        worker.cost_failed.connect(self.cost_curve.show_failure)
        worker.load_failed.connect(self.loading.show_load_failure)
        worker.generation_started.connect(self.reply_events.started)
        worker.round_verified.connect(self.reply_events.round_verified)
        worker.rounds_revised.connect(self.reply_events.rounds_revised)
        worker.generation_finished.connect(self.reply_events.finished)
        worker.generation_failed.connect(self.reply_events.failed)

    def _restore(self, model_given: bool) -> None:
        """The last session's settings panel, window layout and view choices (the command line's model wins)."""
        try:
            self.controls.apply(**remembered_chat_values(self.settings, model_given))
        except ConfigError:  # a method this version does not know: keep the defaults
            pass
        self.geometry_restored, self.saved_geometry, view = restore_window(self.settings, self)
        for value, apply in ((view.show_rejected, self.set_show_rejected),
                             (view.record_rounds, self.record_action.setChecked), (view.colour_by, self.set_colouring)):
            if value is not None:  # remembered
                apply(value)

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
        return show_window(help_page(self, page))

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
            self.reply_events.end_active()
        self.session.new_chat()
        self.controls.show_saved_settings(None)
        self.history_panel.set_current(None)
        self.history_panel.refresh()
        self.transcript.render_turns([])
        self.live.clear()
        self.refresh_live_views()
        self.set_status("New chat" + self.loading.model_words())
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
        if not self.transcript.set_show_rejected(show):
            return
        self.rejected_action.setChecked(show)
        self.transcript.render_turns(self.session.turns, self.session.current)

    def set_record_rounds(self, on: bool) -> None:
        """Record each round's tree from the next reply (the View menu's toggle)."""
        self.session.record_rounds = on

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
        self.reply_events.begin(status)
        self.update_actions()
        self.generation_requested.emit(request)

    def settings_changed(self) -> None:
        """The settings panel changed: it applies from the next message."""
        if self.session.active is not None and self.session.active.purpose is Purpose.CHAT:
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
        self.status_line.say(text)

    def _on_model_loaded(self, info: ModelInfo) -> None:
        self.loading.model_loaded(info)
        self.tools.apply_pending_pair(info.requested)
        self.drafts.refresh()
        self.drafts.look_up_own_drafter(info)
        self.loading.show_ready(info)
        self.update_actions()
        self.message_box.setFocus()
        self.model_ready.emit(info)

    # ------------------------------------------------------------------ shutdown
    def shutdown(self) -> None:
        """Stop the generator at the next round and join the worker thread (and the model manager's); save the
        settings and close the history. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self.live.stop()
        if self.persist:
            values = self.controls.values()
            view = ViewChoices(self.transcript.show_rejected, self.session.record_rounds, self.transcript.colouring)
            save_window(self.settings, self, {**values, "model": self.session.model_name(values["model"])}, view)
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
