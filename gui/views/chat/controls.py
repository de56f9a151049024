"""The settings panel: model, method, draft model, k, the tree's node budget, the method's own parameters, adaptive
draft length, sampling, token budget, system prompt.

It renders and reads its boxes, nothing more: each box (gui.views.chat.model_box.ModelBox, .spec_box.SpecBox,
.sampling_box.SamplingBox, .boxes.SystemBox, SavedBox) keeps its own widgets and tells what changed by signals; `read()`
turns them into engine configs (which validate themselves; the method's checks on the loaded model's facts, such
as early-exit layers within its layers, run from its MethodSpec) or into the one sentence that says why the
combination is refused. The methods, their labels, help lines, parameters (one control each,
gui.views.chat.params) and what each needs come from the method registry. The window reads the panel when a
message is sent, so a change applies from the next message.

Which methods the loaded target can use, and on which backend, is engine.models.availability's table (read
from its catalog entry: a method it can't use is disabled with the reason; under "auto" a method its backend
can't serve runs where the table says, `backend=` in the setting, with a note). May touch: its boxes, engine.core
.config and the method registry (read), engine.models.catalog.own_drafter, engine.models.availability and
engine.models.pairs (a described target's facts, no file read), gui.sessions.chat (Settings, what it returns; the
note's words). No state beyond its boxes and what it was told of the loaded target.
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QVBoxLayout, QWidget

import engine.drafters  # noqa: F401  (registers the methods)
from engine.backends import is_local_backend
from engine.core.config import SpecConfig, check_backend
from engine.core.errors import ConfigError
from engine.core.methods import ModelFacts, method_spec, methods as registered_methods
from engine.models import catalog
from engine.models.availability import entry_choices
from engine.models.pairs import pairs_for
from gui.sessions.chat import Settings, backend_note
from gui.views.chat.boxes import SavedBox, SystemBox, note_label
from gui.views.chat.model_box import ModelBox
from gui.views.chat.spec_box import SpecBox
from gui.views.chat.sampling_box import SamplingBox


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
        self._method_chosen = False  # the user (or a remembered setting) chose the method: kept as it is
        self._entry: catalog.CatalogEntry | None = None  # the loaded target, described (None: not yet, a server)
        self._choices: dict = {}  # method -> engine.models.availability.MethodChoice for the loaded target
        self._plain_speeds: dict = {}  # backend -> the loaded model's measured plain speed there (Baseline)
        self.saved_box = SavedBox()
        self.model_box = ModelBox()
        self.spec_box = SpecBox()
        self.sampling_box = SamplingBox()
        self.system_box = SystemBox()
        self.problem = note_label("problem")
        self.notice = note_label("notice")
        outer = QVBoxLayout(self)
        outer.setContentsMargins(8, 4, 8, 8)
        outer.setSpacing(8)
        for widget in (self.saved_box, self.model_box, self.spec_box, self.sampling_box, self.system_box,
                       self.problem, self.notice):
            outer.addWidget(widget)
        outer.addStretch(1)
        self._name_widgets()
        self._connect()
        self._refresh_enabled()
        self.revalidate()

    def _name_widgets(self) -> None:
        """The boxes' widgets by the names the window's other parts and the tests read them by."""
        saved, model, spec, sampling = self.saved_box, self.model_box, self.spec_box, self.sampling_box
        self.saved_note, self.saved_apply = saved.note, saved.use_button
        self.model, self.backend, self.compile_box = model.model, model.backend, model.compile_box
        self.model_status = model.status
        self.method, self.own_note, self.backend_note = spec.method, spec.own_note, spec.backend_note
        self.draft, self.draft_note, self.draft_download = spec.draft, spec.draft_note, spec.draft_download
        self.k, self.tree, self.adaptive = spec.k, spec.tree, spec.adaptive
        self.param_controls, self.spec_form = spec.param_controls, spec.form
        self.max_new_tokens = sampling.budget
        self.system_prompt = self.system_box.editor

    def _connect(self) -> None:
        for signal in (self.spec_box.changed, self.sampling_box.changed, self.system_box.changed):
            signal.connect(self._changed)
        self.spec_box.method_picked.connect(self._method_picked)
        self.spec_box.download_requested.connect(self.download_requested)
        self.model_box.model_chosen.connect(self._model_chosen)
        self.model_box.backend_chosen.connect(lambda _name: self._backend_chosen())
        self.model_box.models_requested.connect(self.models_requested)
        self.saved_box.use_requested.connect(self.saved_settings_requested)

    def show_saved_settings(self, words: str | None) -> None:
        """What a reopened chat ran with (None: hide the note)."""
        self.saved_box.show_words(words)

    # ------------------------------------------------------------------ reading
    def read(self) -> Settings:
        """The settings for the next message; raises ConfigError with the reason when they are refused."""
        method = method_spec(self.method_name())
        choice = self._choices.get(method.name)
        if choice is not None and not choice.usable:
            raise ConfigError(choice.refusal)
        spec = self.spec_box.spec(backend=self.routed_backend())
        backend = choice.backend if choice is not None else self.effective_backend()
        if method.check_facts is not None:
            method.check_facts(spec, ModelFacts(n_layers=self._n_layers, backend=backend))
        if choice is None and backend is not None:  # the target not described yet: as loaded
            check_backend(method.name, backend)
        return Settings(model=self.model_name(), spec=spec, sampling=self.sampling_box.sampling(),
                        max_new_tokens=self.sampling_box.max_new_tokens(), system_prompt=self.system_box.prompt())

    def method_name(self) -> str:
        return self.spec_box.method_name()

    def backend_name(self) -> str:
        """The backend chosen: auto, transformers or llama.cpp."""
        return self.model_box.backend_name()

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
        self.model_box.set_backend(backend)
        self._update_choices()

    def compile_enabled(self) -> bool:
        """Whether the target loads torch.compile'd (transformers backend)."""
        return self.model_box.compile_enabled()

    def set_compile(self, on: bool) -> None:
        """Without loading (the command line; the window loads after)."""
        self.model_box.set_compile(on)
        self.revalidate()

    def draft_name(self) -> str | None:
        """The draft the next reply uses (gui.views.chat.spec_box.SpecBox.draft_name), or None."""
        return self.spec_box.draft_name()

    def values(self) -> dict:
        """Every field by name, as the window remembers them (gui.persistence.settings.chat_fields) and `apply`
        takes them: each method parameter as its control shows it (0: auto)."""
        return {"model": self.model_name(), **self.spec_box.values(), **self.sampling_box.values(),
                "max_new_tokens": self.sampling_box.max_new_tokens(), "system_prompt": self.system_box.prompt()}

    def model_name(self) -> str:
        return self.model_box.model_name()

    def config_problem(self) -> str | None:
        """Why the current combination is refused, or None."""
        try:
            self.read()
        except ConfigError as exc:
            return str(exc)
        return None

    # ------------------------------------------------------------------ writing
    def apply(self, *, model: str | None = None, method: str | None = None, draft: str | None = None,
              k: int | None = None, adaptive: bool | None = None, max_new_tokens: int | None = None,
              system_prompt: str | None = None, tree: int | None = None, **params) -> None:
        """Set fields (the command line, a reopened chat and tests use this); `params` are sampling fields
        (SamplingConfig's, as numbers: a random seed -1) and method parameters (0: auto) by name; None leaves a
        field as it is."""
        sampling = {name: params.pop(name) for name in list(params) if name in self.sampling_box.controls}
        unknown = set(params) - set(self.spec_box.param_controls)
        if unknown:
            raise TypeError(f"no setting {', '.join(sorted(unknown))} in the panel")
        if model is not None:
            self.model_box.set_model_name(model)
        if method is not None:
            self._method_chosen = True
        self.spec_box.set_values(method=method, draft=draft, k=k, adaptive=adaptive, params=params, tree=tree)
        self.sampling_box.set_values(**sampling)
        if max_new_tokens is not None:
            self.sampling_box.set_max_new_tokens(max_new_tokens)
        if system_prompt is not None:
            self.system_box.set_prompt(system_prompt)
        self.revalidate()

    def apply_spec(self, spec: SpecConfig) -> None:
        """Set the method, k, draft, the method's parameters, the tree and adaptive of `spec` (a compared setting)."""
        self.spec_box.show_params(spec)
        self.apply(method=spec.method, k=spec.k, draft=spec.draft, adaptive=spec.adaptive, tree=spec.tree)

    def set_model_state(self, text: str, n_layers: int | None = None, loaded_name: str | None = None,
                        backend: str | None = None) -> None:
        self.model_box.show_status(text)
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
        if own is None and not self.spec_box.own_note.text():
            self.revalidate()  # what the table refuses or moves, said now
            self.settings_changed.emit()
            return  # nothing was offered: the list stays as it is
        current, every = self.method_name(), registered_methods()
        first = own[0] if own else every[0].name
        pick = first if own and not self._method_chosen else current
        self.spec_box.offer_methods(sorted(every, key=lambda m: m.name != first) if own else every, self._choices,
                                    pick)
        self.spec_box.show_own_note(f"This model {own[1]}." if own else "")
        if own and pick == own[0] and method_spec(pick).own_settings is not None:
            self.spec_box.apply_own_settings(method_spec(pick).own_settings(entry, pairs_for(entry.name, entry.label,
                                                                                             entry.repo_id)))
        self._changed()

    def set_draft_choices(self, names: list[str], *, target_aliases: set[str], note: str = "",
                          download: str | None = None, cross_tokenizer: set[str] = frozenset()) -> None:
        """The drafts to offer (smaller, installed: the target's tokenizer first, then those of another, named in
        `cross_tokenizer` and marked), the loaded target's own names (a draft that is one of them is the target
        itself), and when none is installed, why and what to download."""
        self.spec_box.set_draft_choices(names, target_aliases=target_aliases, note=note, download=download,
                                        cross_tokenizer=cross_tokenizer)
        self._refresh_enabled()
        self.revalidate()

    def usable_draft(self) -> str | None:
        """The draft model typed or chosen, unless it is empty or the target itself."""
        return self.spec_box.usable_draft()

    def revert_model(self) -> None:
        """Back to the model that is loaded (after another failed to load)."""
        if self._loaded_model is not None:
            self.model_box.set_model_name(self._loaded_model)

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
        self.spec_box.mark_methods(self._choices)

    def _show_backend_note(self, note: str) -> None:
        """Under the method: why it runs on another backend (and the status line hears it once, when it changes)."""
        if self.spec_box.show_backend_note(note) and note:
            self.backend_noted.emit(note)

    def _refresh_enabled(self) -> None:
        self.spec_box.show_method(method_spec(self.method_name()))

    def _show_problem(self, message: str | None) -> None:
        self.problem.setText(f"⚠ {message}" if message else "")
        self.problem.setVisible(bool(message))

    def _method_picked(self, name: str) -> None:
        self._method_chosen = True
        self.method_picked.emit(name)

    def _model_chosen(self, name: str) -> None:
        if name != self._loaded_model:
            self.model_change_requested.emit(name)

    def _backend_chosen(self) -> None:
        self._runtime_problem = None
        self._update_choices()
        self.revalidate()
        self.backend_change_requested.emit(self.backend_name())
        self.settings_changed.emit()
