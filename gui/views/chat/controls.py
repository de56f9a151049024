"""The settings panel: model, method, draft model, k, the method's own parameters, adaptive draft length,
sampling, token budget, system prompt.

It renders and reads widgets, nothing more: `read()` turns them into engine configs (which validate
themselves; the method's checks on the loaded model's facts, such as early-exit layers within its layers, run
from its MethodSpec) or into the one sentence that says why the combination is refused. The methods, their
labels, help lines, parameters (one control each, gui.views.chat.params) and what each needs come from the
method registry. The window reads the panel when a message is sent, so a change applies from the next message.

May touch: engine.core.config and the method registry (read), engine.models.catalog.own_drafter and
engine.models.pairs (a described target's own drafter, no file read), gui.sessions.chat.Settings (what it
returns). No state beyond its widgets.
"""

from __future__ import annotations

from fnmatch import fnmatch
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QCheckBox, QComboBox, QDoubleSpinBox, QFileDialog, QFormLayout, QGroupBox,
                               QHBoxLayout, QLabel, QPlainTextEdit, QSpinBox, QToolButton, QVBoxLayout, QWidget)

import engine.drafters  # noqa: F401  (registers the methods)
from engine.backends import is_local_backend
from engine.core.config import BACKENDS, MAX_K, SamplingConfig, SpecConfig, check_backend
from engine.core.errors import ConfigError
from engine.core.methods import ModelFacts, all_params, method_spec, methods as registered_methods
from engine.models import catalog
from engine.models.pairs import DRAFT_IS_TARGET, pairs_for
from gui.sessions.chat import Settings
from gui.views.chat.params import SPIN_CEILING, changed_signal, param_widget, read_param, shown_value, write_param


def add_method_items(combo: QComboBox, methods=None) -> None:
    """The registered methods (or `methods`), by label, with their description as tooltip (the chat's panel and
    the compare window's rows)."""
    for method in registered_methods() if methods is None else methods:
        if not method.offered:
            continue
        combo.addItem(method.label, method.name)
        combo.setItemData(combo.count() - 1, method.description, Qt.ItemDataRole.ToolTipRole)


def head_placeholder(method) -> str:
    """What the draft field shows, empty, for a method that reads a head: a folder, or its head file's pattern."""
    if not method.reads_head:
        return ""
    return f"{'an ' + method.head_file + ' head' if method.head_file else 'a head folder'} (empty: the model's own)"


def _is_head(path: Path, head_file: str) -> bool:
    """A head folder (head_file ""), or an existing file whose name matches `head_file` (case aside)."""
    if not head_file:
        return path.is_dir()
    return fnmatch(path.name.lower(), head_file.lower()) and path.is_file()


def build_sampling_box(panel) -> QGroupBox:
    """The sampling fields of the settings panel (temperature, top-p, top-k, seed, budget), set on `panel`."""
    box = QGroupBox("Sampling")
    form = QFormLayout(box)
    panel.temperature = QDoubleSpinBox()
    panel.temperature.setRange(0.0, 5.0)
    panel.temperature.setSingleStep(0.1)
    panel.temperature.setDecimals(2)
    panel.temperature.setSpecialValueText("0 (greedy)")
    form.addRow("Temperature", panel.temperature)
    panel.top_p = QDoubleSpinBox()
    panel.top_p.setRange(0.01, 1.0)
    panel.top_p.setSingleStep(0.05)
    panel.top_p.setValue(1.0)
    form.addRow("Top-p", panel.top_p)
    panel.top_k = QSpinBox()
    panel.top_k.setRange(0, 100000)
    panel.top_k.setSpecialValueText("off")
    form.addRow("Top-k", panel.top_k)
    panel.seed = QSpinBox()
    panel.seed.setRange(-1, 2**31 - 1)
    panel.seed.setValue(-1)
    panel.seed.setSpecialValueText("random")
    form.addRow("Seed", panel.seed)
    panel.max_new_tokens = QSpinBox()
    panel.max_new_tokens.setRange(1, 1_000_000)
    panel.max_new_tokens.setValue(256)
    panel.max_new_tokens.setSingleStep(64)
    form.addRow("Max new tokens", panel.max_new_tokens)
    return box


def narrow_combo() -> QComboBox:
    """A combo box whose long items don't widen the settings dock: it asks for 20 characters (a longer item
    is cut in the box); its popup shows each item in full."""
    return QComboBox(minimumContentsLength=20,
                     sizeAdjustPolicy=QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)


class ControlsPanel(QWidget):
    settings_changed = Signal()
    model_change_requested = Signal(str)
    backend_change_requested = Signal(str)  # auto | transformers | llama.cpp: the target loads again on it
    models_requested = Signal()  # the model manager
    download_requested = Signal(str)  # a known-good draft's hub id (the model manager downloads it)
    saved_settings_requested = Signal()  # apply the settings a reopened chat ran with
    method_picked = Signal(str)  # the user picked a method in the list (not set by apply)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self._n_layers: int | None = None
        self._loaded_model: str | None = None
        self._loaded_backend: str | None = None  # the backend the loaded target runs on
        self._runtime_problem: str | None = None
        self._target_aliases: set[str] = set()  # names of the loaded target's files ("default", its path)
        self._suggested_download: str | None = None
        self._draft_note_text = ""
        self._method_chosen = False  # the user (or a remembered setting) chose the method: kept as it is
        outer = QVBoxLayout(self)
        outer.setContentsMargins(8, 4, 8, 8)
        outer.setSpacing(8)
        outer.addWidget(self._build_saved_box())
        outer.addWidget(self._build_model_box())
        outer.addWidget(self._build_spec_box())
        outer.addWidget(build_sampling_box(self))
        outer.addWidget(self._build_system_box())
        self.problem = self._note("problem")
        outer.addWidget(self.problem)
        self.notice = self._note("notice")
        outer.addWidget(self.notice)
        outer.addStretch(1)
        for signal in (self.method.currentIndexChanged, self.k.valueChanged, self.adaptive.toggled,
                       *(changed_signal(w) for w in self.param_controls.values()), self.temperature.valueChanged, self.top_p.valueChanged, self.top_k.valueChanged,
                       self.seed.valueChanged, self.max_new_tokens.valueChanged, self.draft.currentTextChanged,
                       self.system_prompt.textChanged):
            signal.connect(self._changed)
        self.method.activated.connect(self._method_picked)
        self.model.activated.connect(lambda _index: self._model_chosen())
        self.model.lineEdit().editingFinished.connect(self._model_chosen)
        self._refresh_enabled()
        self.revalidate()

    @staticmethod
    def _note(name: str) -> QLabel:
        label = QLabel()
        label.setObjectName(name)
        label.setWordWrap(True)
        label.hide()
        return label

    def _build_saved_box(self) -> QWidget:
        """Shown for a reopened chat: the settings its last reply ran with, and a button to use them."""
        self.saved_box = QWidget()
        row = QHBoxLayout(self.saved_box)
        row.setContentsMargins(0, 0, 0, 0)
        self.saved_note = QLabel("")
        self.saved_note.setObjectName("notice")
        self.saved_note.setWordWrap(True)
        row.addWidget(self.saved_note, 1)
        self.saved_apply = QToolButton()
        self.saved_apply.setText("Use these")
        self.saved_apply.setToolTip("Set the panel to what this chat ran with")
        self.saved_apply.clicked.connect(self.saved_settings_requested)
        row.addWidget(self.saved_apply)
        self.saved_box.hide()
        return self.saved_box

    def show_saved_settings(self, words: str | None) -> None:
        """What a reopened chat ran with (None: hide the note)."""
        self.saved_note.setText(f"This chat ran with {words}." if words else "")
        self.saved_box.setVisible(bool(words))

    def _build_model_box(self) -> QGroupBox:
        box = QGroupBox("Model")
        form = QFormLayout(box)
        self.model = QComboBox()
        self.model.setEditable(True)
        self.model.addItem("default")
        self.model.setToolTip("The target model: 'default' (built in), a Hugging Face id, a folder or a GGUF file. "
                              "Press Enter to load.")
        self.model.setInsertPolicy(QComboBox.InsertPolicy.InsertAtTop)
        browse = QToolButton()
        browse.setText("…")
        browse.setToolTip("Choose a model folder")
        browse.clicked.connect(self._browse_model)
        row = QHBoxLayout()
        row.setSpacing(4)
        row.addWidget(self.model, 1)
        row.addWidget(browse)
        form.addRow("Target", row)
        form.addRow("Backend", self._build_backend_choice())
        self.compile_box = QCheckBox("Compile (torch.compile, transformers)")
        self.compile_box.setObjectName("compile_choice")
        self.compile_box.setToolTip("transformers backend: a static KV cache and torch.compile (CUDA graphs on a GPU, "
                                    "where most of a small model's step is launch overhead). Each verify width "
                                    "compiles on its first use: slow once, then faster. Changing it loads the "
                                    "target again; llama.cpp runs as it is.")
        self.compile_box.toggled.connect(lambda _on: self._backend_chosen())
        form.addRow("", self.compile_box)
        self.models_button = QToolButton()
        self.models_button.setText("Models…")
        self.models_button.setToolTip("Every model on this computer, pairing a draft, downloads (Ctrl+M)")
        self.models_button.clicked.connect(self.models_requested)
        form.addRow("", self.models_button)
        self.model_status = QLabel("not loaded")
        self.model_status.setObjectName("dim")
        self.model_status.setWordWrap(True)
        form.addRow("", self.model_status)
        return box

    def _build_backend_choice(self) -> QComboBox:
        self.backend = narrow_combo()
        self.backend.setObjectName("backend_choice")
        for name in ("auto",) + BACKENDS:
            self.backend.addItem("auto (GGUF on llama.cpp)" if name == "auto" else name, name)  # as the Models window
        self.backend.setToolTip("Where the target runs (auto: a GGUF on llama.cpp, the rest on transformers): "
                                "llama.cpp keeps a GGUF quantized and fast; transformers runs every method (early "
                                "exit, MTP, EAGLE) and loads a GGUF dequantized. Changing it loads the target again.")
        self.backend.activated.connect(lambda _index: self._backend_chosen())
        return self.backend

    def _build_spec_box(self) -> QGroupBox:
        box = QGroupBox("Speculation")
        form = QFormLayout(box)
        self.method = narrow_combo()
        add_method_items(self.method)
        form.addRow("Method", self.method)
        self.own_note = self._note("own_drafter_note")
        form.addRow(self.own_note)
        self.draft = QComboBox()
        self.draft.setObjectName("draft_choice")
        self.draft.setEditable(True)
        self.draft.setToolTip("The draft model (draft-model method only): a smaller model with the target's "
                              "tokenizer; the list offers the compatible, smaller ones installed")
        form.addRow("Draft model", self.draft)
        self.draft_note = self._note("draft_note")
        form.addRow(self.draft_note)
        self.draft_download = QToolButton()
        self.draft_download.setObjectName("draft_download")
        self.draft_download.clicked.connect(lambda: self.download_requested.emit(self._suggested_download or ""))
        self.draft_download.hide()
        form.addRow(self.draft_download)  # a row of its own: a hub id is long, the dock narrow
        self.k = QSpinBox()
        self.k.setRange(1, SPIN_CEILING)  # the range is engine.core.config's check_k: out of it, refused with it
        self.k.setValue(4)
        self.k.setToolTip(f"How many tokens the drafter proposes per round (1 to {MAX_K})")
        form.addRow("k (draft length)", self.k)
        self.spec_form = form
        self.param_controls: dict[str, QWidget] = {}  # one per method parameter (ParamSpec), by name
        for param in all_params():
            self.param_controls[param.name] = param_widget(param)
            form.addRow(param.title[:1].upper() + param.title[1:], self.param_controls[param.name])
        self.adaptive = QCheckBox("Adaptive draft length")
        self.adaptive.setToolTip("Draft only as many tokens (≤ k) as pay for their verification, learnt as it runs")
        form.addRow("", self.adaptive)
        self.method_help = QLabel()
        self.method_help.setObjectName("dim")
        self.method_help.setWordWrap(True)
        form.addRow(self.method_help)
        return box

    def _build_system_box(self) -> QGroupBox:
        box = QGroupBox("System prompt")
        layout = QVBoxLayout(box)
        self.system_prompt = QPlainTextEdit()
        self.system_prompt.setPlaceholderText("Optional instructions sent before the conversation")
        self.system_prompt.setMaximumHeight(90)
        layout.addWidget(self.system_prompt)
        return box

    # ------------------------------------------------------------------ reading
    def read(self) -> Settings:
        """The settings for the next message; raises ConfigError with the reason when they are refused."""
        method = method_spec(self.method_name())
        params = {p.name: read_param(p, self.param_controls[p.name]) for p in method.params}
        spec = SpecConfig(method=method.name, k=self.k.value(), draft=self.draft_name(), params=params,
                          adaptive=self.adaptive.isChecked() and method.speculative)
        backend = self.effective_backend()
        if method.check_facts is not None:
            method.check_facts(spec, ModelFacts(n_layers=self._n_layers, backend=backend))
        if backend is not None:
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

    def set_backend(self, backend: str) -> None:
        """Choose the backend without loading (the command line; the window loads after)."""
        self.backend.setCurrentIndex(max(0, self.backend.findData(backend)))

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
            return text if text and _is_head(Path(text).expanduser(), method.head_file) else None
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
            self.revalidate()

    def set_own_drafter(self, entry: catalog.CatalogEntry | None) -> None:
        """The loaded target's catalog entry (None: unknown): when it drafts for itself (engine.models.catalog's
        own_drafter), its method comes first in the list with a one-line note, and unless a method was
        chosen it is selected, k capped at the MTP layers where they chain (mtp: MethodSpec.own_settings) or the
        assistant draft filled in."""
        own = catalog.own_drafter(entry) if entry is not None else None
        if own is None and not self.own_note.text():
            return  # nothing was offered: nothing changes
        current, every = self.method_name(), registered_methods()
        first = own[0] if own else every[0].name
        self.method.blockSignals(True)
        self.method.clear()
        add_method_items(self.method, sorted(every, key=lambda m: m.name != first) if own else every)
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
                          download: str | None = None) -> None:
        """The drafts to offer (compatible, smaller, installed), the loaded target's own names (a draft
        that is one of them is the target itself), and when none is installed, why and what to download."""
        self._target_aliases = {a for a in target_aliases if a}
        current = self.draft.currentText().strip()
        self.draft.blockSignals(True)
        self.draft.clear()
        self.draft.addItems(names)
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
            return False
        if self._runtime_problem:
            self._show_problem(self._runtime_problem)
        else:
            self._show_problem(None)
        notes = settings.spec.warnings
        self.setToolTip("\n".join(notes) if notes else "")
        return True

    # ------------------------------------------------------------------ internals
    def _changed(self, *_args) -> None:
        self._runtime_problem = None
        self._refresh_enabled()
        self.revalidate()
        self.settings_changed.emit()

    def _refresh_enabled(self) -> None:
        method = method_spec(self.method_name())
        self.draft.setEnabled(method.needs_draft or method.reads_head)
        self.draft.lineEdit().setPlaceholderText(head_placeholder(method))
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
        self._show_draft_note(method.needs_draft)

    def _show_draft_note(self, needs_draft: bool) -> None:
        """Under the draft list: the draft is the target itself (what the Models window says), or no
        compatible smaller draft is installed (with the known-good one to download)."""
        name = self.draft.currentText().strip()
        is_target = needs_draft and bool(name) and name in self._target_aliases
        note = DRAFT_IS_TARGET if is_target else (self._draft_note_text if needs_draft else "")
        self.draft_note.setText(f"⚠ {note}" if note else "")
        self.draft_note.setVisible(bool(note))
        self.draft_download.setVisible(needs_draft and bool(self._suggested_download))

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
