"""The stats strip: tok/s, acceptance, mean accepted length, speed-up (measured and theoretical), efficiency,
and draft vs verify time, and the time-split bar the compare panes use too.

It renders `gui.sessions.session_model.Figures` (from `ChatSession.figures()`, which reads `engine.core.stats`)
and asks for a baseline measurement (`baseline_requested`: its button, or the offer the speed-up card shows
after a speculative reply while no plain speed is known, `Figures.measure_offer_seconds`); it computes no
figure itself. `StatsStrip` is a live panel (gui.views.live.panel.LivePanel).
"""

from __future__ import annotations

from PySide6.QtCore import QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QFontMetrics, QPainter
from PySide6.QtWidgets import QFrame, QGridLayout, QLabel, QPushButton, QSizePolicy, QVBoxLayout, QWidget

from gui import theme
from gui.sessions.session_model import Figures
from gui.views.live.panel import LiveSnapshot

DASH = "—"


def fitting_text(metrics: QFontMetrics, texts: tuple[str, ...], width: int) -> str:
    """The first (longest) of `texts` that fits `width` pixels; else the last, elided ("…": cut where it shows)."""
    text = next((text for text in texts if metrics.horizontalAdvance(text) <= width), None)
    return text if text is not None else metrics.elidedText(texts[-1], Qt.TextElideMode.ElideRight, width)


class FittedLabel(QLabel):
    """A one-line label that shows the longest of its texts that fits its width (a narrow tile: shorter words,
    never a word cut off)."""

    def __init__(self, *texts: str, parent=None) -> None:
        super().__init__(parent)
        self.texts: tuple[str, ...] = texts or ("",)
        self._fit(self.contentsRect().width())

    def set_texts(self, *texts: str) -> None:
        """The words, longest first."""
        if texts != self.texts:
            self.texts = texts or ("",)
            self._fit(self.contentsRect().width())

    def shortest_width(self) -> int:
        return self.fontMetrics().horizontalAdvance(self.texts[-1])

    def resizeEvent(self, event) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._fit(self.contentsRect().width())

    def _fit(self, width: int) -> None:
        text = fitting_text(self.fontMetrics(), self.texts, width)
        if text != self.text():
            self.setText(text)


class StatTile(QFrame):
    """A figure with its caption (the longest of `captions` that fits) and a detail line."""

    def __init__(self, captions: str | tuple[str, ...], tooltip: str, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("stat_tile")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 5, 8, 5)
        layout.setSpacing(0)
        self.caption = FittedLabel(*((captions,) if isinstance(captions, str) else captions))
        self.caption.setObjectName("stat_caption")
        self.value = QLabel(DASH)
        self.value.setObjectName("stat_value")
        font = self.value.font()
        font.setPointSizeF(font.pointSizeF() * 1.35)
        self.value.setFont(font)
        # fixed sizes: a changing figure must not relayout the dock (and repaint the graphs below it), nor
        # raise the window's minimum size (a label's minimum width is its text's: Ignored keeps it ours)
        self.value.setMinimumWidth(self.value.fontMetrics().horizontalAdvance("000.00× "))
        self.value.setFixedHeight(self.value.fontMetrics().height() + 2)
        self.detail = FittedLabel("")
        self.detail.setObjectName("stat_caption")
        for label in (self.caption, self.value, self.detail):
            label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.detail.setFixedHeight(self.detail.fontMetrics().height())
        layout.addWidget(self.caption)
        layout.addWidget(self.value)
        layout.addWidget(self.detail)
        self.setToolTip(tooltip)

    def set(self, value: str, *details: str) -> None:
        """The figure, and its detail in words longest first (a narrow tile shows the longest that fits)."""
        if self.value.text() != value:
            self.value.setText(value)
        details = details or ("",)
        if details != self.detail.texts:
            self.detail.set_texts(*details)
            self.detail.setToolTip(details[0])  # the whole words, where shorter ones show

    def minimum_width(self) -> int:
        """The narrowest the tile gets: its figure and the shortest form of its caption fit."""
        margins = self.layout().contentsMargins()
        return max(self.value.minimumWidth(), self.caption.shortest_width()) + margins.left() + margins.right()

    def caption_width(self) -> int:
        """The width that shows the whole caption (the tiles go three abreast only when each gets it)."""
        margins = self.layout().contentsMargins()
        whole = self.caption.fontMetrics().horizontalAdvance(self.caption.texts[0])
        return max(whole, self.value.minimumWidth()) + margins.left() + margins.right()


class OfferButton(QPushButton):
    """A link in a tile, on its detail line: the longest of its texts that fits the tile's width."""

    def __init__(self, height: int, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("stat_offer")
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.setFixedHeight(height)  # the detail line's: showing it moves nothing
        self.texts: tuple[str, ...] = ("",)

    def set_texts(self, *texts: str) -> None:
        """The words, longest first (the last is shown, elided, where none fits)."""
        self.texts = texts
        self._fit(self.width())

    def resizeEvent(self, event) -> None:  # noqa: N802
        self._fit(event.size().width())
        super().resizeEvent(event)

    def _fit(self, width: int) -> None:
        text = fitting_text(self.fontMetrics(), self.texts, width)
        if text != self.text():
            self.setText(text)


class TimeSplitBar(QWidget):
    """Draft time vs verify time as one two-coloured bar."""

    def __init__(self, palette: theme.Palette, parent=None) -> None:
        super().__init__(parent)
        self._palette = palette
        self.draft_seconds = 0.0
        self.verify_seconds = 0.0
        self.setMinimumHeight(8)
        self.setMaximumHeight(8)

    def set_palette(self, palette: theme.Palette) -> None:
        self._palette = palette
        self.update()

    def set_times(self, draft_seconds: float, verify_seconds: float) -> None:
        if (draft_seconds, verify_seconds) != (self.draft_seconds, self.verify_seconds):
            self.draft_seconds, self.verify_seconds = draft_seconds, verify_seconds
            self.update()

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(120, 8)

    def paintEvent(self, event) -> None:  # noqa: N802
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setPen(Qt.PenStyle.NoPen)
        rect = QRectF(self.rect())
        painter.setBrush(QColor(self._palette.surface_alt))
        painter.drawRoundedRect(rect, 3, 3)
        total = self.draft_seconds + self.verify_seconds
        if total > 0:
            draft_width = rect.width() * self.draft_seconds / total
            painter.setBrush(QColor(self._palette.series_draft_time))
            painter.drawRoundedRect(QRectF(rect.x(), rect.y(), draft_width, rect.height()), 3, 3)
            painter.setBrush(QColor(self._palette.series_verify_time))
            painter.drawRoundedRect(QRectF(rect.x() + draft_width, rect.y(), rect.width() - draft_width,
                                           rect.height()), 3, 3)
        painter.end()


class StatsStrip(QWidget):
    """The figures as tiles that reflow: three columns when the dock is wide, two when it is narrow."""

    baseline_requested = Signal()
    name = "stats"
    stretch = 0

    def __init__(self, palette: theme.Palette, parent=None) -> None:
        super().__init__(parent)
        self._shown_version = -1
        self.grid = grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setSpacing(6)
        self.tok_per_s = StatTile("tok/s", "Committed tokens per second after the first token")
        self.acceptance = StatTile("acceptance", "Accepted drafted tokens / drafted tokens")
        self.mean_length = StatTile(("mean accepted length", "mean length"),
                                    "Mean accepted length: committed tokens per target forward pass (plain "
                                    "decoding: 1.0)")
        self.speedup = StatTile("speed-up", "tok/s of this reply / tok/s of plain decoding with this model "
                                            "(measured this session)")
        self.theoretical = StatTile(("theoretical speed-up", "theoretical"),
                                    "Theoretical speed-up: expected from acceptance, k and the draft/verify cost "
                                    "ratio (Leviathan et al. 2023, eq. 1)")
        self.efficiency = StatTile("efficiency", "Measured speed-up / theoretical speed-up")
        self.times = StatTile("draft vs verify time", "Seconds spent drafting (orange) and verifying (blue)")
        self.time_bar = TimeSplitBar(palette)
        self.times.layout().addWidget(self.time_bar)
        self.tiles = (self.tok_per_s, self.acceptance, self.mean_length, self.speedup, self.theoretical,
                      self.efficiency)
        self.measure = QPushButton("Measure plain speed")
        self.measure.setToolTip("Run the last message again with plain decoding (hidden) to measure the "
                                "reference tok/s for the speed-up")
        self.measure.clicked.connect(self.baseline_requested)
        # after a speculative reply with no plain speed for this model: the measurement, offered in the card
        self.offer = OfferButton(self.speedup.detail.maximumHeight())
        self.offer.clicked.connect(self.baseline_requested)
        self.offer.hide()
        self.speedup.layout().addWidget(self.offer)
        self.columns = 0
        self._tile_width = max(tile.minimum_width() for tile in self.tiles)
        self._wide_tile_width = max(tile.caption_width() for tile in self.tiles)
        # two tiles abreast, and the time split under them (it spans two columns)
        self.setMinimumWidth(max(2 * self._tile_width + grid.spacing(), self.times.minimum_width()))
        self._reflow(3)

    def _reflow(self, columns: int) -> None:
        """Lay the tiles out in `columns` columns (2 or 3); the time split and the button fill the last row."""
        if columns == self.columns:
            return
        self.columns = columns
        for widget in (*self.tiles, self.times, self.measure):
            self.grid.removeWidget(widget)
        for i, tile in enumerate(self.tiles):
            self.grid.addWidget(tile, i // columns, i % columns)
        last = (len(self.tiles) + columns - 1) // columns
        self.grid.addWidget(self.times, last, 0, 1, 2)
        if columns == 3:
            self.grid.addWidget(self.measure, last, 2)
        else:
            self.grid.addWidget(self.measure, last + 1, 0, 1, 2)
        for column in range(3):
            self.grid.setColumnStretch(column, 1 if column < columns else 0)

    def resizeEvent(self, event) -> None:  # noqa: N802
        spacing = self.grid.spacing()
        column = max(self._wide_tile_width, self.measure.minimumSizeHint().width())  # the button has a column too
        self._reflow(3 if event.size().width() >= 3 * column + 2 * spacing else 2)
        super().resizeEvent(event)

    def set_palette(self, palette: theme.Palette) -> None:
        self.time_bar.set_palette(palette)

    def set_measure_enabled(self, enabled: bool) -> None:
        self.measure.setEnabled(enabled)
        self.offer.setEnabled(enabled)

    def show_baseline(self, described: str | None) -> None:
        """The plain speed every speed-up uses (`Baseline.describe()`), or None: not measured yet."""
        self.speedup.setToolTip(
            "tok/s of this reply / tok/s of plain decoding of this model on this device, in this dtype: "
            + (described if described is not None else "not measured yet")
            + " (a plain reply is the reference itself: no figure)")
        self.measure.setText("Measure plain speed again" if described is not None else "Measure plain speed")
        self.measure.setToolTip((f"Plain speed of this model: {described}; every speed-up uses it. "
                                 if described is not None else "")
                                + "Run the last message again with plain decoding (hidden) to measure it.")
        if described is not None:
            self.show_offer(None)  # measured (or known for the model just loaded): nothing to offer

    def show_offer(self, seconds: int | None) -> None:
        """The speed-up card offers the plain-speed measurement (≈ `seconds`) in place of "not measured yet";
        None: no offer."""
        if seconds is not None:
            self.offer.set_texts(f"Measure plain speed (≈ {seconds} s)", f"Measure (≈ {seconds} s)",
                                 f"Measure ≈ {seconds} s", "Measure")
            self.offer.setToolTip(f"Run the last message again with plain decoding (hidden, about {seconds} s) "
                                  "to measure this model's plain speed; every speed-up uses it.")
        self.speedup.detail.setVisible(seconds is None)
        self.offer.setVisible(seconds is not None)

    def update_from(self, snapshot: LiveSnapshot) -> bool:
        """The snapshot's figures (on a tick, only when they moved)."""
        if not snapshot.tick or snapshot.version != self._shown_version:
            self._shown_version = snapshot.version
            self.show_figures(snapshot.figures)
        return False

    def clear(self) -> None:
        self._shown_version = -1

    def show_figures(self, figures: Figures) -> None:
        self.tok_per_s.set(f"{figures.tok_per_s:.1f}" if figures.committed_tokens > 1 else DASH,
                           f"{figures.committed_tokens} tokens" if figures.committed_tokens else "")
        self.acceptance.set(DASH if figures.acceptance_rate is None else f"{figures.acceptance_rate:.0%}",
                            *(drafter_words(figures.by_drafter) if figures.by_drafter else
                              ("",) if figures.speculative or figures.acceptance_rate is not None else
                              ("no drafting",)))
        self.mean_length.set(f"{figures.mean_accepted_length:.2f}" if figures.committed_tokens else DASH,
                             "tokens / pass")
        if figures.speedup is not None:
            plain = f"{figures.baseline_tok_per_s:.1f}"
            self.speedup.set(f"{figures.speedup:.2f}×", f"plain {plain} tok/s", f"vs {plain} tok/s", f"vs {plain}/s")
        elif figures.baseline_tok_per_s is None:
            self.speedup.set(DASH, "plain speed not measured yet", "not measured yet", "not measured")
        else:
            self.speedup.set(DASH)
        self.show_offer(figures.measure_offer_seconds)
        self.theoretical.set(DASH if figures.theoretical_speedup is None else f"{figures.theoretical_speedup:.2f}×")
        self.efficiency.set(DASH if figures.efficiency is None else f"{figures.efficiency:.0%}")
        total = figures.draft_seconds + figures.verify_seconds
        self.times.set(f"{seconds_text(figures.draft_seconds)} / {seconds_text(figures.verify_seconds)}",
                       *((f"drafting {figures.draft_seconds / total:.0%} of the time",
                          f"drafting {figures.draft_seconds / total:.0%}") if total > 0 else ()))
        self.time_bar.set_times(figures.draft_seconds, figures.verify_seconds)


def drafter_words(by_drafter: tuple) -> tuple[str, str]:
    """A combined method's acceptance per drafter, named (then, where that is too long, the rates in the same
    order: the tooltip names them)."""
    return (" · ".join(f"{name} {rate:.0%}" for name, _drafted, _accepted, rate in by_drafter),
            " · ".join(f"{rate:.0%}" for _name, _drafted, _accepted, rate in by_drafter))


def seconds_text(value: float) -> str:
    if value < 1.0:
        return f"{value * 1000:.0f} ms" if value >= 0.0005 or value == 0 else f"{value * 1000:.1f} ms"
    return f"{value:.2f} s"
