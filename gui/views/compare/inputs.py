"""The compare window's inputs: the prompt (presets or a Spec-Bench file, a category filter, the text box) and the
sampling row every run shares (temperature, seed, max new tokens).

Each is a widget that owns its controls and tells the window what happened by signals; neither runs anything.
May touch: QtWidgets, gui.sessions.compare (loading prompt files, their categories), engine configs (read).
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QComboBox, QFileDialog, QHBoxLayout, QLabel, QPlainTextEdit,
                               QPushButton, QSizePolicy, QSpinBox, QVBoxLayout, QWidget)

from engine.core.config import SAMPLING_FIELDS, SamplingConfig, sampling_from_values
from engine.core.errors import ConfigError
from engine.measure.prompts import Prompt
from gui.sessions.compare import categories, load_prompt_choices
from gui.views.chat.sampling_box import sampling_control

SHOWN = ("temperature", "seed")  # the sampling fields a comparison offers; the others stay at their defaults

SEQUENTIAL_NOTE = ("Runs go one after another on the same device, never at the same time: concurrent runs "
                   "would distort each other's timing. Plain decoding always runs first, as the reference.")


class PromptBox(QWidget):
    """Presets or a Spec-Bench file, with a category filter, above the prompt's text box."""

    text_changed = Signal()
    status_reported = Signal(str)  # a line for the window's status bar (a file loaded, or why not)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.choices: list[Prompt] = []
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(6)
        column.addLayout(self._chooser_row())
        self.prompt = QPlainTextEdit()
        self.prompt.setObjectName("message_box")
        self.prompt.setPlaceholderText("Type a prompt, or pick a preset above")
        self.prompt.setFixedHeight(self.prompt.fontMetrics().lineSpacing() * 3 + 16)
        self.prompt.textChanged.connect(self.text_changed)
        column.addWidget(self.prompt)

    def _chooser_row(self) -> QHBoxLayout:
        row = QHBoxLayout()
        row.setSpacing(6)
        row.addWidget(QLabel("Prompt"))
        self.category = QComboBox()
        self.category.setToolTip("Only prompts of this kind")
        self.category.setMinimumWidth(150)
        self.category.currentIndexChanged.connect(self.fill_presets)
        self.preset = QComboBox()
        self.preset.setToolTip("A prompt preset: pick one to put it in the box below (you can edit it)")
        self.preset.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.preset.activated.connect(self.preset_chosen)
        self.load_button = QPushButton("Load prompts…")
        self.load_button.setToolTip("A Spec-Bench JSON lines file (question_id, category, turns: the first "
                                    "turn is used) or a presets file")
        self.load_button.clicked.connect(self.browse_prompts)
        self.source_label = QLabel("")
        self.source_label.setObjectName("dim")
        row.addWidget(self.category)
        row.addWidget(self.preset, 1)
        row.addWidget(self.load_button)
        row.addWidget(self.source_label)
        return row

    def text(self) -> str:
        return self.prompt.toPlainText()

    def load_prompt_file(self, path) -> int:
        """Presets or a Spec-Bench JSON lines file into the preset list; returns how many prompts."""
        choices = load_prompt_choices(path)
        self.choices = choices
        self.category.blockSignals(True)
        self.category.clear()
        self.category.addItem(f"all kinds ({len(choices)})", None)
        for category in categories(choices):
            n = sum(c.category == category for c in choices)
            self.category.addItem(f"{category} ({n})", category)
        self.category.blockSignals(False)
        self.source_label.setText(str(path).rsplit("/", 1)[-1])
        self.fill_presets()
        return len(choices)

    def set_category(self, category: str | None) -> None:
        index = self.category.findData(category)
        if index >= 0:
            self.category.setCurrentIndex(index)

    def visible_choices(self) -> list[Prompt]:
        category = self.category.currentData()
        return [c for c in self.choices if category is None or c.category == category]

    def choose_preset(self, index: int) -> None:
        """Put the index-th visible preset in the prompt box."""
        self.preset.setCurrentIndex(index + 1)
        self.preset_chosen(index + 1)

    def fill_presets(self, *_args) -> None:
        self.preset.clear()
        self.preset.addItem("— choose a preset —", None)
        for choice in self.visible_choices():
            self.preset.addItem(f"{choice.category} · {choice.title}", choice.id)
            self.preset.setItemData(self.preset.count() - 1, choice.text[:600], Qt.ItemDataRole.ToolTipRole)

    def preset_chosen(self, index: int) -> None:
        wanted = self.preset.itemData(index)
        choice = next((c for c in self.visible_choices() if c.id == wanted), None)
        if choice is not None:
            self.prompt.setPlainText(choice.text)

    def browse_prompts(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Load prompts", "", "Prompts (*.jsonl *.json);;All files (*)")
        if not path:
            return
        try:
            n = self.load_prompt_file(path)
        except ConfigError as exc:
            self.status_reported.emit(f"Could not load prompts: {exc}")
            return
        self.status_reported.emit(f"{n} prompts loaded from {path}")


class SamplingRow(QWidget):
    """Temperature, seed and the length limit, the same for plain decoding and every setting, with the note that
    runs go one after another."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(6)
        self.controls = {field.name: sampling_control(field) for field in SAMPLING_FIELDS if field.name in SHOWN}
        self.temperature, self.seed = self.controls["temperature"], self.controls["seed"]
        self.temperature.setToolTip("Applies to plain decoding and every setting alike. Greedy (0) lets the "
                                    "outputs be checked against plain decoding, token for token.")
        self.seed.setValue(0)  # a comparison repeats: a fixed seed unless asked for random
        self.seed.setToolTip("Sampling seed, the same for every run")
        self.max_new_tokens = QSpinBox()
        self.max_new_tokens.setRange(1, 100_000)
        self.max_new_tokens.setValue(128)
        self.max_new_tokens.setSingleStep(32)
        captions = {field.name: field.label for field in SAMPLING_FIELDS}
        for caption, widget in (*((captions[name], control) for name, control in self.controls.items()),
                                ("Max new tokens", self.max_new_tokens)):
            row.addWidget(QLabel(caption))
            row.addWidget(widget)
        row.addSpacing(12)
        self.note = QLabel(SEQUENTIAL_NOTE)
        self.note.setObjectName("dim")
        self.note.setWordWrap(True)
        row.addWidget(self.note, 1)

    def sampling(self) -> SamplingConfig:
        """The fields shown, the others at their defaults."""
        return sampling_from_values({name: control.value() for name, control in self.controls.items()})

    def set_values(self, **values) -> None:
        """Set shown fields by name to numbers (a random seed: -1); None, or a field not shown, is left alone."""
        for name, value in values.items():
            if value is not None and name in self.controls:
                self.controls[name].setValue(value)
