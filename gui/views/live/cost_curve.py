"""The verify-cost curve: what one target pass over n tokens costs against one on this machine, as the engine
measured it (engine.measure.verify_cost, brought by gui.worker.CostCurve), so a user sees why speculation pays or doesn't:
"verifying 4 tokens costs 3.2× one on this machine". A headline and a small table (n, ms, × one).

Renders a CostCurve it is given (`show_curve`, from the worker's measurement); computes no figure itself
(VerifyCost.relative is the engine's). A live panel (gui.views.live.panel.LivePanel) whose figures belong to the
loaded model, not to the chat: a snapshot or a new chat leaves them as they are.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QGridLayout, QLabel, QSizePolicy, QVBoxLayout, QWidget

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
    """Headline, then a row of n, the ms of a pass over n tokens and its cost against one; in a dock too narrow
    for that row, a column each (n, ms, × one) instead: the table never widens the dock."""

    name = "cost"
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
        self.table.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.grid = QGridLayout(self.table)
        self.grid.setContentsMargins(0, 0, 0, 0)
        self.grid.setHorizontalSpacing(8)
        self.grid.setVerticalSpacing(0)
        self.captions = [QLabel(caption) for caption in ("tokens", "ms", "× one")]
        for label in self.captions:
            label.setObjectName("stat_caption")
        self.cells: dict[tuple[int, int], QLabel] = {}  # (row of the wide table, n) -> its figure
        self.shown: list[int] = []
        self.transposed: bool | None = None  # None: not laid out yet
        self.wide_width = 0  # what the table needs laid out as rows
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
        self.shown = [n for n in SHOWN_N if n <= curve.cost.n_max]
        for n in self.shown:
            texts = (str(n), f"{curve.cost.seconds[n - 1] * 1000:.1f}", f"{curve.cost.relative(n):.2f}")
            for row, text in enumerate(texts):
                cell = QLabel(text)
                cell.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.cells[(row, n)] = cell
        self.wide_width = (max(label.sizeHint().width() for label in self.captions) + sum(
            max(self.cells[(row, n)].sizeHint().width() for row in range(3)) for n in self.shown)
            + self.grid.horizontalSpacing() * len(self.shown))
        self.transposed = None
        self._arrange(self.width() < self.wide_width)
        self.table.show()

    def _arrange(self, transposed: bool) -> None:
        """The table as rows (tokens, ms, × one; a column per n) or, `transposed`, as columns (a row per n)."""
        if transposed == self.transposed:
            return
        self.transposed = transposed
        for label in (*self.captions, *self.cells.values()):
            self.grid.removeWidget(label)
        for row, label in enumerate(self.captions):
            self.grid.addWidget(label, *((0, row) if transposed else (row, 0)))
        for (row, n), cell in self.cells.items():
            column = self.shown.index(n) + 1
            self.grid.addWidget(cell, *((column, row) if transposed else (row, column)))
        for column in range(max(self.grid.columnCount(), len(self.shown) + 2)):  # packed to the left
            self.grid.setColumnStretch(column, int(column == (3 if transposed else len(self.shown) + 1)))

    def resizeEvent(self, event) -> None:  # noqa: N802
        if self.cells:
            self._arrange(event.size().width() < self.wide_width)
        super().resizeEvent(event)

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
