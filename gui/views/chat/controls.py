"""The settings panel: model, method, draft model, k, the method's own parameters, adaptive draft length,
sampling, token budget, system prompt.

It renders and reads widgets, nothing more: `read()` turns them into engine configs (which validate
themselves; the method's checks on the loaded model's facts, such as early-exit layers within its layers, run
from its MethodSpec) or into the one sentence that says why the combination is refused. The methods, their
labels, help lines, parameters (one control each, gui.views.chat.params) and what each needs come from the
method registry. The window reads the panel when a message is sent, so a change applies from the next message.

Which methods the loaded target can use, and on which backend, is engine.models.availability's table (read
from its catalog entry: a method it can't use is disabled with the reason; under "auto" a method its backend
can't serve runs where the table says, `backend=` in the setting, with a note); the boxes are built by
gui.views.chat.boxes. May touch: engine.core.config and the method registry (read), engine.models.catalog
.own_drafter, engine.models.availability and engine.models.pairs (a described target's facts, no file read),
gui.sessions.chat (Settings, what it returns; the note's words). No state beyond its widgets and what it was
told of the loaded target.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QFileDialog, QVBoxLayout, QWidget

import engine.drafters  # noqa: F401  (registers the methods)
from engine.backends import is_local_backend
from engine.core.config import SamplingConfig, SpecConfig, check_backend
from engine.core.errors import ConfigError
from engine.core.methods import ModelFacts, all_params, method_spec, methods as registered_methods
from engine.models import catalog
from engine.models.availability import entry_choices
from engine.models.pairs import DRAFT_IS_TARGET, pairs_for
from gui.sessions.chat import Settings, backend_note
from gui.views.chat.boxes import (build_model_box, build_sampling_box, build_saved_box, build_spec_box,
                                  build_system_box, note_label)
from gui.views.chat.draft_list import cross_draft_note, fill_drafts
from gui.views.chat.methods import add_method_items, draft_placeholder, draft_tooltip, is_head, mark_methods
from gui.views.chat.params import changed_signal, read_param, shown_value, write_param


class ControlsPanel(QWidget):
    settings_changed = Signal()
    model_change_requested = Signal(str)
    backend_change_requested = Signal(str)  # auto | transformers | llama.cpp: the target loads again on it
    models_requested = Signal()  # the model manager
    download_requested = Signal(str)  # a known-good draft's hub id (the model manager downloads it)
    saved_settings_requested = Signal()  # apply the settings a reopened chat ran with
    method_picked = Signal(str)  # the user picked a method in the list (not set by apply)
    backend_noted = Signal(str)  # the setting now runs on another backend than the loaded model's: why, and costs

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self._n_layers: int | None = None
        self._loaded_model: str | None = None
        self._loaded_backend: str | None = None  # the backend the loaded target runs on
        self._runtime_problem: str | None = None
        self._target_aliases: set[str] = set()  # names of the loaded target's files ("default", its path)
        self._suggested_download: str | None = None
        self._draft_note_text = ""
        self._cross_drafts: set[str] = set()  # the drafts offered that are of another tokenizer
        self._method_chosen = False  # the user (or a remembered setting) chose the method: kept as it is
        self._entry: catalog.CatalogEntry | None = None  # the loaded target, described (None: not yet, a server)
        self._choices: dict = {}  # method -> engine.models.availability.MethodChoice for the loaded target
        self._plain_speeds: dict = {}  # backend -> the loaded model's measured plain speed there (Baseline)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(8, 4, 8, 8)
        outer.setSpacing(8)
        for build in (build_saved_box, build_model_box, build_spec_box, build_sampling_box, build_system_box):
            outer.addWidget(build(self))
        self.problem = note_label("problem")
        outer.addWidget(self.problem)
        self.notice = note_label("notice")
        outer.addWidget(self.notice)
        outer.addStretch(1)
        self._connect()
        self._refresh_enabled()
        self.revalidate()

    def _connect(self) -> None:
        for signal in (self.method.currentIndexChanged, self.k.valueChanged, self.adaptive.toggled,
                       *(changed_signal(w) for w in self.param_controls.values()), self.temperature.valueChanged, self.top_p.valueChanged, self.top_k.valueChanged,
                       self.seed.valueChanged, self.max_new_tokens.valueChanged, self.draft.currentTextChanged,
                       self.system_prompt.textChanged):
            signal.connect(self._changed)
        self.method.activated.connect(self._method_picked)
        self.model.activated.connect(lambda _index: self._model_chosen())
        self.model.lineEdit().editingFinished.connect(self._model_chosen)
        self.browse.clicked.connect(self._browse_model)
        self.backend.activated.connect(lambda _index: self._backend_chosen())
        self.compile_box.toggled.connect(lambda _on: self._backend_chosen())
        self.models_button.clicked.connect(self.models_requested)
        self.saved_apply.clicked.connect(self.saved_settings_requested)
        self.draft_download.clicked.connect(lambda: self.download_requested.emit(self._suggested_download or ""))

    def show_saved_settings(self, words: str | None) -> None:
        """What a reopened chat ran with (None: hide the note)."""
        self.saved_note.setText(f"This chat ran with {words}." if words else "")
        self.saved_box.setVisible(bool(words))

    # ------------------------------------------------------------------ reading
    def read(self) -> Settings:
        """The settings for the next message; raises ConfigError with the reason when they are refused."""
        method = method_spec(self.method_name())
        choice = self._choices.get(method.name)
        if choice is not None and not choice.usable:
            raise ConfigError(choice.refusal)
        params = {p.name: read_param(p, self.param_controls[p.name]) for p in method.params}
        spec = SpecConfig(method=method.name, k=self.k.value(), draft=self.draft_name(), params=params,
                          adaptive=self.adaptive.isChecked() and method.speculative, backend=self.routed_backend())
        backend = choice.backend if choice is not None else self.effective_backend()
        if method.check_facts is not None:
            method.check_facts(spec, ModelFacts(n_layers=self._n_layers, backend=backend))
        if choice is None and backend is not None:  # the target not described yet: as loaded
            check_backend(method.name, backend)
        temperature = round(self.temperature.value(), 4)
        sampling = SamplingConfig(temperature=temperature, top_k=self.top_k.value(), top_p=self.top_p.value(),
                                  seed=None if self.seed.value() < 0 else self.seed.value())
        return Settings(model=self.model_name(), spec=spec, sampling=sampling,
                        max_new_tokens=self.max_new_tokens.value(),
                        system_prompt=self.system_prompt.toPlainText())

    def method_name(self) -> str:
        return self.method.currentData()

    def backend_name(self) -> str:
        """The backend chosen: auto, transformers or llama.cpp."""
        return self.backend.currentData()

    def effective_backend(self) -> str | None:
        """The backend the next reply runs on: the one chosen, or under auto the loaded target's (None while
        unknown, or for a model on a server)."""
        chosen = self.backend_name()
        if chosen != "auto":
            return chosen
        return self._loaded_backend if is_local_backend(self._loaded_backend) else None

    def method_choice(self, name: str):
        """Where method `name` runs for the loaded target, or why it can't (engine.models.availability
        .MethodChoice); None while the target is not described."""
        return self._choices.get(name)

    def routed_backend(self) -> str | None:
        """The backend the chosen method runs on where the loaded model's can't serve it (engine.models.availability:
        "auto" by the model and the method; the worker loads the model there too), else None: as loaded."""
        choice = self._choices.get(self.method_name())
        if choice is None or not choice.usable or choice.backend == self._loaded_backend:
            return None
        return choice.backend

    def routed_note(self) -> str:
        """Why the chosen method runs on another backend, and plain decoding's measured speed on both; "" when it
        runs as loaded."""
        routed = self.routed_backend()
        if routed is None:
            return ""
        return backend_note(self._choices[self.method_name()].note, (self._loaded_backend, routed),
                            self._plain_speeds)

    def set_plain_speeds(self, speeds: dict) -> None:
        """The loaded model's measured plain speed per backend (gui.sessions.chat.ChatSession.plain_speeds)."""
        self._plain_speeds = dict(speeds)
        self.revalidate()

    def set_backend(self, backend: str) -> None:
        """Choose the backend without loading (the command line; the window loads after)."""
        self.backend.setCurrentIndex(max(0, self.backend.findData(backend)))
        self._update_choices()

    def compile_enabled(self) -> bool:
        """Whether the target loads torch.compile'd (transformers backend)."""
        return self.compile_box.isChecked()

    def set_compile(self, on: bool) -> None:
        """Without loading (the command line; the window loads after)."""
        self.compile_box.blockSignals(True)
        self.compile_box.setChecked(on)
        self.compile_box.blockSignals(False)
        self.revalidate()

    def draft_name(self) -> str | None:
        """The draft model, when the method uses one; for a method that reads a head, the head typed there when
        it is one: a folder (eagle), or an existing file its MethodSpec's head_file pattern names (mtp:
        mtp-*.gguf); else None: the engine looks for the model's own head (a draft model named there is not one)."""
        method, text = method_spec(self.method_name()), self.draft.currentText().strip()
        if method.reads_head:
            return text if text and is_head(Path(text).expanduser(), method.head_file) else None
        return (text or None) if method.needs_draft else None

    def values(self) -> dict:
        """Every field by name, as the window remembers them (gui.persistence.settings.chat_fields) and `apply`
        takes them: each method parameter as its control shows it (0: auto)."""
        return {"model": self.model_name(), "method": self.method_name(), "draft": self.draft.currentText().strip(),
                "k": self.k.value(), **{name: shown_value(w) for name, w in self.param_controls.items()},
                "adaptive": self.adaptive.isChecked(), "temperature": self.temperature.value(),
                "top_p": self.top_p.value(), "top_k": self.top_k.value(), "seed": self.seed.value(),
                "max_new_tokens": self.max_new_tokens.value(), "system_prompt": self.system_prompt.toPlainText()}

    def model_name(self) -> str:
        return self.model.currentText().strip() or "default"

    def config_problem(self) -> str | None:
        """Why the current combination is refused, or None."""
        try:
            self.read()
        except ConfigError as exc:
            return str(exc)
        return None

    # ------------------------------------------------------------------ writing
    def apply(self, *, model: str | None = None, method: str | None = None, draft: str | None = None,
              k: int | None = None, adaptive: bool | None = None, temperature: float | None = None,
              top_p: float | None = None, top_k: int | None = None, seed: int | None = None,
              max_new_tokens: int | None = None, system_prompt: str | None = None, **params) -> None:
        """Set fields (the command line, a reopened chat and tests use this); `params` are method parameters
        by name (0: auto), None leaves a field as it is."""
        unknown = set(params) - set(self.param_controls)
        if unknown:
            raise TypeError(f"no setting {', '.join(sorted(unknown))} in the panel")
        if model is not None:
            self._set_combo_text(self.model, model)
        if method is not None:
            self._method_chosen = True
            self.method.setCurrentIndex(self.method.findData(method_spec(method).name))
        if draft is not None:
            self._set_combo_text(self.draft, draft)
        if k is not None:
            self.k.setValue(k)
        for name, value in params.items():
            if value is not None:
                write_param(next(p for p in all_params() if p.name == name), self.param_controls[name], value)
        if adaptive is not None:
            self.adaptive.setChecked(adaptive)
        if temperature is not None:
            self.temperature.setValue(temperature)
        if top_p is not None:
            self.top_p.setValue(top_p)
        if top_k is not None:
            self.top_k.setValue(top_k)
        if seed is not None:
            self.seed.setValue(seed)
        if max_new_tokens is not None:
            self.max_new_tokens.setValue(max_new_tokens)
        if system_prompt is not None:
            self.system_prompt.setPlainText(system_prompt)
        self.revalidate()

    def apply_spec(self, spec: SpecConfig) -> None:
        """Set the method, k, draft, the method's parameters and adaptive of `spec` (a compared setting)."""
        for param in spec.info.params:
            write_param(param, self.param_controls[param.name], spec.param(param.name))
        self.apply(method=spec.method, k=spec.k, draft=spec.draft, adaptive=spec.adaptive)

    def set_model_state(self, text: str, n_layers: int | None = None, loaded_name: str | None = None,
                        backend: str | None = None) -> None:
        self.model_status.setText(text)
        if loaded_name is not None:
            self._loaded_model = loaded_name
            self._loaded_backend = backend
            self._n_layers = n_layers
            self._update_choices()
            self.revalidate()

    def set_own_drafter(self, entry: catalog.CatalogEntry | None) -> None:
        """The loaded target's catalog entry (None: unknown): when it drafts for itself (engine.models.catalog's
        own_drafter), its method comes first in the list with a one-line note, and unless a method was
        chosen it is selected, k capped at the MTP layers where they chain (mtp: MethodSpec.own_settings) or the
        assistant draft filled in."""
        self._entry = entry
        self._update_choices()
        own = catalog.own_drafter(entry) if entry is not None else None
        if own is None and not self.own_note.text():
            self.revalidate()  # what the table refuses or moves, said now
            self.settings_changed.emit()
            return  # nothing was offered: the list stays as it is
        current, every = self.method_name(), registered_methods()
        first = own[0] if own else every[0].name
        self.method.blockSignals(True)
        self.method.clear()
        add_method_items(self.method, sorted(every, key=lambda m: m.name != first) if own else every)
        mark_methods(self.method, self._choices)
        pick = first if own and not self._method_chosen else current
        self.method.setCurrentIndex(max(0, self.method.findData(pick)))
        self.method.blockSignals(False)
        self.own_note.setText(f"This model {own[1]}." if own else "")
        self.own_note.setVisible(bool(own))
        if own and pick == own[0] and method_spec(pick).own_settings is not None:
            self._apply_own_settings(method_spec(pick).own_settings(entry, pairs_for(entry.name, entry.label,
                                                                                     entry.repo_id)))
        self._changed()

    def _apply_own_settings(self, values: dict) -> None:
        """What a method sets for a model that drafts for itself: k at most `max_k`, its own `draft` (when
        none is typed)."""
        if values.get("max_k"):
            self.k.setValue(min(self.k.value(), values["max_k"]))
        if values.get("draft") and not self.draft.currentText().strip():
            self._set_combo_text(self.draft, values["draft"])

    def set_draft_choices(self, names: list[str], *, target_aliases: set[str], note: str = "",
                          download: str | None = None, cross_tokenizer: set[str] = frozenset()) -> None:
        """The drafts to offer (smaller, installed: the target's tokenizer first, then those of another, named in
        `cross_tokenizer` and marked), the loaded target's own names (a draft that is one of them is the target
        itself), and when none is installed, why and what to download."""
        self._target_aliases = {a for a in target_aliases if a}
        self._cross_drafts = set(cross_tokenizer)
        current = self.draft.currentText().strip()
        self.draft.blockSignals(True)
        fill_drafts(self.draft, names, self._cross_drafts)
        self.draft.setEditText(current if current else (names[0] if names else ""))
        self.draft.blockSignals(False)
        self._suggested_download = download
        self.draft_download.setText(f"Download {download.rsplit('/', 1)[-1]}" if download else "")  # tip: full id
        self.draft_download.setToolTip(f"Download {download} from the Hugging Face Hub in the Models window"
                                       if download else "")
        self._draft_note_text = note
        self._refresh_enabled()
        self.revalidate()

    def usable_draft(self) -> str | None:
        """The draft model typed or chosen, unless it is empty or the target itself."""
        name = self.draft.currentText().strip()
        return name if name and name not in self._target_aliases else None

    def revert_model(self) -> None:
        """Back to the model that is loaded (after another failed to load)."""
        if self._loaded_model is not None:
            self._set_combo_text(self.model, self._loaded_model)

    def show_runtime_problem(self, message: str | None) -> None:
        """A refusal that only the engine could find (the draft's tokenizer differs, ...)."""
        self._runtime_problem = message
        self.revalidate()

    def set_pending_note(self, text: str | None) -> None:
        self.notice.setText(text or "")
        self.notice.setVisible(bool(text))

    def revalidate(self) -> bool:
        """Show why the current combination is refused, if it is; returns whether it is accepted."""
        try:
            settings = self.read()
        except ConfigError as exc:
            self._show_problem(str(exc))
            self._show_backend_note("")
            return False
        if self._runtime_problem:
            self._show_problem(self._runtime_problem)
        else:
            self._show_problem(None)
        notes = settings.spec.warnings
        self.setToolTip("\n".join(notes) if notes else "")
        self._show_backend_note(self.routed_note())
        return True

    # ------------------------------------------------------------------ internals
    def _changed(self, *_args) -> None:
        self._runtime_problem = None
        self._refresh_enabled()
        self.revalidate()
        self.settings_changed.emit()

    def _update_choices(self) -> None:
        """The loaded target's method table (engine.models.availability) for the backend chosen: a method it
        can't use is disabled in the list, with the reason as its tooltip. None while it is not described (or
        runs on a server): every method offered, refused as the loaded backend's method table says."""
        local = is_local_backend(self._loaded_backend)
        choices = entry_choices(self._entry, self.backend_name(), self._loaded_backend) \
            if self._entry is not None and local else ()
        self._choices = {choice.method: choice for choice in choices}
        mark_methods(self.method, self._choices)

    def _show_backend_note(self, note: str) -> None:
        """Under the method: why it runs on another backend (and the status line hears it once, when it changes)."""
        changed = note != self.backend_note.text()
        self.backend_note.setText(note)
        self.backend_note.setVisible(bool(note))
        if changed and note:
            self.backend_noted.emit(note)

    def _refresh_enabled(self) -> None:
        method = method_spec(self.method_name())
        self.draft.setEnabled(method.needs_draft or method.reads_head)
        self.draft.lineEdit().setPlaceholderText(draft_placeholder(method))
        self.draft.setToolTip(draft_tooltip(method))
        self.k.setEnabled(method.speculative)
        self.adaptive.setEnabled(method.speculative)
        for name, widget in self.param_controls.items():  # only the method's own parameters show
            own = method.param(name) is not None
            widget.setEnabled(own)
            self.spec_form.setRowVisible(widget, own)
        greedy = self.temperature.value() == 0
        for widget in (self.top_p, self.top_k, self.seed):
            widget.setEnabled(not greedy)
            widget.setToolTip("Greedy decoding (temperature 0) ignores this" if greedy else "")
        self.method_help.setText(method.description)
        self._show_draft_note(method)

    def _show_draft_note(self, method) -> None:
        """Under the draft list: the draft is the target itself (what the Models window says), or, for the
        method that drafts with a smaller model, the draft offered is of another tokenizer (drafted through text),
        or no draft is given yet and none is installed (with the known-good one to download). Another method's
        draft (an assistant, a head) gets no draft model's hint."""
        name = self.draft.currentText().strip()
        is_target = method.needs_draft and bool(name) and name in self._target_aliases
        model_drafts = method.implied_by_draft
        empty = not name  # a draft given (a path, a hub id) is checked when it loads: no "none installed" then
        note = DRAFT_IS_TARGET if is_target else (self._draft_note_text if model_drafts and empty else "")
        cross = cross_draft_note(name) if model_drafts and name in self._cross_drafts else ""
        self.draft_note.setText(f"⚠ {note}" if note else cross)
        self.draft_note.setVisible(bool(note or cross))
        self.draft_download.setVisible(model_drafts and empty and bool(self._suggested_download))

    def _show_problem(self, message: str | None) -> None:
        self.problem.setText(f"⚠ {message}" if message else "")
        self.problem.setVisible(bool(message))

    def _method_picked(self, _index: int) -> None:
        self._method_chosen = True
        self.method_picked.emit(self.method_name())

    def _model_chosen(self) -> None:
        name = self.model_name()
        if name != self._loaded_model:
            self.model_change_requested.emit(name)

    def _backend_chosen(self) -> None:
        self._runtime_problem = None
        self._update_choices()
        self.revalidate()
        self.backend_change_requested.emit(self.backend_name())
        self.settings_changed.emit()

    def _browse_model(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Choose a model folder")
        if folder:
            self._set_combo_text(self.model, folder)
            self._model_chosen()

    @staticmethod
    def _set_combo_text(combo: QComboBox, text: str) -> None:
        index = combo.findText(text)
        if index < 0:
            combo.insertItem(0, text)
            index = 0
        combo.setCurrentIndex(index)
