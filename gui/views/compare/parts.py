"""The compare window's pieces: one setting's fields (SettingRow), one run's live pane (RunPane) and the k sweep
graph (SweepPlot), with the words the table and panes share.

They render what gui.sessions.compare holds and emit what the user asked; no state of their own.

May touch: pyqtgraph, gui.theme, engine.core.config and the method registry (read), engine.measure.compare's rows and sweep summaries
(read), the chat's transcript view and stats pieces.
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (QComboBox, QFrame, QHBoxLayout, QLabel, QLineEdit, QSpinBox, QSplitter, QToolButton,
                               QVBoxLayout, QWidget)

from engine.measure.baselines import baseline_backend, plain_decoding_words
from engine.measure.compare import ComparisonRow, SweepSummary
from engine.core.config import BACKENDS, MAX_K, REMOTE_PREFIX, SpecConfig, parse_spec
from engine.core.errors import ConfigError
from engine.core.methods import all_params, method_spec, speculative_methods
from gui import theme
from gui.views.chat.controls import add_method_items
from gui.views.chat.params import changed_signal, param_widget, read_param, write_param
from gui.views.live.stats import DASH, TimeSplitBar, seconds_text
from gui.views.live.timeline import RoundTimeline, share_scale
from gui.views.chat.transcript import TranscriptView

MAX_SWEEP_K = 16
PANE_TIMELINE_HEIGHT = 72  # a pane's round timeline (the chat's live dock draws it taller)


def _pen(colour: str, width: float = 2.0, style=Qt.PenStyle.SolidLine):
    return pg.mkPen(QColor(colour), width=width, style=style)


def times_text(row: ComparisonRow) -> str:
    total = row.draft_seconds + row.verify_seconds
    share = f" ({row.draft_seconds / total:.0%} drafting)" if total > 0 else ""
    return f"{seconds_text(row.draft_seconds)} / {seconds_text(row.verify_seconds)}{share}"


def identical_text(row: ComparisonRow) -> str:
    """The "identical to plain" cell: identical, a near-tie at token N (margin, discrepancy, the two tokens),
    a MISMATCH, or a difference not diagnosed; sampled rows are not compared."""
    if row.spec.remote_url is not None:
        return "— (the server's tokens: not compared)"
    if row.identical_to_plain is None:
        return "— (sampling: not compared)" if row.equality == "sampled" else f"— ({row.equality})"
    if row.identical_to_plain:
        return "✓ identical"
    if row.divergence is not None:
        return row.divergence.short()
    return f"✗ differs at token {row.first_difference}"


def row_title(row: ComparisonRow, several: bool = False) -> str:
    """The table's first cell: plain decoding (on which backend, where `several` ran), the setting's label, or
    a server's, with where its figures came from (the server's own counts, or measured here)."""
    if row.spec.remote_url is not None:
        return f"{row.label} (figures: {row.figures_from})"
    if row.is_baseline:
        return plain_decoding_words(row.baseline) if several else "plain decoding"
    return row.label


# ------------------------------------------------------------------ one setting's fields

class SettingRow(QWidget):
    """Method, draft model, k and the method's own parameters (one control each) of one setting, or a server's model (backend "on a server":
    its URL, `http://HOST:PORT` or `remote:url=…`, run as the server was started, beside the local runs)."""

    changed = Signal()
    remove_requested = Signal(object)

    def __init__(self, spec: SpecConfig | None = None, removable: bool = True, max_k: int = MAX_K,
                 parent=None) -> None:
        super().__init__(parent)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(6)
        self.method = QComboBox()
        add_method_items(self.method, speculative_methods())
        self.draft = QComboBox()
        self.draft.setEditable(True)
        self.draft.addItem("default")
        self.draft.setToolTip("The draft model (draft-model only): it must share the target's tokenizer")
        self.draft.setMinimumWidth(90)
        self.k = QSpinBox()
        self.k.setRange(1, max_k)
        self.k.setValue(4)
        self.k.setPrefix("k = ")
        self.k.setToolTip("Tokens drafted per round")
        self.param_controls = {param.name: param_widget(param, compact=True) for param in all_params()}
        self.backend = QComboBox()
        self.backend.setObjectName("row_backend")
        self.backend.addItem("as loaded", None)
        for name in BACKENDS:
            self.backend.addItem(f"on {name}", name)
        self.backend.addItem("on a server", REMOTE_PREFIX)
        self.url = QLineEdit()
        self.url.setObjectName("row_url")
        self.url.setPlaceholderText("http://127.0.0.1:8080")
        self.url.setToolTip("An OpenAI-compatible server (llama-server, vLLM, SGLang): its model runs as the server "
                            "was started, and its row's counts are the server's own")
        self.backend.setToolTip("The backend this setting runs on: as the target was loaded, or the same model "
                                "loaded on the other backend too (the same method on both, side by side)")
        self.remove = QToolButton()
        self.remove.setText("✕")
        self.remove.setToolTip("Remove this setting")
        self.remove.setVisible(removable)
        self.remove.clicked.connect(lambda: self.remove_requested.emit(self))
        self.method.setMinimumWidth(200)
        layout.addWidget(self.method)
        layout.addWidget(self.draft, 1)
        layout.addWidget(self.k)
        for widget in self.param_controls.values():
            layout.addWidget(widget)
        layout.addWidget(self.backend)
        layout.addWidget(self.url, 1)
        layout.addWidget(self.remove)
        layout.addStretch(0)
        for signal in (self.method.currentIndexChanged, self.k.valueChanged,
                       *(changed_signal(w) for w in self.param_controls.values()), self.draft.currentTextChanged, self.backend.currentIndexChanged, self.url.textChanged):
            signal.connect(self._changed)
        if spec is not None:
            self.set_spec(spec)
        self._refresh_enabled()

    def spec(self) -> SpecConfig:
        """ConfigError when the row is on a server whose URL is not a remote:url=http(s)://HOST:PORT."""
        if self.on_server:
            text = self.url.text().strip()
            return parse_spec(text if text.startswith(REMOTE_PREFIX) else f"{REMOTE_PREFIX}url={text}")
        method = method_spec(self.method.currentData())
        return SpecConfig(method=method.name, k=self.k.value(),
                          draft=(self.draft.currentText().strip() or None) if method.needs_draft else None,
                          params={p.name: read_param(p, self.param_controls[p.name]) for p in method.params},
                          backend=self.backend.currentData())

    @property
    def on_server(self) -> bool:
        return self.backend.currentData() == REMOTE_PREFIX

    def set_spec(self, spec: SpecConfig) -> None:
        if spec.remote_url is not None:
            self.url.setText(spec.remote_url)
            self.backend.setCurrentIndex(self.backend.findData(REMOTE_PREFIX))
            self._refresh_enabled()
            return
        index = self.method.findData(spec.method)
        if index < 0:
            raise ConfigError(f"a compared setting needs a speculation method, got {spec.method!r}")
        self.method.setCurrentIndex(index)
        if spec.draft:
            if self.draft.findText(spec.draft) < 0:
                self.draft.insertItem(0, spec.draft)
            self.draft.setCurrentText(spec.draft)
        self.k.setValue(min(spec.k, self.k.maximum()))
        for param in spec.info.params:
            write_param(param, self.param_controls[param.name], spec.param(param.name))
        self.backend.setCurrentIndex(max(0, self.backend.findData(spec.backend)))
        self._refresh_enabled()

    def _changed(self, *_args) -> None:
        self._refresh_enabled()
        self.changed.emit()

    def _refresh_enabled(self) -> None:
        method = method_spec(self.method.currentData())
        local = not self.on_server
        self.method.setEnabled(local)
        self.k.setVisible(local)
        self.draft.setVisible(local and method.needs_draft)
        for name, widget in self.param_controls.items():
            widget.setVisible(local and method.param(name) is not None)
        self.url.setVisible(not local)


# ------------------------------------------------------------------ one run's pane

class RunPane(QFrame):
    """One run's live coloured stream (the chat's transcript view), its figures and its round timeline (the chat's
    own, on one scale with the other panes', so plain decoding's one-token rounds compare with each setting's)."""

    def __init__(self, run, palette: theme.Palette, parent=None) -> None:
        super().__init__(parent)
        self.run = run
        self.setObjectName("compare_pane")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.setSpacing(3)
        self.title = QLabel(run.label)
        self.title.setObjectName("pane_title")
        self.title.setToolTip(run.spec.label())
        self.state = QLabel("waiting")
        self.state.setObjectName("dim")
        self.transcript = TranscriptView(self._token, palette)
        self.transcript.setMinimumHeight(140)
        self.figures = QLabel(DASH)
        self.figures.setObjectName("dim")
        self.time_bar = TimeSplitBar(palette)
        self.time_bar.setToolTip("Draft time (orange) vs verify time (blue)")
        self.timeline = RoundTimeline(palette, canvas_height=PANE_TIMELINE_HEIGHT)
        layout.addWidget(self.title)
        layout.addWidget(self.state)
        layout.addWidget(self.transcript, 1)
        layout.addWidget(self.figures)
        layout.addWidget(self.time_bar)
        layout.addWidget(self.timeline)
        self._shown_version = -1

    def _token(self, serial: int):
        tokens = self.run.session.tokens
        return tokens[serial] if 0 <= serial < len(tokens) else None

    def set_palette(self, palette: theme.Palette) -> None:
        self.transcript.set_palette(palette)
        self.time_bar.set_palette(palette)
        self.timeline.set_palette(palette)
        self.rerender()

    def rerender(self) -> None:
        session = self.run.session
        self.transcript.render_turns(session.turns, session.current)

    def refresh(self, row: ComparisonRow | None = None) -> None:
        """The figures line (from the timer while running, and once at the end with the table's row)."""
        live = self.run.session.live
        if row is None and live.version == self._shown_version:
            return
        self._shown_version = live.version
        stats = live.snapshot()
        parts = [f"{stats.committed_tokens} tok"]
        if stats.committed_tokens > 1:
            parts.append(f"{stats.tok_per_s:.1f} tok/s")
        if row is not None and row.speedup is not None and not row.is_baseline:
            parts.append(f"{row.speedup:.2f}× plain on {baseline_backend(row.baseline)}")
        if stats.drafted_tokens:
            parts.append(f"α {stats.acceptance_rate:.0%}")
        self.figures.setText(" · ".join(parts))
        self.figures.setToolTip(f"{stats.mean_accepted_length:.2f} tokens per target pass · drafting "
                                f"{seconds_text(stats.draft_seconds)}, verifying {seconds_text(stats.verify_seconds)}")
        self.time_bar.set_times(stats.draft_seconds, stats.verify_seconds)
        self.timeline.show_rounds(live.rounds)
        share_scale(pane.timeline for pane in self._lanes())

    def _lanes(self) -> list["RunPane"]:
        """This comparison's panes (the splitter's), this one included."""
        parent = self.parentWidget()
        siblings = [parent.widget(i) for i in range(parent.count())] if isinstance(parent, QSplitter) else []
        return [pane for pane in siblings if isinstance(pane, RunPane)] or [self]

    def set_state(self, text: str) -> None:
        self.state.setText(text)


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
