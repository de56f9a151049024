"""The verify-cost curve: what one target pass over n tokens costs against one on this machine, as the engine
measured it (engine.measure.verify_cost, brought by gui.worker.CostCurve), so a user sees why speculation pays or doesn't:
"verifying 4 tokens costs 3.2× one on this machine". A headline and a small table (n, ms, × one).

Renders a CostCurve it is given (`show_curve`, from the worker's measurement); computes no figure itself
(VerifyCost.relative is the engine's). A live panel (gui.views.live.panel.LivePanel) whose figures belong to the
loaded model, not to the chat: a snapshot or a new chat leaves them as they are.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QGridLayout, QLabel, QVBoxLayout, QWidget

from gui import theme
from gui.views.live.panel import LiveSnapshot

HEADLINE_N = 4  # the pass size the headline names (k = 3 drafted + the target's own)
SHOWN_N = (1, 2, 3, 4, 5, 6, 8)


def headline(curve) -> str:
    """'Verifying 4 tokens costs 3.2× one on this machine (llama.cpp, cpu).'"""
    n = min(HEADLINE_N, curve.cost.n_max)
    return (f"Verifying {n} tokens costs {curve.cost.relative(n):.1f}× one on this machine "
            f"({curve.backend}, {curve.device}).")


class CostCurveView(QWidget):
    """Headline, then a row of n, the ms of a pass over n tokens and its cost against one."""

    stretch = 0

    def __init__(self, palette: theme.Palette | None = None, parent=None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        self.headline = QLabel("Verify cost: not measured yet")
        self.headline.setObjectName("dim")
        self.headline.setWordWrap(True)
        self.headline.setToolTip("A speculative round verifies k drafted tokens plus one in a single pass of the "
                                 "target; on a CPU that pass costs more than one token's, which is why a long "
                                 "draft can be slower. The theoretical speed-up uses this curve.")
        layout.addWidget(self.headline)
        self.table = QWidget()
        self.grid = QGridLayout(self.table)
        self.grid.setContentsMargins(0, 0, 0, 0)
        self.grid.setHorizontalSpacing(8)
        self.grid.setVerticalSpacing(0)
        for row, caption in enumerate(("tokens", "ms", "× one")):
            label = QLabel(caption)
            label.setObjectName("stat_caption")
            self.grid.addWidget(label, row, 0)
        self.cells: dict[tuple[int, int], QLabel] = {}
        layout.addWidget(self.table)
        self.table.hide()
        self.curve = None

    def show_curve(self, curve) -> None:
        """Render a measured CostCurve (gui.worker)."""
        self.curve = curve
        self.headline.setText(headline(curve))
        for label in self.cells.values():
            label.deleteLater()
        self.cells.clear()
        shown = [n for n in SHOWN_N if n <= curve.cost.n_max]
        for column, n in enumerate(shown, start=1):
            texts = (str(n), f"{curve.cost.seconds[n - 1] * 1000:.1f}", f"{curve.cost.relative(n):.2f}")
            for row, text in enumerate(texts):
                cell = QLabel(text)
                cell.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.grid.addWidget(cell, row, column)
                self.cells[(row, n)] = cell
        self.table.show()

    def show_failure(self, message: str) -> None:
        self.curve = None
        self.headline.setText(f"Verify cost: not measured ({message})")
        self.table.hide()

    def update_from(self, snapshot: LiveSnapshot) -> bool:
        return False  # the loaded model's curve: the chat's stats do not move it

    def set_palette(self, palette: theme.Palette) -> None:
        pass  # its labels take the application's palette and style sheet

    def clear(self) -> None:
        pass  # the curve stays until another model's is measured
