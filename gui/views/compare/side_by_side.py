"""The compare window's "Side by side" page: the settings area, the legend, one live pane per run of the comparison
(plain decoding first) and the results (summary table and diff).

It owns its widgets and panes and renders the ComparisonSession it is given (gui.sessions.compare); the settings
area's and the results' asks reach the window by their signals. It runs nothing.
May touch: QtWidgets, gui.theme, the compare parts (RunPane), the settings area, the results, the chat's legend.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QSplitter, QVBoxLayout, QWidget

from gui import theme
from gui.views.chat.transcript import LegendBar
from gui.views.compare.parts import RunPane
from gui.views.compare.results import ResultsPane, run_state_text
from gui.views.compare.settings_area import SettingsArea


class SideBySidePage(QWidget):
    """Settings, the runs' panes side by side, and their summary."""

    def __init__(self, palette: theme.Palette, parent=None) -> None:
        super().__init__(parent)
        self.panes: list[RunPane] = []
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.setSpacing(6)
        self.settings = SettingsArea()
        layout.addWidget(self.settings)
        self.legend = LegendBar(palette)
        self.legend.show_rejected_toggled.connect(self.set_show_rejected)
        layout.addWidget(self.legend)
        splitter = QSplitter(Qt.Orientation.Vertical)
        self.pane_splitter = QSplitter(Qt.Orientation.Horizontal)
        self.pane_splitter.setChildrenCollapsible(False)
        splitter.addWidget(self.pane_splitter)
        self.results = ResultsPane()
        splitter.addWidget(self.results)
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([480, 260])
        layout.addWidget(splitter, 1)

    def build_panes(self, session, palette: theme.Palette) -> None:
        """One pane per run of `session` (a ComparisonSession), in place of the last comparison's."""
        for pane in self.panes:
            pane.setParent(None)
            pane.deleteLater()
        self.panes = []
        for run in session.runs:
            pane = RunPane(run, palette, show_rejected=self.legend.show_rejected.isChecked())
            self.pane_splitter.addWidget(pane)
            self.panes.append(pane)
        self.pane_splitter.setSizes([1000] * len(self.panes))

    def pane(self, index: int) -> RunPane | None:
        return self.panes[index] if index < len(self.panes) else None

    def refresh_running(self) -> None:
        """The running pane's figures (the window's timer)."""
        for pane in self.panes:
            if pane.run.state == "running":
                pane.refresh()

    def update_panes(self, session) -> None:
        """Every pane's state and figures, once a run has ended."""
        rows = {row.label: row for row in session.rows()}
        for pane in self.panes:
            row = rows.get(pane.run.spec.label()) if pane.run.state == "done" else None
            pane.refresh(row)
            pane.set_state(run_state_text(pane.run, row))

    def set_show_rejected(self, show: bool) -> None:
        for pane in self.panes:
            pane.set_show_rejected(show)

    def set_palette(self, palette: theme.Palette) -> None:
        self.legend.set_palette(palette)
        for pane in self.panes:
            pane.set_palette(palette)
