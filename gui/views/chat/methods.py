"""The method lists of the settings panel and the compare window's rows: every registered method by label, its
description as tooltip; in the settings panel a method the loaded model can't use is disabled, with the reason
as its tooltip (engine.models.availability's table). The draft field's words for a method come from its
MethodSpec too (what its draft names, whether it is a head).

May touch: the method registry (read), the combo boxes given. Names no method.
"""

from __future__ import annotations

from fnmatch import fnmatch
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox

from engine.core.methods import method_spec, methods as registered_methods


def add_method_items(combo: QComboBox, methods=None) -> None:
    """The registered methods (or `methods`), by label, with their description as tooltip (the chat's panel and
    the compare window's rows)."""
    for method in registered_methods() if methods is None else methods:
        if not method.offered:
            continue
        combo.addItem(method.label, method.name)
        combo.setItemData(combo.count() - 1, method.description, Qt.ItemDataRole.ToolTipRole)


def mark_methods(combo: QComboBox, choices: dict) -> None:
    """Disable each method whose MethodChoice (engine.models.availability) is a refusal, its reason as the
    tooltip; the others are enabled, with their description (no choices: every method enabled)."""
    model = combo.model()
    for row in range(combo.count()):
        name = combo.itemData(row)
        choice = choices.get(name)
        refused = choice is not None and not choice.usable
        model.item(row).setEnabled(not refused)
        combo.setItemData(row, choice.refusal if refused else method_spec(name).description,
                          Qt.ItemDataRole.ToolTipRole)


def head_placeholder(method) -> str:
    """What the draft field shows, empty, for a method that reads a head: a folder, or its head file's pattern."""
    if not method.reads_head:
        return ""
    return f"{'an ' + method.head_file + ' head' if method.head_file else 'a head folder'} (empty: the model's own)"


def draft_placeholder(method) -> str:
    """What the draft field shows, empty: a head's words, else what the method's draft names (a draft model, an
    assistant drafter); "" for a method without one."""
    if method.reads_head:
        return head_placeholder(method)
    return method.draft_help if method.needs_draft else ""


def draft_tooltip(method) -> str:
    """The draft field's tooltip for `method`: what its draft names; the installed ones are listed for a method
    that drafts with a smaller model."""
    if not (method.needs_draft or method.reads_head):
        return f"{method.label} takes no draft"
    offered = ("; the list offers the smaller ones installed (another tokenizer's marked: they draft through text)"
               if method.implied_by_draft else "")
    return f"{method.label}: {method.draft_help or head_placeholder(method)}{offered}"


def is_head(path: Path, head_file: str) -> bool:
    """A head folder (head_file ""), or an existing file whose name matches `head_file` (case aside)."""
    if not head_file:
        return path.is_dir()
    return fnmatch(path.name.lower(), head_file.lower()) and path.is_file()
