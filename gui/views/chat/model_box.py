"""The settings panel's Model box (gui.views.chat.controls.ControlsPanel): the target (typed, listed or a folder
chosen), its backend, Compile, the Models button and the loaded model's line. It keeps its widgets and tells what
the user chose by signals; whether a choice loads anything is the panel's and the window's to decide.

May touch: its own widgets, a folder dialog (Browse), engine.core.config.BACKENDS (read).
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (QCheckBox, QComboBox, QFileDialog, QFormLayout, QGroupBox, QHBoxLayout, QLabel,
                               QToolButton)

from engine.core.config import BACKENDS
from gui.views.chat.boxes import narrow_combo, set_combo_text


class ModelBox(QGroupBox):
    """The target model, where it runs, and what is loaded."""

    model_chosen = Signal(str)  # the user picked, typed (Enter) or browsed to a model: its name
    backend_chosen = Signal(str)  # the user picked a backend or toggled Compile: the backend chosen
    models_requested = Signal()  # the model manager

    def __init__(self, parent=None) -> None:
        super().__init__("Model", parent)
        form = QFormLayout(self)
        self.model = QComboBox()
        self.model.setEditable(True)
        self.model.addItem("default")
        self.model.setToolTip("The target model: 'default' (built in), a Hugging Face id, a folder or a GGUF file. "
                              "Press Enter to load.")
        self.model.setInsertPolicy(QComboBox.InsertPolicy.InsertAtTop)
        self.browse = QToolButton()
        self.browse.setText("…")
        self.browse.setToolTip("Choose a model folder")
        row = QHBoxLayout()
        row.setSpacing(4)
        row.addWidget(self.model, 1)
        row.addWidget(self.browse)
        form.addRow("Target", row)
        self.backend = backend_choice()
        form.addRow("Backend", self.backend)
        self.compile_box = QCheckBox("Compile (torch.compile, transformers)")
        self.compile_box.setObjectName("compile_choice")
        self.compile_box.setToolTip("transformers backend: a static KV cache and torch.compile (CUDA graphs on a "
                                    "GPU, where most of a small model's step is launch overhead). Each verify width "
                                    "compiles on its first use: slow once, then faster. Changing it loads the "
                                    "target again; llama.cpp runs as it is.")
        form.addRow("", self.compile_box)
        self.models_button = QToolButton()
        self.models_button.setText("Models…")
        self.models_button.setToolTip("Every model on this computer, pairing a draft, downloads (Ctrl+M)")
        form.addRow("", self.models_button)
        self.status = QLabel("not loaded")
        self.status.setObjectName("dim")
        self.status.setWordWrap(True)
        form.addRow("", self.status)
        self._connect()

    def _connect(self) -> None:
        self.model.activated.connect(lambda _index: self.model_chosen.emit(self.model_name()))
        self.model.lineEdit().editingFinished.connect(lambda: self.model_chosen.emit(self.model_name()))
        self.browse.clicked.connect(self._browse_model)
        self.backend.activated.connect(lambda _index: self.backend_chosen.emit(self.backend_name()))
        self.compile_box.toggled.connect(lambda _on: self.backend_chosen.emit(self.backend_name()))
        self.models_button.clicked.connect(self.models_requested)

    def model_name(self) -> str:
        return self.model.currentText().strip() or "default"

    def set_model_name(self, name: str) -> None:
        """Show `name` as the target, without loading."""
        set_combo_text(self.model, name)

    def show_status(self, text: str) -> None:
        """The loaded model's line: what is loaded, or loading, or why not."""
        self.status.setText(text)

    def backend_name(self) -> str:
        """The backend chosen: auto, transformers or llama.cpp."""
        return self.backend.currentData()

    def set_backend(self, backend: str) -> None:
        """Choose the backend without loading."""
        self.backend.setCurrentIndex(max(0, self.backend.findData(backend)))

    def compile_enabled(self) -> bool:
        return self.compile_box.isChecked()

    def set_compile(self, on: bool) -> None:
        """Without telling (nothing loads)."""
        self.compile_box.blockSignals(True)
        self.compile_box.setChecked(on)
        self.compile_box.blockSignals(False)

    def _browse_model(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Choose a model folder")
        if folder:
            self.set_model_name(folder)
            self.model_chosen.emit(self.model_name())


def backend_choice() -> QComboBox:
    """The backend list: auto, then every backend by name."""
    combo = narrow_combo()
    combo.setObjectName("backend_choice")
    for name in ("auto",) + BACKENDS:
        combo.addItem("auto (GGUF on llama.cpp)" if name == "auto" else name, name)  # as the Models window
    combo.setToolTip("Where the target runs (auto: a GGUF on llama.cpp, the rest on transformers, and a "
                     "method llama.cpp can't serve on transformers, the model loaded there too): "
                     "llama.cpp keeps a GGUF quantized and fast; transformers runs every method and loads "
                     "a GGUF dequantized. Changing it loads the target again.")
    return combo
