"""The settings panel's Sampling box: one control per SamplingConfig field, made from the field's description
(engine.core.config.SAMPLING_FIELDS: caption, range, step, decimals, the text of its "off" value), then the
token budget. Greedy decoding (temperature 0) disables the controls it ignores, and says so in their tooltips.
It keeps its widgets, reads them back as a SamplingConfig and tells of a change by `changed`.

May touch: its own widgets, engine.core.config's SamplingConfig and its field descriptions (read).
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QAbstractSpinBox, QDoubleSpinBox, QFormLayout, QGroupBox, QSpinBox

from engine.core.config import SAMPLING_FIELDS, SamplingConfig, sampling_from_values, sampling_to_values
from engine.core.sampling_fields import SamplingField
from engine.core.validation import MAX_NEW_TOKENS

DEFAULT_MAX_NEW_TOKENS = 256  # the budget a first start shows
GREEDY_IGNORES = "Greedy decoding (temperature 0) ignores this"


def sampling_control(field: SamplingField) -> QAbstractSpinBox:
    """The spin box of `field`, at its default: its range, step, decimals and the text of its lowest value."""
    if field.type is float:
        control = QDoubleSpinBox()
        control.setDecimals(field.decimals)
    else:
        control = QSpinBox()
    control.setRange(*field.control_range)
    control.setSingleStep(field.step)
    control.setValue(field.shown(field.default))
    if field.special:
        control.setSpecialValueText(field.special)
    control.setObjectName(f"sampling_{field.name}")
    return control


class SamplingBox(QGroupBox):
    """Temperature, top-p, top-k, seed (as SAMPLING_FIELDS describes them) and the token budget."""

    changed = Signal()  # a control's value changed (the user, or set_sampling / set_values)

    def __init__(self, parent=None) -> None:
        super().__init__("Sampling", parent)
        form = QFormLayout(self)
        self.controls: dict[str, QAbstractSpinBox] = {}  # one per SamplingConfig field, by name
        for field in SAMPLING_FIELDS:
            self.controls[field.name] = sampling_control(field)
            form.addRow(field.label, self.controls[field.name])
        self.budget = QSpinBox()
        self.budget.setObjectName("max_new_tokens")
        self.budget.setRange(1, MAX_NEW_TOKENS)
        self.budget.setValue(DEFAULT_MAX_NEW_TOKENS)
        self.budget.setSingleStep(64)
        form.addRow("Max new tokens", self.budget)
        for control in (*self.controls.values(), self.budget):
            control.valueChanged.connect(self._changed)
        self._show_greedy()

    # ------------------------------------------------------------------ reading
    def sampling(self) -> SamplingConfig:
        """The SamplingConfig the controls show (their ranges are within the fields' checks)."""
        return sampling_from_values(self.values())

    def values(self) -> dict:
        """Each control's number by field name, as QSettings keeps them (a random seed: -1)."""
        return {name: control.value() for name, control in self.controls.items()}

    def max_new_tokens(self) -> int:
        return self.budget.value()

    # ------------------------------------------------------------------ writing
    def set_sampling(self, sampling: SamplingConfig) -> None:
        self.set_values(**sampling_to_values(sampling))

    def set_values(self, **values) -> None:
        """Set controls by field name to numbers as `values` gives them (a random seed: -1); None leaves one as it
        is. TypeError for a name no field has."""
        unknown = set(values) - set(self.controls)
        if unknown:
            raise TypeError(f"no sampling field {', '.join(sorted(unknown))}")
        for name, value in values.items():
            if value is not None:
                self.controls[name].setValue(value)

    def set_max_new_tokens(self, max_new_tokens: int) -> None:
        self.budget.setValue(max_new_tokens)

    # ------------------------------------------------------------------ internals
    def _changed(self, *_value) -> None:
        self._show_greedy()
        self.changed.emit()

    def _show_greedy(self) -> None:
        greedy = self.sampling().greedy
        for field in SAMPLING_FIELDS:
            if field.greedy_ignores:
                self.controls[field.name].setEnabled(not greedy)
                self.controls[field.name].setToolTip(GREEDY_IGNORES if greedy else "")
