"""The settings panel: model, method, draft model, k, early-exit layers, sampling, token budget, system prompt.

It renders and reads widgets, nothing more: `read()` turns them into engine configs (which validate
themselves) or into the one sentence that says why the combination is refused. The window reads it when a
message is sent, so a change applies from the next message.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QComboBox, QDoubleSpinBox, QFileDialog, QFormLayout, QGroupBox, QHBoxLayout,
                               QLabel, QPlainTextEdit, QSpinBox, QToolButton, QVBoxLayout, QWidget)

from engine.config import MAX_K, METHODS, SamplingConfig, SpecConfig
from engine.errors import ConfigError

METHOD_LABELS = {
    "none": "none (plain decoding)",
    "draft-model": "draft model",
    "prompt-lookup": "prompt lookup (n-gram)",
    "early-exit": "early exit (self-speculative)",
}
METHOD_HELP = {
    "none": "The target model writes every token itself: the baseline.",
    "draft-model": "A smaller model with the same tokenizer drafts k tokens; the target verifies them in one pass.",
    "prompt-lookup": "Drafts by copying what followed the last n-gram where it appeared earlier in the text.",
    "early-exit": "The target's first layers draft (self-speculation); the full model verifies.",
}


@dataclass(frozen=True, slots=True)
class Settings:
    model: str
    spec: SpecConfig
    sampling: SamplingConfig
    max_new_tokens: int
    system_prompt: str


class ControlsPanel(QWidget):
    settings_changed = Signal()
    model_change_requested = Signal(str)
    models_requested = Signal()  # the model manager

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self._n_layers: int | None = None
        self._loaded_model: str | None = None
        outer = QVBoxLayout(self)
        outer.setContentsMargins(8, 4, 8, 8)
        outer.setSpacing(8)

        # Model
        model_box = QGroupBox("Model")
        model_form = QFormLayout(model_box)
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
        model_form.addRow("Target", row)
        self.models_button = QToolButton()
        self.models_button.setText("Models…")
        self.models_button.setToolTip("Every model on this computer, pairing a draft, downloads (Ctrl+M)")
        self.models_button.clicked.connect(self.models_requested)
        model_form.addRow("", self.models_button)
        self.model_status = QLabel("not loaded")
        self.model_status.setObjectName("dim")
        self.model_status.setWordWrap(True)
        model_form.addRow("", self.model_status)
        outer.addWidget(model_box)

        # Speculation
        spec_box = QGroupBox("Speculation")
        spec_form = QFormLayout(spec_box)
        self.method = QComboBox()
        for method in METHODS:
            self.method.addItem(METHOD_LABELS.get(method, method), method)
            self.method.setItemData(self.method.count() - 1, METHOD_HELP.get(method, ""), Qt.ItemDataRole.ToolTipRole)
        spec_form.addRow("Method", self.method)
        self.draft = QComboBox()
        self.draft.setEditable(True)
        self.draft.addItem("default")
        self.draft.setToolTip("The draft model (draft-model method only): it must share the target's tokenizer")
        spec_form.addRow("Draft model", self.draft)
        self.k = QSpinBox()
        self.k.setRange(1, MAX_K)
        self.k.setValue(4)
        self.k.setToolTip("How many tokens the drafter proposes per round")
        spec_form.addRow("k (draft length)", self.k)
        self.layers = QSpinBox()
        self.layers.setRange(0, 512)
        self.layers.setSpecialValueText("auto")
        self.layers.setToolTip("Early exit: how many of the target's layers draft (auto: the engine chooses)")
        spec_form.addRow("Early-exit layers", self.layers)
        self.method_help = QLabel()
        self.method_help.setObjectName("dim")
        self.method_help.setWordWrap(True)
        spec_form.addRow(self.method_help)
        outer.addWidget(spec_box)

        # Sampling
        sampling_box = QGroupBox("Sampling")
        sampling_form = QFormLayout(sampling_box)
        self.temperature = QDoubleSpinBox()
        self.temperature.setRange(0.0, 5.0)
        self.temperature.setSingleStep(0.1)
        self.temperature.setDecimals(2)
        self.temperature.setSpecialValueText("0 (greedy)")
        sampling_form.addRow("Temperature", self.temperature)
        self.top_p = QDoubleSpinBox()
        self.top_p.setRange(0.01, 1.0)
        self.top_p.setSingleStep(0.05)
        self.top_p.setValue(1.0)
        sampling_form.addRow("Top-p", self.top_p)
        self.top_k = QSpinBox()
        self.top_k.setRange(0, 100000)
        self.top_k.setSpecialValueText("off")
        sampling_form.addRow("Top-k", self.top_k)
        self.seed = QSpinBox()
        self.seed.setRange(-1, 2**31 - 1)
        self.seed.setValue(-1)
        self.seed.setSpecialValueText("random")
        sampling_form.addRow("Seed", self.seed)
        self.max_new_tokens = QSpinBox()
        self.max_new_tokens.setRange(1, 1_000_000)
        self.max_new_tokens.setValue(256)
        self.max_new_tokens.setSingleStep(64)
        sampling_form.addRow("Max new tokens", self.max_new_tokens)
        outer.addWidget(sampling_box)

        # System prompt
        system_box = QGroupBox("System prompt")
        system_layout = QVBoxLayout(system_box)
        self.system_prompt = QPlainTextEdit()
        self.system_prompt.setPlaceholderText("Optional instructions sent before the conversation")
        self.system_prompt.setMaximumHeight(90)
        system_layout.addWidget(self.system_prompt)
        outer.addWidget(system_box)

        self.problem = QLabel()
        self.problem.setObjectName("problem")
        self.problem.setWordWrap(True)
        self.problem.hide()
        outer.addWidget(self.problem)
        self.notice = QLabel()
        self.notice.setObjectName("notice")
        self.notice.setWordWrap(True)
        self.notice.hide()
        outer.addWidget(self.notice)
        outer.addStretch(1)

        for signal in (self.method.currentIndexChanged, self.k.valueChanged, self.layers.valueChanged,
                       self.temperature.valueChanged, self.top_p.valueChanged, self.top_k.valueChanged,
                       self.seed.valueChanged, self.max_new_tokens.valueChanged, self.draft.currentTextChanged,
                       self.system_prompt.textChanged):
            signal.connect(self._changed)
        self.model.activated.connect(lambda _index: self._model_chosen())
        self.model.lineEdit().editingFinished.connect(self._model_chosen)
        self._runtime_problem: str | None = None
        self._refresh_enabled()
        self.revalidate()

    # ------------------------------------------------------------------ reading
    def read(self) -> Settings:
        """The settings for the next message; raises ConfigError with the reason when they are refused."""
        method = self.method.currentData()
        layers = self.layers.value() or None
        if method == "early-exit" and layers is not None and self._n_layers and layers >= self._n_layers:
            raise ConfigError(f"early-exit layers must be below the model's {self._n_layers} layers "
                              f"(1…{self._n_layers - 1}), got {layers}")
        spec = SpecConfig(method=method, k=self.k.value(),
                          draft=(self.draft.currentText().strip() or None) if method == "draft-model" else None,
                          layers=layers if method == "early-exit" else None)
        temperature = round(self.temperature.value(), 4)
        sampling = SamplingConfig(temperature=temperature, top_k=self.top_k.value(), top_p=self.top_p.value(),
                                  seed=None if self.seed.value() < 0 else self.seed.value())
        return Settings(model=self.model_name(), spec=spec, sampling=sampling,
                        max_new_tokens=self.max_new_tokens.value(),
                        system_prompt=self.system_prompt.toPlainText())

    def model_name(self) -> str:
        return self.model.currentText().strip() or "default"

    def config_problem(self) -> str | None:
        """Why the current combination is refused, or None."""
        try:
            self.read()
        except ConfigError as exc:
            return str(exc)
        return None

    def problem_text(self) -> str | None:
        return self.problem.text() if not self.problem.isHidden() else None

    # ------------------------------------------------------------------ writing
    def apply(self, *, model: str | None = None, method: str | None = None, draft: str | None = None,
              k: int | None = None, layers: int | None = None, temperature: float | None = None,
              top_p: float | None = None, top_k: int | None = None, seed: int | None = None,
              max_new_tokens: int | None = None, system_prompt: str | None = None) -> None:
        """Set fields (the command line and tests use this)."""
        if model is not None:
            self._set_combo_text(self.model, model)
        if method is not None:
            index = self.method.findData(method)
            if index < 0:
                raise ConfigError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
            self.method.setCurrentIndex(index)
        if draft is not None:
            self._set_combo_text(self.draft, draft)
        if k is not None:
            self.k.setValue(k)
        if layers is not None:
            self.layers.setMaximum(max(self.layers.maximum(), layers))
            self.layers.setValue(layers)
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

    def set_model_state(self, text: str, n_layers: int | None = None, loaded_name: str | None = None) -> None:
        self.model_status.setText(text)
        if loaded_name is not None:
            self._loaded_model = loaded_name
            self._n_layers = n_layers
            if n_layers:
                self.layers.setMaximum(max(1, n_layers - 1))
            self.revalidate()

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
        method = self.method.currentData()
        self.draft.setEnabled(method == "draft-model")
        self.k.setEnabled(method != "none")
        self.layers.setEnabled(method == "early-exit")
        greedy = self.temperature.value() == 0
        for widget in (self.top_p, self.top_k, self.seed):
            widget.setEnabled(not greedy)
            widget.setToolTip("Greedy decoding (temperature 0) ignores this" if greedy else "")
        self.method_help.setText(METHOD_HELP.get(method, ""))

    def _show_problem(self, message: str | None) -> None:
        self.problem.setText(f"⚠ {message}" if message else "")
        self.problem.setVisible(bool(message))

    def _model_chosen(self) -> None:
        name = self.model_name()
        if name != self._loaded_model:
            self.model_change_requested.emit(name)

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
