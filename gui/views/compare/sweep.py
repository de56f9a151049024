"""The compare window's k sweep page: the method to sweep and the largest k, Run and Stop, the graph of measured
speed-up against k with the theoretical curve (SweepPlot), the table of each k and the verdict with "Use this k in
the chat".

It owns its widgets, draws the SweepSummary it is given (engine.measure.compare computes every figure) and tells
the window what was asked by signals; it runs nothing.
May touch: QtWidgets, pyqtgraph, gui.theme, engine configs, the method registry and sweep summaries (read), the
compare parts (SettingRow).
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (QAbstractItemView, QHBoxLayout, QHeaderView, QLabel, QPushButton, QSpinBox,
                               QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget)

from engine.core.config import SpecConfig
from engine.core.methods import method_spec
from engine.measure.compare import SweepSummary
from engine.measure.fastest import sweep_methods
from gui import theme
from gui.views.compare.parts import SettingRow

MAX_SWEEP_K = 16
NO_SWEEP_YET = "Run a sweep to find the fastest k for this prompt."
SWEEP_NOTE = ("The theoretical curve uses α (acceptance) and c (draft cost per token / verify cost per pass) pooled "
              "over the sweep (Leviathan et al. 2023, eq. 1). Each k runs once here, so a close best k may be noise: "
              "Tools ▸ Which setting is fastest here? repeats every setting and gives the median and its range.")


def _pen(colour: str, width: float = 2.0, style=Qt.PenStyle.SolidLine):
    return pg.mkPen(QColor(colour), width=width, style=style)


class SweepPage(QWidget):
    """The "k sweep" tab: plain decoding once, then one method for k = 1…K, drawn as a graph and a table."""

    run_requested = Signal()
    stop_requested = Signal()
    apply_requested = Signal()  # use the best k in the chat
    export_requested = Signal(str)  # sweep-csv | sweep-json | sweep-png

    def __init__(self, palette: theme.Palette, parent=None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.setSpacing(6)
        layout.addLayout(self._method_row())
        body = QHBoxLayout()
        self.plot = SweepPlot(palette)
        body.addWidget(self.plot, 3)
        body.addWidget(self._side(), 2)
        layout.addLayout(body, 1)

    def _method_row(self) -> QHBoxLayout:
        row = QHBoxLayout()
        row.setSpacing(6)
        row.addWidget(QLabel("Method"))
        self.setting = SettingRow(SpecConfig(method=sweep_methods()[0].name, k=4), removable=False, max_k=MAX_SWEEP_K)
        self.setting.k.hide()  # the sweep sets k
        row.addWidget(self.setting, 2)
        row.addWidget(QLabel("k from 1 to"))
        self.max_k = QSpinBox()
        self.max_k.setRange(2, MAX_SWEEP_K)
        self.max_k.setValue(8)
        self.max_k.setToolTip(f"Runs plain decoding once, then the method for k = 1…K (K ≤ {MAX_SWEEP_K})")
        row.addWidget(self.max_k)
        self.run_button = QPushButton("Run sweep")
        self.run_button.setObjectName("send_button")
        self.run_button.clicked.connect(self.run_requested)
        self.stop_button = QPushButton("Stop")
        self.stop_button.clicked.connect(self.stop_requested)
        row.addWidget(self.run_button)
        row.addWidget(self.stop_button)
        row.addStretch(1)
        return row

    def _side(self) -> QWidget:
        """The verdict, "Use this k", the table of each k, the note on the theory and the exports."""
        side = QVBoxLayout()
        self.best_label = QLabel(NO_SWEEP_YET)
        self.best_label.setObjectName("pane_title")
        self.best_label.setWordWrap(True)
        side.addWidget(self.best_label)
        self.apply_button = QPushButton("Use this k in the chat")
        self.apply_button.setToolTip("Set the chat's method and k to the best setting found")
        self.apply_button.clicked.connect(self.apply_requested)
        side.addWidget(self.apply_button)
        self.table = QTableWidget(0, 5)
        self.table.setHorizontalHeaderLabels(("k", "speed-up", "theory", "acceptance", "cost ratio c"))
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)  # no header is clipped
        header.setStretchLastSection(True)
        self.table.setMinimumWidth(header.length() + 4)
        side.addWidget(self.table, 1)
        self.note = QLabel(SWEEP_NOTE)
        self.note.setObjectName("dim")
        self.note.setWordWrap(True)
        side.addWidget(self.note)
        exports = QHBoxLayout()
        for text, kind in (("CSV…", "sweep-csv"), ("JSON…", "sweep-json"), ("Graph PNG…", "sweep-png")):
            button = QPushButton(text)
            button.clicked.connect(lambda _=False, k=kind: self.export_requested.emit(k))
            exports.addWidget(button)
        side.addLayout(exports)
        holder = QWidget()
        holder.setLayout(side)
        holder.setMaximumWidth(380)
        return holder

    def show_summary(self, summary: SweepSummary | None) -> None:
        """Draw a sweep (from a run, or canned points in tests): graph, table and verdict."""
        self.plot.show_summary(summary)
        show_sweep_table(self.table, summary)
        verdict = sweep_verdict(summary)
        if verdict is not None:
            self.best_label.setText(verdict[0])
            self.apply_button.setText(verdict[1])

    def set_actions(self, idle: bool, has_prompt: bool, can_apply: bool) -> None:
        self.run_button.setEnabled(idle and has_prompt)
        self.stop_button.setEnabled(not idle)
        self.apply_button.setEnabled(can_apply)

    def set_palette(self, palette: theme.Palette) -> None:
        self.plot.set_palette(palette)

    def save_png(self, path) -> bool:
        return self.plot.grab().save(str(path))


# ------------------------------------------------------------------ the k sweep graph

class SweepPlot(pg.PlotWidget):
    """Measured speed-up against k, the theoretical curve from the pooled α and cost ratio, the best k."""

    def __init__(self, palette: theme.Palette, parent=None) -> None:
        super().__init__(parent)
        self.setMenuEnabled(False)
        self.setMouseEnabled(x=False, y=False)
        self.hideButtons()
        self.showGrid(x=False, y=True, alpha=0.25)
        self.setMinimumHeight(240)
        item = self.getPlotItem()
        for name in ("left", "bottom"):
            item.getAxis(name).enableAutoSIPrefix(False)
        item.getAxis("left").setLabel("speed-up over plain decoding (×)")
        item.getAxis("bottom").setLabel("k (tokens drafted per round)")
        self.plain_line = pg.InfiniteLine(pos=1.0, angle=0, movable=False)
        self.addItem(self.plain_line)
        self.theory_curve = self.plot(name="theory (pooled α, c)")
        self.measured_curve = self.plot(name="measured", symbol="o", symbolSize=7)
        self.best_marker = pg.ScatterPlotItem(symbol="star", size=20)
        self.addItem(self.best_marker)
        self.best_label = pg.TextItem(anchor=(0.5, 1.3))
        self.addItem(self.best_label, ignoreBounds=True)
        self.legend = item.addLegend(offset=(-6, -40), labelTextSize="8pt")  # bottom right, below the curves
        self.legend.addItem(self.measured_curve, "measured")
        self.legend.addItem(self.theory_curve, "theory (pooled α, c)")
        self.legend.addItem(self.best_marker, "best k")
        self.set_palette(palette)
        self.show_summary(None)

    def set_palette(self, palette: theme.Palette) -> None:
        self._palette = palette
        self.setBackground(QColor(palette.surface))
        item = self.getPlotItem()
        for name in ("left", "bottom"):
            axis = item.getAxis(name)
            axis.setPen(_pen(palette.border, 1))
            axis.setTextPen(QColor(palette.text_dim))
            axis.label.setDefaultTextColor(QColor(palette.text_dim))
        item.setTitle("k sweep", color=palette.text, size="10pt")
        self.plain_line.setPen(_pen(palette.series_baseline, 1.2, Qt.PenStyle.DashLine))
        self.theory_curve.setPen(_pen(palette.series_rolling, 2, Qt.PenStyle.DashLine))
        self.measured_curve.setPen(_pen(palette.series_speed, 2.5))
        self.measured_curve.setSymbolBrush(QColor(palette.series_speed))
        self.measured_curve.setSymbolPen(_pen(palette.series_speed, 1))
        self.best_marker.setBrush(QColor(palette.series_draft_time))
        self.best_marker.setPen(_pen(palette.text, 1))
        self.best_label.setColor(QColor(palette.text))
        self.legend.setLabelTextColor(QColor(palette.text_dim))
        self.legend.setBrush(pg.mkBrush(QColor(palette.surface)))

    def show_summary(self, summary: SweepSummary | None) -> None:
        points = list(summary.points) if summary else []
        ks = [p.k for p in points]
        self.measured_curve.setData(ks, [p.speedup for p in points])
        self.theory_curve.setData(ks, list(summary.theory) if summary else [])
        best = summary.best if summary else None
        if best is not None:
            self.best_marker.setData([best.k], [best.speedup])
            self.best_label.setText(f"best k = {best.k} ({best.speedup:.2f}×)")
            last = max(ks)
            self.best_label.setAnchor((1.0 if best.k == last and len(ks) > 1 else 0.0 if best.k == min(ks) else 0.5,
                                       1.3))
            self.best_label.setPos(best.k, best.speedup)
            self.best_label.show()
        else:
            self.best_marker.setData([], [])
            self.best_label.hide()
        top = max([1.2, *(p.speedup for p in points), *(summary.theory if summary else ())]) * 1.15
        self.setYRange(0, top, padding=0.02)
        self.setXRange(0.5, max(ks or [8]) + 0.5, padding=0.02)
        self.getPlotItem().getAxis("bottom").setTicks([[(k, str(k)) for k in (ks or range(1, 9))]])

    def marked_k(self) -> int | None:
        """The k the best-k marker sits on (tests)."""
        x, _ = self.best_marker.getData()
        return int(round(float(x[0]))) if x is not None and len(x) else None


def show_sweep_table(table: QTableWidget, summary: SweepSummary | None) -> None:
    """One row per k (the best one starred and bold): speed-up, theory, acceptance, cost ratio."""
    points = list(summary.points) if summary else []
    table.setRowCount(len(points))
    for r, (point, theory) in enumerate(zip(points, summary.theory if summary else ())):
        best = summary.best is not None and point.k == summary.best.k
        for c, text in enumerate((("★ " if best else "") + str(point.k), f"{point.speedup:.2f}×",
                                  f"{theory:.2f}×", f"{point.acceptance_rate:.0%}", f"{point.cost_ratio:.3f}")):
            item = QTableWidgetItem(text)
            item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            if best:
                font = item.font()
                font.setBold(True)
                item.setFont(font)
            table.setItem(r, c, item)


def sweep_verdict(summary: SweepSummary | None) -> tuple[str, str] | None:
    """The best-k sentence and the apply button's text; None when a summary with points has no best k
    (the texts stay as they were)."""
    best = summary.best if summary else None
    if best is not None:
        label = method_spec(summary.method).label
        verdict = "faster than plain decoding" if best.speedup > 1.0 else "no k beat plain decoding on this prompt"
        return (f"Best k for {label}: {best.k} — {best.speedup:.2f}× ({verdict}). "
                f"Pooled α = {summary.alpha:.0%}, c = {summary.cost_ratio:.3f}.", f"Use k = {best.k} in the chat")
    if summary is None or not summary.points:
        return NO_SWEEP_YET, "Use this k in the chat"
    return None
