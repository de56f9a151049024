"""The tree control (a round's node budget, SpecConfig.tree: 0 drafts a chain of k, up to engine.core.config
.MAX_TREE nodes a tree k deep), for the settings panel's Speculation box and the compare window's rows: a spin box,
enabled only for a method whose MethodSpec says it `branches`, else disabled with a tooltip saying that the method
drafts chains.

May touch: engine.core.config's MAX_TREE, engine.core.methods (read) and the spin box it makes.
"""

from __future__ import annotations

from PySide6.QtWidgets import QAbstractSpinBox, QSpinBox

from engine.core.config import MAX_TREE
from engine.core.methods import MethodSpec

TREE_TIP = (f"A round drafts a tree of up to this many nodes, k deep, and the target verifies every node in one "
            f"pass (0: a chain of k; at most {MAX_TREE})")


def tree_spin(compact: bool = False) -> QSpinBox:
    """The control, at 0 (a chain); `compact` (a compare row) names it inside the box."""
    spin = QSpinBox()
    spin.setObjectName("tree_budget")
    spin.setRange(0, MAX_TREE)
    spin.setSpecialValueText("chain" if compact else "0 (chain)")
    if compact:  # a compare row, already full: "tree 12" or "chain", typed, wheeled or stepped by the arrow keys
        spin.setPrefix("tree ")
        spin.setButtonSymbols(QAbstractSpinBox.ButtonSymbols.NoButtons)
    spin.setToolTip(TREE_TIP)
    return spin


def chains_tip(method: MethodSpec) -> str:
    return f"{method.label} drafts chains: one continuation a round, no tree"


def show_tree_for(spin: QSpinBox, method: MethodSpec) -> None:
    """Enable the control for a method that branches; else disable it and say the method drafts chains."""
    spin.setEnabled(method.branches)
    spin.setToolTip(TREE_TIP if method.branches else chains_tip(method))


def tree_of(spin: QSpinBox, method: MethodSpec) -> int:
    """The node budget the control gives `method` (0 for one that drafts chains)."""
    return spin.value() if method.branches else 0
