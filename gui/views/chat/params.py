"""One widget per method parameter (engine.core.methods.ParamSpec), for the settings panel and the compare
window's rows: built from the ParamSpec (type, default, range, help) and read back as the value a SpecConfig
takes. A whole-number parameter whose default is None (auto) shows 0 as "auto".

May touch: engine.core.methods (read) and the widgets it makes. No state beyond them.
"""

from __future__ import annotations

from PySide6.QtWidgets import QCheckBox, QDoubleSpinBox, QLineEdit, QSpinBox, QWidget

from engine.core.methods import ParamSpec

SPIN_CEILING = 9999  # what a spin box lets one type, so an out-of-range value is refused with its range


def _spin(param: ParamSpec, compact: bool) -> QWidget:
    spin = QSpinBox() if param.type is int else QDoubleSpinBox()
    low = 0 if param.default is None else (param.min if param.min is not None else -SPIN_CEILING)
    spin.setRange(low, SPIN_CEILING)  # the range is the ParamSpec's: out of it, refused with it
    if param.default is None:
        spin.setSpecialValueText(f"{param.name}: auto" if compact else "auto")
    else:
        spin.setValue(param.default)
    if compact:
        spin.setPrefix(f"{param.name} = ")
    return spin


def param_widget(param: ParamSpec, *, compact: bool = False) -> QWidget:
    """The control of `param`; `compact` (a compare row) names the parameter inside the control."""
    if param.type is bool:
        widget = QCheckBox(param.title if compact else "")
        widget.setChecked(bool(param.default))
    elif param.type in (int, float):
        widget = _spin(param, compact)
    else:
        widget = QLineEdit(str(param.default or ""))
        widget.setPlaceholderText(param.name if compact else "")
    widget.setObjectName(f"param_{param.name}")
    widget.setToolTip(param.help)
    return widget


def changed_signal(widget: QWidget):
    """The signal the control emits when its value changes."""
    if isinstance(widget, QCheckBox):
        return widget.toggled
    if isinstance(widget, QLineEdit):
        return widget.textChanged
    return widget.valueChanged


def shown_value(widget: QWidget):
    """What the control shows (0 for auto), as the window remembers it."""
    if isinstance(widget, QCheckBox):
        return widget.isChecked()
    if isinstance(widget, QLineEdit):
        return widget.text().strip()
    return widget.value()


def read_param(param: ParamSpec, widget: QWidget):
    """The control's value as a SpecConfig takes it (None: auto)."""
    value = shown_value(widget)
    if param.default is None and not value:
        return None
    return value


def write_param(param: ParamSpec, widget: QWidget, value) -> None:
    """Show `value` (None or 0: auto where the default is None; None: the default otherwise)."""
    if value is None:
        value = 0 if param.default is None and param.type in (int, float) else param.default
    if isinstance(widget, QCheckBox):
        widget.setChecked(bool(value))
    elif isinstance(widget, QLineEdit):
        widget.setText("" if value is None else str(value))
    else:
        widget.setValue(value)
