"""The settings panel's boxes (gui.views.chat.controls.ControlsPanel): each builder makes one group of widgets and
sets them on the panel by name; the panel connects their signals and reads them. Render only: no state, no
engine call beyond the registries' lists (methods, backends, parameters).

May touch: the panel given (its widget attributes), the method registry (read), gui.views.chat.params.
"""

from __future__ import annotations

from PySide6.QtWidgets import (QCheckBox, QComboBox, QDoubleSpinBox, QFormLayout, QGroupBox, QHBoxLayout, QLabel,
                               QPlainTextEdit, QSpinBox, QToolButton, QVBoxLayout, QWidget)

from engine.core.config import BACKENDS, MAX_K
from engine.core.methods import all_params
from gui.views.chat.methods import add_method_items
from gui.views.chat.params import SPIN_CEILING, param_widget


class NoteLabel(QLabel):
    """A wrapped note that is always as tall as its text at its width: a form layout inside a scroll area
    otherwise keeps the height it computed for another width, and clips a long note top and bottom."""

    def resizeEvent(self, event) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._fit(event.size().width())

    def setText(self, text: str) -> None:  # noqa: N802
        super().setText(text)
        self._fit(self.width())

    def _fit(self, width: int) -> None:
        if self.wordWrap() and width > 0:
            height = self.heightForWidth(width)
            if height > 0 and height != self.minimumHeight():
                self.setMinimumHeight(height)


def note_label(name: str) -> QLabel:
    """A wrapped one-line note, hidden until it has something to say."""
    label = NoteLabel()
    label.setObjectName(name)
    label.setWordWrap(True)
    label.hide()
    return label


def narrow_combo() -> QComboBox:
    """A combo box whose long items don't widen the settings dock: it asks for 20 characters (a longer item
    is cut in the box); its popup shows each item in full."""
    return QComboBox(minimumContentsLength=20,
                     sizeAdjustPolicy=QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)


def build_saved_box(panel) -> QWidget:
    """Shown for a reopened chat: the settings its last reply ran with, and a button to use them."""
    panel.saved_box = QWidget()
    row = QHBoxLayout(panel.saved_box)
    row.setContentsMargins(0, 0, 0, 0)
    panel.saved_note = QLabel("")
    panel.saved_note.setObjectName("notice")
    panel.saved_note.setWordWrap(True)
    row.addWidget(panel.saved_note, 1)
    panel.saved_apply = QToolButton()
    panel.saved_apply.setText("Use these")
    panel.saved_apply.setToolTip("Set the panel to what this chat ran with")
    row.addWidget(panel.saved_apply)
    panel.saved_box.hide()
    return panel.saved_box


def build_model_box(panel) -> QGroupBox:
    """The target, its backend, Compile, the Models button and the loaded model's line."""
    box = QGroupBox("Model")
    form = QFormLayout(box)
    panel.model = QComboBox()
    panel.model.setEditable(True)
    panel.model.addItem("default")
    panel.model.setToolTip("The target model: 'default' (built in), a Hugging Face id, a folder or a GGUF file. "
                           "Press Enter to load.")
    panel.model.setInsertPolicy(QComboBox.InsertPolicy.InsertAtTop)
    panel.browse = QToolButton()
    panel.browse.setText("…")
    panel.browse.setToolTip("Choose a model folder")
    row = QHBoxLayout()
    row.setSpacing(4)
    row.addWidget(panel.model, 1)
    row.addWidget(panel.browse)
    form.addRow("Target", row)
    form.addRow("Backend", build_backend_choice(panel))
    panel.compile_box = QCheckBox("Compile (torch.compile, transformers)")
    panel.compile_box.setObjectName("compile_choice")
    panel.compile_box.setToolTip("transformers backend: a static KV cache and torch.compile (CUDA graphs on a GPU, "
                                 "where most of a small model's step is launch overhead). Each verify width "
                                 "compiles on its first use: slow once, then faster. Changing it loads the "
                                 "target again; llama.cpp runs as it is.")
    form.addRow("", panel.compile_box)
    panel.models_button = QToolButton()
    panel.models_button.setText("Models…")
    panel.models_button.setToolTip("Every model on this computer, pairing a draft, downloads (Ctrl+M)")
    form.addRow("", panel.models_button)
    panel.model_status = QLabel("not loaded")
    panel.model_status.setObjectName("dim")
    panel.model_status.setWordWrap(True)
    form.addRow("", panel.model_status)
    return box


def build_backend_choice(panel) -> QComboBox:
    panel.backend = narrow_combo()
    panel.backend.setObjectName("backend_choice")
    for name in ("auto",) + BACKENDS:
        panel.backend.addItem("auto (GGUF on llama.cpp)" if name == "auto" else name, name)  # as the Models window
    panel.backend.setToolTip("Where the target runs (auto: a GGUF on llama.cpp, the rest on transformers, and a "
                             "method llama.cpp can't serve on transformers, the model loaded there too): "
                             "llama.cpp keeps a GGUF quantized and fast; transformers runs every method and loads "
                             "a GGUF dequantized. Changing it loads the target again.")
    return panel.backend


def build_spec_box(panel) -> QGroupBox:
    """The method (with its notes), the draft, k, one control per method parameter, adaptive, the method's help."""
    box = QGroupBox("Speculation")
    form = QFormLayout(box)
    # a method's parameters bring long labels (suffix's "Draft per matched token"): in a narrow dock a row whose
    # label and field don't fit side by side puts the field under its label, instead of widening the dock
    form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
    panel.method = narrow_combo()
    add_method_items(panel.method)
    form.addRow("Method", panel.method)
    panel.own_note = note_label("own_drafter_note")
    form.addRow(panel.own_note)
    panel.backend_note = note_label("backend_note")
    form.addRow(panel.backend_note)
    panel.draft = QComboBox()
    panel.draft.setObjectName("draft_choice")
    panel.draft.setEditable(True)
    form.addRow("Draft model", panel.draft)
    panel.draft_note = note_label("draft_note")
    form.addRow(panel.draft_note)
    panel.draft_download = QToolButton()
    panel.draft_download.setObjectName("draft_download")
    panel.draft_download.hide()
    form.addRow(panel.draft_download)  # a row of its own: a hub id is long, the dock narrow
    panel.k = QSpinBox()
    panel.k.setRange(1, SPIN_CEILING)  # the range is engine.core.config's check_k: out of it, refused with it
    panel.k.setValue(4)
    panel.k.setToolTip(f"How many tokens the drafter proposes per round (1 to {MAX_K})")
    form.addRow("k (draft length)", panel.k)
    panel.spec_form = form
    panel.param_controls = {}  # one per method parameter (ParamSpec), by name
    for param in all_params():
        panel.param_controls[param.name] = param_widget(param)
        form.addRow(param.title[:1].upper() + param.title[1:], panel.param_controls[param.name])
    panel.adaptive = QCheckBox("Adaptive draft length")
    panel.adaptive.setToolTip("Draft only as many tokens (≤ k) as pay for their verification, learnt as it runs")
    form.addRow("", panel.adaptive)
    panel.method_help = QLabel()
    panel.method_help.setObjectName("dim")
    panel.method_help.setWordWrap(True)
    form.addRow(panel.method_help)
    return box


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


def build_system_box(panel) -> QGroupBox:
    box = QGroupBox("System prompt")
    layout = QVBoxLayout(box)
    panel.system_prompt = QPlainTextEdit()
    panel.system_prompt.setPlaceholderText("Optional instructions sent before the conversation")
    panel.system_prompt.setMaximumHeight(90)
    layout.addWidget(panel.system_prompt)
    return box
