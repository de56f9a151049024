"""The compare window's settings area: the compared settings (one SettingRow each, 1 to MAX_SETTINGS) beside
Add setting, Run comparison, Stop and "Prove it in float32".

It owns its rows and buttons and tells the window what was asked by signals; it runs nothing.
May touch: QtWidgets, the compare parts (SettingRow), engine configs and the sweep's method order (read).
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QPushButton, QVBoxLayout, QWidget

from engine.core.config import MAX_K, SpecConfig
from engine.core.errors import ConfigError
from engine.measure.fastest import sweep_methods
from gui.views.compare.parts import SettingRow

MAX_SETTINGS = 4


class SettingsArea(QWidget):
    """The settings to compare, and the buttons that run or stop a comparison."""

    changed = Signal()  # a setting was added, removed or edited
    run_requested = Signal()
    strict_run_requested = Signal()
    stop_requested = Signal()

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setting_rows: list[SettingRow] = []
        top = QHBoxLayout(self)
        top.setContentsMargins(0, 0, 0, 0)
        top.setSpacing(10)
        self.settings_box = QVBoxLayout()
        self.settings_box.setSpacing(4)
        top.addLayout(self.settings_box, 3)
        top.addLayout(self._buttons(), 2)

    def _buttons(self) -> QVBoxLayout:
        side = QVBoxLayout()
        side.setSpacing(4)
        self.add_button = QPushButton("+ Add setting")
        self.add_button.setToolTip(f"Compare up to {MAX_SETTINGS} settings (plain decoding always runs too)")
        self.add_button.clicked.connect(lambda: self.add_setting())
        self.run_button = QPushButton("Run comparison")
        self.run_button.setObjectName("send_button")
        self.run_button.clicked.connect(self.run_requested)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Stop at the next round; runs that finished stay in the table (Esc)")
        self.stop_button.clicked.connect(self.stop_requested)
        self.strict_button = QPushButton("Prove it in float32")
        self.strict_button.setToolTip("Run the same comparison again in float32 on the CPU with the transformers "
                                      "backend, where greedy output must be identical to plain decoding: a check "
                                      "of the algorithm itself, free of bf16/fp16/quantization rounding")
        self.strict_button.clicked.connect(self.strict_run_requested)
        row = QHBoxLayout()
        row.addWidget(self.add_button)
        row.addWidget(self.run_button)
        row.addWidget(self.stop_button)
        side.addLayout(row)
        side.addWidget(self.strict_button)
        side.addStretch(1)
        return side

    def add_setting(self, spec: SpecConfig | None = None) -> SettingRow | None:
        if len(self.setting_rows) >= MAX_SETTINGS:
            return None
        if spec is None:  # a sensible next one: the last setting with a larger k
            last = (self.setting_rows[-1].spec() if self.setting_rows
                    else SpecConfig(method=sweep_methods()[0].name, k=2))
            spec = last.with_k(min(MAX_K, last.k * 2))
        row = SettingRow(spec)
        row.remove_requested.connect(self.remove_setting)
        row.changed.connect(self.changed)
        self.setting_rows.append(row)
        self.settings_box.addWidget(row)
        self.changed.emit()
        return row

    def remove_setting(self, row: SettingRow) -> None:
        if len(self.setting_rows) <= 1 or row not in self.setting_rows:
            return
        self._drop(row)
        self.changed.emit()

    def set_specs(self, specs: list[SpecConfig]) -> None:
        """Replace the settings; 1…MAX_SETTINGS speculative specs."""
        if not 1 <= len(specs) <= MAX_SETTINGS:
            raise ConfigError(f"compare 1 to {MAX_SETTINGS} settings, got {len(specs)}")
        for row in list(self.setting_rows):
            self._drop(row)
        for spec in specs:
            self.add_setting(spec)

    def _drop(self, row: SettingRow) -> None:
        self.setting_rows.remove(row)
        row.setParent(None)
        row.deleteLater()

    def specs(self) -> list[SpecConfig]:
        return [row.spec() for row in self.setting_rows]

    def set_actions(self, idle: bool, has_prompt: bool) -> None:
        """Enable what can be done now: run with a prompt while idle, stop while running, edit while idle."""
        can_run = idle and has_prompt and bool(self.setting_rows)
        self.run_button.setEnabled(can_run)
        self.strict_button.setEnabled(can_run)
        self.stop_button.setEnabled(not idle)
        self.add_button.setEnabled(idle and len(self.setting_rows) < MAX_SETTINGS)
        for row in self.setting_rows:
            row.remove.setEnabled(idle and len(self.setting_rows) > 1)
            row.setEnabled(idle)
