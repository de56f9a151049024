"""Live graphs (pyqtgraph): acceptance rate, tokens/s, per-position acceptance, accept-length histogram.

They never redraw per token: the live dock calls `update_from()` from a timer (≤ 20 Hz) and every item is
updated in place with `setData` / `setOpts`. On a tick one graph is redrawn (round robin), so no tick holds the
event loop for long; `LivePlots` is a live panel (gui.views.live.panel.LivePanel).

May touch: pyqtgraph, gui.theme, and reads gui.sessions.session_model.LiveStats; no state of its own beyond its
items and which graph drew which version.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QFont
from PySide6.QtWidgets import QGraphicsItem, QGridLayout, QWidget

from engine.core.methods import plain_method
from gui import theme
from gui.sessions.session_model import LiveStats
from gui.views.live.panel import LiveSnapshot


PANELS = ("acceptance", "speed", "positions", "histogram")


def _pen(colour: str, width: float = 2.0, style=Qt.PenStyle.SolidLine):
    return pg.mkPen(QColor(colour), width=width, style=style)


class LivePlots(QWidget):
    name = "plots"
    stretch = 1

    def __init__(self, palette: theme.Palette, parent=None) -> None:
        super().__init__(parent)
        self._drawn = dict.fromkeys(PANELS, -1)  # graph -> the live stats version it shows
        self._next_panel = 0  # where the round robin of the ticks goes on
        self._ticks_for: int | None = None  # the k the bar graphs' ticks were laid out for
        self._titles: dict[int, str] = {}  # id(plot) -> its title (set again with each palette)
        pg.setConfigOptions(antialias=True)
        layout = QGridLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(6)

        self.acceptance = self._plot("Acceptance rate", "%", "tokens")
        self._ranges: dict[int, tuple] = {}
        self._set_range(self.acceptance, x=(0, 10), y=(0, 100))
        self._percent_ticks(self.acceptance)
        self.acceptance_rolling_curve = self.acceptance.plot(name="rolling (16 rounds)")
        self.acceptance_cumulative_curve = self.acceptance.plot(name="cumulative")

        self.speed = self._plot("Tokens / s", "tok/s", "seconds")
        self.speed_rolling_curve = self.speed.plot(name="rolling (2 s)")
        self.speed_cumulative_curve = self.speed.plot(name="average")
        self.baseline_line = pg.InfiniteLine(angle=0, movable=False)
        # under the line, where the range always has room (above it the range ends 10 % higher: clipped)
        self.baseline_label = pg.TextItem(anchor=(0, 0))
        self.speed.addItem(self.baseline_line)
        self.speed.addItem(self.baseline_label, ignoreBounds=True)
        self.baseline_line.hide()
        self.baseline_label.hide()
        self.baseline_value: float | None = None

        self.positions = self._plot("Acceptance by draft position", "%", "position in draft")
        self._set_range(self.positions, x=(0.4, 4.6), y=(0, 100))
        self._percent_ticks(self.positions)
        self.position_bars = pg.BarGraphItem(x=[], height=[], width=0.7)
        self.positions.addItem(self.position_bars)

        self.histogram = self._plot("Accepted tokens per round", "rounds", "accepted drafted tokens")
        self.histogram_bars = pg.BarGraphItem(x=[], height=[], width=0.7)
        self.histogram.addItem(self.histogram_bars)

        layout.addWidget(self.acceptance, 0, 0)
        layout.addWidget(self.speed, 1, 0)
        layout.addWidget(self.positions, 2, 0)
        layout.addWidget(self.histogram, 3, 0)
        self.set_palette(palette)
        self.clear()

    def _plot(self, title: str, left: str, bottom: str) -> pg.PlotWidget:
        plot = pg.PlotWidget()
        plot.setMenuEnabled(False)
        plot.setMouseEnabled(x=False, y=False)
        plot.hideButtons()
        plot.showGrid(x=False, y=True, alpha=0.25)
        plot.setMinimumHeight(120)
        plot.disableAutoRange()
        for name in ("left", "bottom"):
            axis = plot.getPlotItem().getAxis(name)
            axis.enableAutoSIPrefix(False)
            # keep the painted axis as a pixmap: repainting a curve then costs a blit, not a Python paint()
            axis.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
            axis.setStyle(hideOverlappingLabels=False)  # keep the 0 and the top label at the ends
        self._titles[id(plot)] = title
        plot.getPlotItem().getAxis("left").setLabel(left)
        plot.getPlotItem().getAxis("bottom").setLabel(bottom)
        return plot

    @staticmethod
    def _percent_ticks(plot: pg.PlotWidget) -> None:
        plot.getPlotItem().getAxis("left").setTicks([[(v, str(v)) for v in (0, 25, 50, 75, 100)]])

    def set_palette(self, palette: theme.Palette) -> None:
        self._palette = palette
        font = QFont()
        font.setPointSizeF(8.0)
        for plot in (self.acceptance, self.speed, self.positions, self.histogram):
            plot.setBackground(QColor(palette.surface))
            item = plot.getPlotItem()
            item.setTitle(self._titles[id(plot)], color=palette.text, size="9pt")
            for name in ("left", "bottom"):
                axis = item.getAxis(name)
                axis.setPen(_pen(palette.border, 1))
                axis.setTextPen(QColor(palette.text_dim))
                axis.setTickFont(font)
                axis.label.setDefaultTextColor(QColor(palette.text_dim))
            if item.legend is not None:
                item.legend.setLabelTextColor(QColor(palette.text_dim))
        self.acceptance_rolling_curve.setPen(_pen(palette.series_rolling, 1.5))
        self.acceptance_cumulative_curve.setPen(_pen(palette.series_cumulative, 2.5))
        self.speed_rolling_curve.setPen(_pen(palette.series_speed_rolling, 1.5))
        self.speed_cumulative_curve.setPen(_pen(palette.series_speed, 2.5))
        self.baseline_line.setPen(_pen(palette.series_baseline, 1.5, Qt.PenStyle.DashLine))
        self.baseline_label.setColor(QColor(palette.series_baseline))
        self.position_bars.setOpts(brush=QColor(palette.series_bars), pen=_pen(palette.series_bars, 1))
        self.histogram_bars.setOpts(brush=QColor(palette.series_histogram), pen=_pen(palette.series_histogram, 1))
        self._add_legends()

    def _add_legends(self) -> None:
        for plot, curves in ((self.acceptance, (self.acceptance_rolling_curve, self.acceptance_cumulative_curve)),
                             (self.speed, (self.speed_rolling_curve, self.speed_cumulative_curve))):
            item = plot.getPlotItem()
            if item.legend is None:
                legend = item.addLegend(offset=(-6, 6), labelTextSize="8pt", verSpacing=-6)
                for curve in curves:
                    legend.addItem(curve, curve.name())
            item.legend.setLabelTextColor(QColor(self._palette.text_dim))
            item.legend.setBrush(pg.mkBrush(QColor(self._palette.surface)))

    def clear(self) -> None:
        """Empty graphs; the next snapshot draws every one of them."""
        self._drawn = dict.fromkeys(PANELS, -1)
        k = 0
        for curve in (self.acceptance_rolling_curve, self.acceptance_cumulative_curve,
                      self.speed_rolling_curve, self.speed_cumulative_curve):
            curve.setData([], [])
        self.position_bars.setOpts(x=np.arange(1, k + 1), height=np.zeros(k))
        self.histogram_bars.setOpts(x=np.arange(0, k + 1), height=np.zeros(k + 1))
        self._set_range(self.acceptance, x=(0, 10))
        self._set_range(self.speed, x=(0, 1), y=(0, _nice_ceiling(self.baseline_value or 1) * 1.1))
        self._set_range(self.histogram, y=(0, 5))
        self._set_bar_ranges(k)

    def update_from(self, snapshot: LiveSnapshot) -> bool:
        """Every graph not drawn at this version; on a tick, the next of them only (returns whether more are
        left)."""
        version = snapshot.version
        stale = [p for p in (PANELS[(self._next_panel + i) % len(PANELS)] for i in range(len(PANELS)))
                 if self._drawn[p] != version]
        if snapshot.tick and stale:
            self._next_panel = (PANELS.index(stale[0]) + 1) % len(PANELS)
            stale = stale[:1]
        elif not snapshot.tick:
            stale = list(PANELS)
        for panel in stale:
            self._drawn[panel] = version
        if stale:
            self.draw(snapshot.live, snapshot.baseline_tok_per_s, panels=tuple(stale))
        return any(drawn != version for drawn in self._drawn.values())

    def draw(self, live: LiveStats, baseline_tok_per_s: float | None, panels=PANELS) -> None:
        """Redraw the given panels from the live stats (from the dock's timer, never per round).

        Axis ranges move in 1-2-5 steps rather than with every point, so the axes (the costly part to paint)
        are only redrawn when a range steps up."""
        if "acceptance" in panels:
            rolling, cumulative = _percent(live.acceptance_rolling.data()), _percent(live.acceptance_cumulative.data())
            self.acceptance_rolling_curve.setData(*rolling)
            self.acceptance_cumulative_curve.setData(*cumulative)
            self._set_range(self.acceptance, x=(0, _nice_ceiling(cumulative[0][-1] if cumulative[0] else 10)))
        if "speed" in panels:
            rolling, average = live.speed_rolling.data(), live.speed_cumulative.data()
            self.speed_rolling_curve.setData(*rolling)
            self.speed_cumulative_curve.setData(*average)
            self.set_baseline(baseline_tok_per_s)
            top = max([1.0, baseline_tok_per_s or 0.0, *rolling[1][-200:], *average[1][-200:]])
            x_max = max(rolling[0][-1] if rolling[0] else 0.0, average[0][-1] if average[0] else 0.0, 1.0)
            self._set_range(self.speed, x=(0, _nice_ceiling(x_max)), y=(0, _nice_ceiling(top * 1.1)))
        if "positions" in panels or "histogram" in panels:
            stats = live.snapshot()
            n_positions = max(live.k if live.method != plain_method().name else 0, len(stats.per_position_acceptance))
            if "positions" in panels:
                per_position = list(stats.per_position_acceptance)
                per_position += [0.0] * (n_positions - len(per_position))
                self.position_bars.setOpts(x=np.arange(1, n_positions + 1), height=np.array(per_position) * 100.0)
            if "histogram" in panels:
                histogram = list(stats.accept_length_histogram) or ([0] * (n_positions + 1) if n_positions else [])
                self.histogram_bars.setOpts(x=np.arange(0, len(histogram)), height=np.array(histogram, dtype=float))
                self._set_range(self.histogram, y=(0, _nice_ceiling(max(histogram, default=0) * 1.1 or 5)))
            self._set_bar_ranges(n_positions)

    def set_baseline(self, tok_per_s: float | None) -> None:
        if tok_per_s == self.baseline_value:
            return
        self.baseline_value = tok_per_s
        visible = tok_per_s is not None and tok_per_s > 0
        self.baseline_line.setVisible(visible)
        self.baseline_label.setVisible(visible)
        if visible:
            self.baseline_line.setValue(tok_per_s)
            self.baseline_label.setText(f"plain {tok_per_s:.1f} tok/s")  # short: a narrow plot clips it
            self.baseline_label.setPos(0, tok_per_s)

    def _set_range(self, plot: pg.PlotWidget, x=None, y=None) -> None:
        """Set a plot's ranges, only when they change (a change repaints the axes)."""
        current = self._ranges.get(id(plot), (None, None))
        wanted = (x if x is not None else current[0], y if y is not None else current[1])
        if wanted == current:
            return
        self._ranges[id(plot)] = wanted
        if wanted[0] is not None and wanted[0] != current[0]:
            plot.setXRange(*wanted[0], padding=0.02)
        if wanted[1] is not None and wanted[1] != current[1]:
            plot.setYRange(*wanted[1], padding=0.02)

    def _set_bar_ranges(self, k: int) -> None:
        if k == self._ticks_for:
            return
        self._ticks_for = k
        step = max(1, (k + 1) // 12 + 1) if k > 12 else 1
        self.positions.getPlotItem().getAxis("bottom").setTicks(
            [[(i, str(i)) for i in range(1, k + 1, step)]] if k else None)
        self.histogram.getPlotItem().getAxis("bottom").setTicks(
            [[(i, str(i)) for i in range(0, k + 1, step)]] if k else None)
        if k:
            self._set_range(self.positions, x=(0.4, k + 0.6))
            self._set_range(self.histogram, x=(-0.6, k + 0.6))


def _nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 × 10^n that is ≥ value (axis ranges move in these steps)."""
    if value <= 0:
        return 1.0
    magnitude = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if step * magnitude >= value - 1e-12:
            return step * magnitude
    return 10 * magnitude


def _percent(data: tuple[list[float], list[float]]) -> tuple[list[float], np.ndarray]:
    x, y = data
    return x, np.asarray(y, dtype=float) * 100.0
