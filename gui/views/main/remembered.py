"""What the main window remembers between runs (QSettings, gui.persistence.settings): the settings panel's values,
the window's geometry and dock layout, and the view choices (rejected drafts shown, rounds recorded, colour by).

Read into data (`Remembered`) that the window applies to itself, and written from data the window gives; it
sets nothing on the window. May touch: gui.persistence.settings, the window's geometry and state (QMainWindow).
"""

from __future__ import annotations

from typing import NamedTuple

from PySide6.QtCore import QByteArray, QRect
from PySide6.QtWidgets import QMainWindow

from gui.views.chat.colouring import MODES


class ViewChoices(NamedTuple):
    show_rejected: bool | None  # None: not remembered (the default stays)
    record_rounds: bool | None
    colour_by: str | None  # a name this version knows (gui.views.chat.colouring.MODES), else None


class Remembered(NamedTuple):
    geometry_restored: bool  # Qt restored the window's geometry
    saved_geometry: QRect | None  # the window's normal geometry as saved (Qt's restore has clamped it already)
    view: ViewChoices


def remembered_chat_values(settings, model_given: bool = False) -> dict:
    """The settings panel's last values (ControlsPanel.apply's keywords); the command line's model wins."""
    values = settings.chat_values()
    if model_given:
        values.pop("model", None)
    return values


def restore_window(settings, window: QMainWindow) -> Remembered:
    """Restore the window's geometry and dock layout from `settings` (gui.persistence.settings.AppSettings), and
    read the view choices for the window to apply."""
    geometry = settings.value("window/geometry")
    restored = isinstance(geometry, QByteArray) and not geometry.isEmpty() and window.restoreGeometry(geometry)
    normal = settings.value("window/normal_geometry")
    state = settings.value("window/state")
    if isinstance(state, QByteArray) and not state.isEmpty():
        window.restoreState(state)
    colouring = settings.value("view/colour_by", None, str)
    view = ViewChoices(settings.value("view/show_rejected", None, bool),
                       settings.value("view/record_rounds", None, bool),
                       colouring if colouring in MODES else None)  # a name this version doesn't know: by status
    return Remembered(bool(restored), normal if isinstance(normal, QRect) and normal.isValid() else None, view)


def save_window(settings, window: QMainWindow, chat_values: dict, view: ViewChoices) -> None:
    settings.set_chat_values(chat_values)
    settings.set_value("window/geometry", window.saveGeometry())
    settings.set_value("window/normal_geometry", window.normalGeometry())
    settings.set_value("window/state", window.saveState())
    settings.set_value("view/show_rejected", view.show_rejected)
    settings.set_value("view/colour_by", view.colour_by)
    settings.set_value("view/record_rounds", view.record_rounds)
    settings.sync()
