"""How the main window's models load: the load options the worker reads (device, dtype, backend, the safety
answers), the loader's safety questions, and the settings and window layout remembered between runs.

The answers given in this run and a device chosen for this run only are the chat session's; the remembered
ones are QSettings' (gui.persistence.settings). May touch: gui.worker (LoadOptions), gui.persistence.settings,
the window's views and public methods.
"""

from __future__ import annotations

from PySide6.QtCore import QByteArray, QRect

from engine.backends import compile_note
from engine.core.errors import ConfigError
from gui.sessions.chat import baseline_key
from gui.worker import REMOTE_CODE, LoadOptions
from gui.views.chat.colouring import MODES


class ModelLoading:
    def __init__(self, window) -> None:
        self.window = window
        self.saved_geometry: QRect | None = None  # the window's normal geometry as last saved (restore_settings)

    def load_options(self) -> LoadOptions:
        window = self.window
        answers = window.session.consent_answers(window.settings.consent_answers())
        device, dtype = window.session.device_override or (window.settings.device(), window.settings.dtype())
        return LoadOptions(device=device, dtype=dtype, backend=window.controls.backend_name(),
                           compile=window.controls.compile_enabled(),
                           remote_code_allowed=answers.remote_code_allowed,
                           remote_code_refused=answers.remote_code_refused, pickle_allowed=answers.pickle_allowed,
                           pickle_refused=answers.pickle_refused)

    def attach(self, worker) -> None:
        """The worker loads with the options as they are now, and says when it loads the model on another
        backend too (a method the loaded backend can't serve)."""
        self.sync()
        worker.model_loaded_on.connect(self.loaded_elsewhere)

    def loaded_elsewhere(self, info) -> None:
        """The loaded model on another backend too: its plain speed there, where one is stored, is known now."""
        self.window.session.model_loaded_on(info)
        self.window.controls.set_plain_speeds(self.window.session.plain_speeds())

    def ready_words(self, info) -> str:
        """The status line of a loaded model, with the note on Compile where its backend doesn't compile."""
        unused = compile_note(info.backend) if self.window.controls.compile_enabled() else None
        return " · ".join(filter(None, (f"Ready · {info.describe()}", unused)))

    def sync(self) -> None:
        """The worker loads with the options as they are now."""
        self.window.worker_thread.worker.load_options = self.load_options()

    def set_device(self, device: str, dtype: str = "auto", remember: bool = True) -> None:
        if remember:
            self.window.settings.set_device(device, dtype)
            self.window.session.device_override = None
        else:
            self.window.session.device_override = (device, dtype)
        self.sync()

    def backend_changed(self, _backend: str) -> None:
        """The settings panel's backend changed: the target loads again on it (through the worker)."""
        window = self.window
        self.sync()
        if window.tools.model_manager is not None:
            window.tools.model_manager.set_backend(window.controls.backend_name())
        info = window.session.model_info
        window.load_model(info.requested if info is not None else window.controls.model_name(), force=True)

    def consent_needed(self, model: str, kind: str, question: str) -> None:
        """Asked once per model: the answer is remembered (QSettings) and the load goes on with it."""
        window = self.window
        window.session.load_ended()
        window.progress.setVisible(window.session.generating)
        title = "Run this model's own code?" if kind == REMOTE_CODE else "Load pickle checkpoints?"
        answer = self._ask(kind, model, title, question)
        if kind == REMOTE_CODE and not answer:
            window.set_status(f"Loading {model} without running its code…")
        window.load_model(model, force=True)

    def draft_consent_needed(self, model: str, kind: str, question: str) -> None:
        """A draft model's safety question (asked when a reply needs the draft): remembered like a target's;
        the reply that needed it failed, so the message is sent again by the user."""
        title = "Run the draft model's own code?" if kind == REMOTE_CODE else "Load the draft's pickle checkpoints?"
        self._ask(kind, model, title, question)

    def _ask(self, kind: str, model: str, title: str, question: str) -> bool:
        window = self.window
        answer = bool(window.confirm(title, question))
        window.session.answer_consent(kind, model, answer)
        window.settings.set_consent(kind, model, answer)
        self.sync()
        window.consent_answered.emit(model, kind, answer)
        return answer

    # ------------------------------------------------------------------ remembered between runs (QSettings)
    def baseline_changed(self) -> None:
        """The plain speed is remembered (per model, device and dtype) and the stats cards say when it was
        measured."""
        window = self.window
        baseline = window.session.baseline()
        if baseline is not None and window.persist and window.session.model_info is not None:
            window.settings.set_baseline(baseline_key(window.session.model_info), baseline.tok_per_s,
                                         baseline.measured_at)
        window.stats_strip.show_baseline(baseline.describe() if baseline is not None else None)
        window.controls.set_plain_speeds(window.session.plain_speeds())

    def restore_settings(self, model_given: bool = False) -> None:
        """The last session's settings panel and window layout (the command line's model wins)."""
        window, settings = self.window, self.window.settings
        values = settings.chat_values()
        if model_given:
            values.pop("model", None)
        try:
            window.controls.apply(**values)
        except ConfigError:  # a method this version does not know: keep the defaults
            pass
        geometry = settings.value("window/geometry")
        if isinstance(geometry, QByteArray) and not geometry.isEmpty():
            window.geometry_restored = window.restoreGeometry(geometry)
        normal = settings.value("window/normal_geometry")  # as saved: Qt's restore has clamped it already
        self.saved_geometry = normal if isinstance(normal, QRect) and normal.isValid() else None
        state = settings.value("window/state")
        if isinstance(state, QByteArray) and not state.isEmpty():
            window.restoreState(state)
        show_rejected = settings.value("view/show_rejected", None, bool)
        if show_rejected is not None:
            window.set_show_rejected(show_rejected)
        record = settings.value("view/record_rounds", None, bool)
        if record is not None:
            window.record_action.setChecked(record)
        colouring = settings.value("view/colour_by", None, str)
        if colouring in MODES:  # a name this version doesn't know keeps colouring by status
            window.set_colouring(colouring)

    def save_settings(self) -> None:
        window = self.window
        values = window.controls.values()
        values["model"] = window.session.model_name(values["model"])
        window.settings.set_chat_values(values)
        window.settings.set_value("window/geometry", window.saveGeometry())
        window.settings.set_value("window/normal_geometry", window.normalGeometry())
        window.settings.set_value("window/state", window.saveState())
        window.settings.set_value("view/show_rejected", window.transcript.show_rejected)
        window.settings.set_value("view/colour_by", window.transcript.colouring)
        window.settings.set_value("view/record_rounds", window.session.record_rounds)
        window.settings.sync()
