"""How the main window's models load: the load options (device, dtype, backend, the safety answers), sent to the
worker by a queued signal; the loader's safety questions; a load started, done or failed, shown; and the
plain-speed reference each loaded model keeps.

Given what it reads and renders (the chat session, the app settings, the settings panel, the chat column, the
status line, the stats cards) and the yes/no question, never the window; it tells the window what to do by
signals. The answers given in this run and a device chosen for this run only are the chat session's; the
remembered ones are QSettings' (gui.persistence.settings). May touch: gui.worker (LoadOptions),
gui.persistence.settings, those views.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from PySide6.QtCore import QObject, Signal

from engine.backends import compile_note
from gui.sessions.baselines import baseline_key
from gui.worker import REMOTE_CODE, LoadOptions

Confirm = Callable[[str, str], bool]  # (title, question) -> the user's yes or no


class LoadingViews(NamedTuple):
    controls: object  # gui.views.chat.controls.ControlsPanel
    chat: object  # gui.views.main.chat_column.ChatColumn
    status_line: object  # gui.views.main.docks.StatusLine
    stats_strip: object  # gui.views.live.stats.StatsStrip


class ModelLoading(QObject):
    options_changed = Signal(object)  # LoadOptions: to the worker's set_load_options (queued: it lives on its thread)
    consent_answered = Signal(str, str, bool)  # model, kind (remote-code | pickle), answer
    reload_requested = Signal(str)  # load this model again (its safety question answered, the backend changed)
    load_state_changed = Signal()  # a load started or failed: the window's actions follow
    load_failed = Signal(str)  # what failed, in words

    def __init__(self, session, settings, views: LoadingViews, confirm: Confirm, *, persist: bool = False,
                 parent: QObject | None = None) -> None:
        """`session`: gui.sessions.chat.ChatSession; `settings`: gui.persistence.settings.AppSettings; `persist`:
        plain speeds are remembered between runs."""
        super().__init__(parent)
        self.session, self.settings, self.confirm, self.persist = session, settings, confirm, persist
        self.controls, self.chat, self.status_line, self.stats_strip = views

    # ------------------------------------------------------------------ the worker's load, shown
    def load_started(self, name: str) -> None:
        self.session.load_started(name)
        self.status_line.set_busy(True)
        self.status_line.say(f"Loading {name} model…" if name == "default" else f"Loading {name}…")
        self.controls.set_model_state("loading…")
        self.chat.show_loading(name)
        self.load_state_changed.emit()

    def model_loaded(self, info) -> None:
        """The loaded model in the session, the settings panel and the chat column."""
        self.session.model_loaded(info)
        self.status_line.set_busy(self.session.generating)
        self.controls.set_model_state(info.describe(), n_layers=info.n_layers, loaded_name=info.requested,
                                      backend=info.backend)
        self.chat.show_ready(info.name)

    def show_ready(self, info) -> None:
        """Its plain speed (remembered between runs) and the status line say it is ready."""
        if self.persist:
            self.session.remember_baselines(self.settings.baselines())
        self.baseline_changed()
        self.status_line.say(self.ready_words(info))

    def show_load_failure(self, name: str, message: str) -> None:
        """The load failed: the loaded model (if any) stays; the failure is shown and said (`load_failed`)."""
        self.session.load_ended()
        self.session.pending_pair = None  # a model that fails to load never changes the chat's settings
        self.status_line.set_busy(self.session.generating)
        text = f"Could not load {name}: {message}"
        self.status_line.say(text)
        self.controls.revert_model()
        info = self.session.model_info
        self.controls.set_model_state(info.describe() if info else "not loaded")
        self.controls.show_runtime_problem(text)
        if info is None:
            self.chat.transcript.setPlaceholderText(text)
        self.chat.transcript.append_notice(text)
        self.load_state_changed.emit()
        self.load_failed.emit(text)

    # ------------------------------------------------------------------ options and questions

    def load_options(self) -> LoadOptions:
        answers = self.session.consent_answers(self.settings.consent_answers())
        device, dtype = self.session.device_override or (self.settings.device(), self.settings.dtype())
        return LoadOptions(device=device, dtype=dtype, backend=self.controls.backend_name(),
                           compile=self.controls.compile_enabled(),
                           remote_code_allowed=answers.remote_code_allowed,
                           remote_code_refused=answers.remote_code_refused, pickle_allowed=answers.pickle_allowed,
                           pickle_refused=answers.pickle_refused)

    def sync(self) -> None:
        """The worker loads with the options as they are now."""
        self.options_changed.emit(self.load_options())

    def loaded_elsewhere(self, info) -> None:
        """The loaded model on another backend too: its plain speed there, where one is stored, is known now."""
        self.session.model_loaded_on(info)
        self.controls.set_plain_speeds(self.session.plain_speeds())

    def model_words(self) -> str:
        """" · the loaded model · its plain speed" for the status line ("" when none is loaded)."""
        info, baseline = self.session.model_info, self.session.baseline()
        plain = f"plain speed {baseline.describe()}" if baseline is not None else "plain speed not measured yet"
        return f" · {info.describe()} · {plain}" if info else ""

    def ready_words(self, info) -> str:
        """The status line of a loaded model, with the note on Compile where its backend doesn't compile."""
        unused = compile_note(info.backend) if self.controls.compile_enabled() else None
        return " · ".join(filter(None, (f"Ready · {info.describe()}", unused)))

    def set_device(self, device: str, dtype: str = "auto", remember: bool = True) -> None:
        if remember:
            self.settings.set_device(device, dtype)
            self.session.device_override = None
        else:
            self.session.device_override = (device, dtype)
        self.sync()

    def backend_changed(self, _backend: str) -> None:
        """The settings panel's backend changed: the target loads again on it (through the worker)."""
        self.sync()
        info = self.session.model_info
        self.reload_requested.emit(info.requested if info is not None else self.controls.model_name())

    def consent_needed(self, model: str, kind: str, question: str) -> None:
        """Asked once per model: the answer is remembered (QSettings) and the load goes on with it."""
        self.session.load_ended()
        self.status_line.set_busy(self.session.generating)
        title = "Run this model's own code?" if kind == REMOTE_CODE else "Load pickle checkpoints?"
        answer = self._ask(kind, model, title, question)
        if kind == REMOTE_CODE and not answer:
            self.status_line.say(f"Loading {model} without running its code…")
        self.reload_requested.emit(model)

    def draft_consent_needed(self, model: str, kind: str, question: str) -> None:
        """A draft model's safety question (asked when a reply needs the draft): remembered like a target's;
        the reply that needed it failed, so the message is sent again by the user."""
        title = "Run the draft model's own code?" if kind == REMOTE_CODE else "Load the draft's pickle checkpoints?"
        self._ask(kind, model, title, question)

    def _ask(self, kind: str, model: str, title: str, question: str) -> bool:
        answer = bool(self.confirm(title, question))
        self.session.answer_consent(kind, model, answer)
        self.settings.set_consent(kind, model, answer)
        self.sync()
        self.consent_answered.emit(model, kind, answer)
        return answer

    def baseline_changed(self) -> None:
        """The plain speed is remembered (per model, device and dtype) and the stats cards say when it was
        measured."""
        baseline = self.session.baseline()
        if baseline is not None and self.persist and self.session.model_info is not None:
            self.settings.set_baseline(baseline_key(self.session.model_info), baseline.tok_per_s, baseline.measured_at)
        self.stats_strip.show_baseline(baseline.describe() if baseline is not None else None)
        self.controls.set_plain_speeds(self.session.plain_speeds())
