"""The settings panel's draft list: the installed drafts by name, those of another tokenizer marked in the open
list with what the user gets (they draft through text, slower per draft, exact) and in their tooltip. The text
a pick puts in the editable field stays the model's name, which the panel reads back as the draft.

May touch: the draft combo box it is given. Renders only.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QStyledItemDelegate

from engine.core.compat import CROSS_DRAFT_WORDS

MARK_ROLE = Qt.ItemDataRole.UserRole + 1  # an item's mark in the open list (its name stays its text)


class MarkedDraftDelegate(QStyledItemDelegate):
    """Shows an item's name followed by its mark, where it has one."""

    def initStyleOption(self, option, index) -> None:
        super().initStyleOption(option, index)
        mark = index.data(MARK_ROLE)
        if mark:
            option.text = f"{option.text} — {mark}"


def fill_drafts(combo: QComboBox, names: list[str], cross_tokenizer: set[str]) -> None:
    """Offer `names` in `combo` (in their order), marking those in `cross_tokenizer`."""
    combo.clear()
    if not isinstance(combo.itemDelegate(), MarkedDraftDelegate):
        combo.setItemDelegate(MarkedDraftDelegate(combo))
    for name in names:
        combo.addItem(name)
        if name in cross_tokenizer:
            combo.setItemData(combo.count() - 1, CROSS_DRAFT_WORDS, MARK_ROLE)
            combo.setItemData(combo.count() - 1, f"{name} has {CROSS_DRAFT_WORDS}", Qt.ItemDataRole.ToolTipRole)


def cross_draft_note(name: str) -> str:
    """What the note under the draft list says when the draft chosen is of another tokenizer."""
    return f"{name} has {CROSS_DRAFT_WORDS}."
