"""The round timeline: one bar per round along the reply, in reply order, scrolling with it. Each bar stacks the
round's draft time, the network (a target on a server), the target's verify pass and the rollback after a
rejection (milliseconds, one scale for the panel); under it a small box filled by the share of the drafted tokens
the target accepted, or a grey dot for a plain round (the target's one token, no draft). A server's step
(gui.sessions.rounds.is_server_step: a model on a server, which says when its tokens came and not how long drafting
and verifying took) is one bar of its wall time, from the round before it to its own, and the panel says so in a
line. Hovering a bar highlights its round's tokens
in the transcript and clicking picks it (the round focus, gui.views.main.round_focus); the focus it is shown is
drawn here too.

Bars have a fixed width and the view scrolls sideways, following the newest round while the reply is written
unless the user scrolled back, so a reply of a thousand rounds stays readable; only the visible bars are painted.
The compare window's panes draw the same timeline per run, on one shared scale (`share_scale`), so plain
decoding's one-token rounds and a speculative run's rounds compare lane by lane.

Renders the RoundRecords it is given (gui.sessions.rounds, `LiveStats.rounds`); computes no figure of its own
beyond sums and the scale. A live panel (gui.views.live.panel.LivePanel) that takes part in the round focus (a RoundFocusPanel).

May touch: QtWidgets / QtGui / QtCore, gui.theme, gui.sessions.rounds (read).
"""

from __future__ import annotations

import math

from PySide6.QtCore import QEvent, QPointF, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFont, QPainter, QPen, QPolygonF
from PySide6.QtWidgets import QHBoxLayout, QLabel, QScrollBar, QSizePolicy, QToolTip, QVBoxLayout, QWidget

from gui import theme
from gui.sessions.rounds import is_server_step, step_seconds
from gui.views.live.panel import LiveSnapshot, RoundFocusPanel

BAR_WIDTH = 8  # px of one round's bar
BAR_GAP = 3  # px between two bars
STEP = BAR_WIDTH + BAR_GAP
GUTTER = 40  # px on the left for the scale's labels
PAD = 6  # px around the plot inside the frame
MARK_HEIGHT = 8  # px of the accepted/drafted box under a bar
MARK_GAP = 3  # px between a bar and its box
CANVAS_HEIGHT = 96  # the dock's timeline; the compare panes' is smaller
EMPTY_TEXT = "Rounds appear here as the reply is written"
SERVER_NOTE = "Server steps: the server doesn't split draft and verify time"
SERVER_NOTE_TIP = ("A model on a server: each bar is one of its steps, from the arrival of the step before to its "
                   "own (the server's drafting, verifying and the network between), as the server does not say how "
                   "long drafting and verifying took. Under it, the share of the step's drafted tokens it kept.")
NICE_STEPS = (1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0)


def nice_ceiling(ms: float) -> float:
    """The scale's top: the smallest of 1, 1.5, 2, 3, 4, 5, 6, 8 × 10^n at or above `ms` (> 0)."""
    if ms <= 0 or not math.isfinite(ms):
        return 1.0
    power = 10.0 ** math.floor(math.log10(ms))
    for step in NICE_STEPS:
        if step * power >= ms * (1 - 1e-9):
            return float(f"{step * power:.6g}")
    return float(f"{10 * power:.6g}")


def ms_text(seconds: float) -> str:
    ms = 1000 * seconds
    return f"{ms:.2f} ms" if ms < 1 else f"{ms:.1f} ms" if ms < 100 else f"{ms:.0f} ms"


def scale_label(ms: float) -> str:
    return f"{ms:g} ms" if ms < 1000 else f"{ms / 1000:g} s"


def round_tooltip(record, step: float | None = None) -> str:
    """'round N · drafter · drafted d, accepted a · draft x ms · verify y ms · rollback z ms' (a plain round: its one
    token, and only its verify time; a tree round: 'tree of 12 nodes verified, depth 4, kept 3'). A server's step
    (gui.sessions.rounds.is_server_step) says its wall time, `step` seconds, instead of a draft/verify split."""
    head = f"round {record.index}" + (" (prefill)" if record.index == 0 else "")
    if step is not None and is_server_step(record):
        drafted = (f"drafted {record.n_drafted}, accepted {record.n_accepted}" if record.n_drafted
                   else "one token, no draft")
        return " · ".join((head, "server step", drafted, f"{ms_text(step)} since the step before "
                           "(the server doesn't split draft and verify time)"))
    network = (f"network {ms_text(record.network_seconds)}",) if record.network_seconds else ()
    if not record.n_drafted:
        return " · ".join((head, "plain decoding", "one token, no draft", *network,
                           f"verify {ms_text(record.verify_seconds)}"))
    drafted = (f"tree of {record.n_drafted} nodes verified, depth {record.depth}, kept {record.n_accepted}"
               if record.is_tree else f"drafted {record.n_drafted}, accepted {record.n_accepted}")
    return " · ".join((head, record.drafter, drafted, f"draft {ms_text(record.draft_seconds)}", *network,
                       f"verify {ms_text(record.verify_seconds)}", f"rollback {ms_text(record.rollback_seconds)}"))


def share_scale(timelines) -> None:
    """One millisecond scale for all `timelines` (the compare window's lanes): the tallest round of any sets it."""
    timelines = list(timelines)
    top = max((t.own_top_seconds for t in timelines), default=0.0)
    for timeline in timelines:
        timeline.set_shared_top(top)


def _swatch(colour: str, text: str) -> str:
    return f'<span style="color:{colour}">■</span>&nbsp;{text}'


class TimelineCanvas(QWidget):
    """The painted bars of a RoundTimeline (its `rounds`, `count`, scale, scroll offset and focus)."""

    def __init__(self, timeline: "RoundTimeline", height: int) -> None:
        super().__init__(timeline)
        self.timeline = timeline
        self.setMouseTracking(True)
        self.setFixedHeight(height)
        self.setMinimumWidth(GUTTER + 6 * STEP)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(GUTTER + 40 * STEP, self.height())

    # ---------------------------------------------------------------- geometry
    def plot_rect(self) -> QRectF:
        """Where the bars stand (their boxes below it)."""
        bottom = self.height() - PAD - MARK_HEIGHT - MARK_GAP
        return QRectF(GUTTER, PAD + 4, max(0.0, self.width() - GUTTER - PAD), max(1.0, bottom - PAD - 4))

    def plot_width(self) -> int:
        return int(self.plot_rect().width())

    def bar_x(self, position: int) -> float:
        return GUTTER + position * STEP - self.timeline.offset() + BAR_GAP / 2

    def position_at(self, x: float) -> int | None:
        """The reply position of the round whose column is under x, or None (the gutter, past the last round)."""
        if x < GUTTER or x >= self.width() - PAD:
            return None
        position = int((x - GUTTER + self.timeline.offset()) // STEP)
        return position if 0 <= position < self.timeline.count else None

    def visible_range(self) -> range:
        offset = self.timeline.offset()
        first = max(0, offset // STEP)
        last = min(self.timeline.count, (offset + self.plot_width()) // STEP + 1)
        return range(first, max(first, last))

    # ---------------------------------------------------------------- painting
    def paintEvent(self, event) -> None:  # noqa: N802
        timeline, p = self.timeline, self.timeline.palette_
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        frame = QRectF(self.rect()).adjusted(0.5, 0.5, -0.5, -0.5)
        painter.setPen(QPen(QColor(p.border), 1))
        painter.setBrush(QColor(p.surface))
        painter.drawRoundedRect(frame, 6, 6)
        font = QFont(self.font())
        if font.pointSizeF() > 0:
            font.setPointSizeF(max(6.5, font.pointSizeF() - 1.5))
        painter.setFont(font)
        if not timeline.count:
            painter.setPen(QColor(p.text_dim))
            painter.drawText(frame, Qt.AlignmentFlag.AlignCenter, EMPTY_TEXT)
            painter.end()
            return
        plot = self.plot_rect()
        top_ms = timeline.scale_ms()
        grid = QPen(QColor(p.border), 1, Qt.PenStyle.DashLine)
        painter.setPen(grid)
        for fraction in (0.0, 0.5):
            y = plot.top() + fraction * plot.height()
            painter.drawLine(QPointF(plot.left(), y), QPointF(plot.right(), y))
        painter.setPen(QPen(QColor(p.border), 1))
        painter.drawLine(QPointF(plot.left(), plot.bottom()), QPointF(plot.right(), plot.bottom()))
        painter.setPen(QColor(p.text_dim))
        label_rect = QRectF(2, plot.top() - 7, GUTTER - 6, 14)
        painter.drawText(label_rect, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, scale_label(top_ms))
        painter.drawText(label_rect.translated(0, plot.height()), Qt.AlignmentFlag.AlignRight
                         | Qt.AlignmentFlag.AlignVCenter, "0")
        painter.setClipRect(QRectF(plot.left(), 0, plot.width(), self.height()))
        self._paint_bars(painter, plot, top_ms / 1000)
        painter.end()

    def _paint_bars(self, painter: QPainter, plot: QRectF, top_seconds: float) -> None:
        timeline, p = self.timeline, self.timeline.palette_
        per_second = plot.height() / top_seconds
        hovered, selected = timeline.hovered_position(), timeline.selected_position()
        mark_top = plot.bottom() + MARK_GAP
        colours = [QColor(c) for c in (p.series_draft_time, p.series_network_time, p.series_verify_time,
                                       timeline.rollback_colour())]
        accepted, dim, border = QColor(p.series_bars), QColor(p.text_dim), QColor(p.border)
        server = QColor(timeline.server_colour())
        band = QColor(p.accent)
        band.setAlpha(60 if p.dark else 45)
        for position in self.visible_range():
            record = timeline.rounds[position]
            x = self.bar_x(position)
            if position == hovered:
                painter.setPen(Qt.PenStyle.NoPen)
                painter.setBrush(band)
                painter.drawRect(QRectF(x - BAR_GAP / 2, plot.top() - 4, STEP, plot.height() + 4 + MARK_GAP
                                        + MARK_HEIGHT + 2))
            y = plot.bottom()
            clipped = False
            painter.setPen(Qt.PenStyle.NoPen)
            times = ((step_seconds(timeline.rounds, position),) if is_server_step(record) else
                     (record.draft_seconds, record.network_seconds, record.verify_seconds, record.rollback_seconds))
            for seconds, colour in zip(times, (server,) if len(times) == 1 else colours):
                if seconds <= 0:
                    continue
                height = max(1.0, seconds * per_second)
                if y - height < plot.top():  # (half a pixel over is rounding: the tallest bar sets the scale)
                    height, clipped = y - plot.top(), y - height < plot.top() - 0.5
                if height <= 0:
                    break
                painter.setBrush(colour)
                painter.drawRect(QRectF(x, y - height, BAR_WIDTH, height))
                y -= height
            if clipped:  # taller than the scale (the prefill round, a stall): a notch says so
                painter.setBrush(QColor(p.text))
                painter.drawPolygon(QPolygonF([QPointF(x, plot.top()), QPointF(x + BAR_WIDTH, plot.top()),
                                               QPointF(x + BAR_WIDTH / 2, plot.top() + 4)]))
            box = QRectF(x + 0.5, mark_top + 0.5, BAR_WIDTH - 1, MARK_HEIGHT - 1)
            if record.n_drafted:
                painter.setPen(Qt.PenStyle.NoPen)
                share = record.n_accepted / record.n_drafted
                if share > 0:
                    painter.setBrush(accepted)
                    filled = box.height() * share
                    painter.drawRect(QRectF(box.left(), box.bottom() - filled, box.width(), filled))
                painter.setBrush(Qt.BrushStyle.NoBrush)
                painter.setPen(QPen(accepted if share >= 1 else border, 1))
                painter.drawRect(box)
            else:  # a plain round: the target's one token, no draft
                painter.setPen(QPen(dim, 1.2))
                painter.setBrush(Qt.BrushStyle.NoBrush)
                painter.drawEllipse(box.center(), 2.2, 2.2)
            if position == selected:
                painter.setPen(QPen(QColor(p.text), 1.5))
                painter.setBrush(Qt.BrushStyle.NoBrush)
                painter.drawRoundedRect(QRectF(x - 1.5, min(y, plot.bottom() - 2) - 1.5, BAR_WIDTH + 3,
                                               mark_top + MARK_HEIGHT - min(y, plot.bottom() - 2) + 3), 2, 2)

    # ---------------------------------------------------------------- mouse
    def mouseMoveEvent(self, event) -> None:  # noqa: N802
        self.timeline.hover_at(self.position_at(event.position().x()))
        super().mouseMoveEvent(event)

    def leaveEvent(self, event) -> None:  # noqa: N802
        self.timeline.hover_at(None)
        super().leaveEvent(event)

    def mousePressEvent(self, event) -> None:  # noqa: N802
        if event.button() == Qt.MouseButton.LeftButton:
            self.timeline.select_at(self.position_at(event.position().x()))
        super().mousePressEvent(event)

    def wheelEvent(self, event) -> None:  # noqa: N802
        """Sideways: a touchpad's horizontal swipe, or the wheel with Shift; a plain wheel scrolls the dock."""
        delta = event.angleDelta()
        steps = delta.x() or (delta.y() if event.modifiers() & Qt.KeyboardModifier.ShiftModifier else 0)
        bar = self.timeline.scrollbar
        if steps and bar.maximum() > 0:
            bar.setValue(bar.value() - round(steps / 120 * 3 * STEP))
            event.accept()
        else:
            event.ignore()

    def event(self, event) -> bool:
        if event.type() == QEvent.Type.ToolTip:
            position = self.position_at(event.pos().x())
            if position is None:
                QToolTip.hideText()
                event.ignore()
            else:
                rounds = self.timeline.rounds
                QToolTip.showText(event.globalPos(), round_tooltip(rounds[position], step_seconds(rounds, position)),
                                  self)
            return True
        return super().event(event)


class RoundTimeline(QWidget, RoundFocusPanel):
    """A caption (the colour keys and the reply's totals), the painted bars and their sideways scroll bar.
    round_hovered: the bar's round under the mouse; round_selected: a clicked bar's round."""

    name = "timeline"
    stretch = 0

    def __init__(self, palette: theme.Palette, parent=None, canvas_height: int = CANVAS_HEIGHT) -> None:
        super().__init__(parent)
        self.palette_ = palette
        self.rounds: list = []  # the reply's RoundRecords (LiveStats.rounds, read only); `count` of them drawn
        self.count = 0
        self.hovered = self.selected = None  # the focus drawn (RoundRecords)
        self._hover_emitted = None
        self._follow = True  # the view keeps to the newest round until the user scrolls back
        self._syncing = False
        self._tops = [0.0, 0.0]  # the tallest round's seconds: the prefill round, the others
        self._shared_top = 0.0  # the tallest of the lanes it shares a scale with (share_scale)
        self._sums = [0, 0, 0.0]  # drafted, accepted, rollback seconds over the counted rounds
        self._server_steps = 0  # of the counted rounds, a server's steps (drawn as their wall time)
        self._networked = False  # a counted round spent time on the network (a target on a server verifying)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        # one line, never wrapped (the dock's height is counted): the colour keys, then the totals, elided
        self.keys = QLabel()
        self.keys.setObjectName("dim")
        self.keys.setTextFormat(Qt.TextFormat.RichText)
        self.totals = QLabel()
        self.totals.setObjectName("dim")
        self.totals.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.totals.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.totals_text = ""
        caption = QHBoxLayout()
        caption.setContentsMargins(0, 0, 0, 0)
        caption.setSpacing(8)
        caption.addWidget(self.keys)
        caption.addWidget(self.totals, 1)
        self.keys.setToolTip("One bar per round of the reply, in order: drafting, the network (a target on a "
                             "server), the target's verify pass and the rollback after a rejection. Under each bar, the share of its drafted tokens "
                             "that was accepted; a dot is a plain round (one token, no draft). Hover a bar to "
                             "see its tokens in the transcript, click to pick it.")
        self.server_note = QLabel(SERVER_NOTE)  # said while the reply's rounds are a server's steps
        self.server_note.setObjectName("dim")
        self.server_note.setToolTip(SERVER_NOTE_TIP)
        self.server_note.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.server_note.hide()
        self.canvas = TimelineCanvas(self, canvas_height)
        self.scrollbar = QScrollBar(Qt.Orientation.Horizontal)
        self.scrollbar.setSingleStep(STEP)
        self.scrollbar.setEnabled(False)
        self.scrollbar.valueChanged.connect(self._scrolled)
        layout.addLayout(caption)
        layout.addWidget(self.server_note)
        layout.addWidget(self.canvas)
        layout.addWidget(self.scrollbar)
        self._caption()
        self.setMinimumWidth(max(self.canvas.minimumWidth(), self.keys.sizeHint().width()))

    # ---------------------------------------------------------------- the LivePanel contract
    def update_from(self, snapshot: LiveSnapshot) -> bool:
        self.show_rounds(snapshot.live.rounds)
        return False

    def set_palette(self, palette: theme.Palette) -> None:
        self.palette_ = palette
        self._caption()
        self.canvas.update()

    def clear(self) -> None:
        self.rounds, self.count = [], 0
        self.hovered = self.selected = self._hover_emitted = None
        self._tops, self._sums, self._follow, self._server_steps = [0.0, 0.0], [0, 0, 0.0], True, 0
        self._networked = False
        self._sync_scroll()
        self._caption()
        self.canvas.update()

    # ---------------------------------------------------------------- rounds
    def show_rounds(self, rounds) -> None:
        """Draw `rounds` (a reply's RoundRecords in order; the list may have grown since the last call)."""
        fresh = rounds is not self.rounds or len(rounds) < self.count  # another reply's rounds
        if fresh:
            self.rounds, self.count = rounds, 0
            self._tops, self._sums, self._server_steps, self._networked = [0.0, 0.0], [0, 0, 0.0], 0, False
        elif len(rounds) == self.count:
            return
        for position in range(self.count, len(rounds)):
            record = rounds[position]
            server = is_server_step(record)
            self._server_steps += server
            self._networked = self._networked or record.network_seconds > 0
            # the prefill round's pass also read the prompt: it would flatten the rest (it shows clipped)
            rest = int(record.index != 0)
            self._tops[rest] = max(self._tops[rest], step_seconds(rounds, position) if server else record.seconds)
            self._sums[0] += record.n_drafted
            self._sums[1] += record.n_accepted
            self._sums[2] += record.rollback_seconds
        self.count = len(rounds)
        self._sync_scroll()
        self._caption()
        self.canvas.update()

    @property
    def own_top_seconds(self) -> float:
        return self._tops[1] or self._tops[0]

    def set_shared_top(self, seconds: float) -> None:
        if seconds != self._shared_top:
            self._shared_top = seconds
            self.canvas.update()

    def scale_ms(self) -> float:
        return nice_ceiling(1000 * max(self.own_top_seconds, self._shared_top))

    def rollback_colour(self) -> str:
        return self.palette_.error

    def server_colour(self) -> str:
        return self.palette_.series_baseline

    def _caption(self) -> None:
        p = self.palette_
        keys = [_swatch(self.server_colour(), "Server step")] if self._server_steps else []
        if self._server_steps < self.count or not self._server_steps:  # rounds of our own loop
            keys += [_swatch(p.series_draft_time, "Draft")]
            keys += [_swatch(p.series_network_time, "Network")] if self._networked else []
            keys += [_swatch(p.series_verify_time, "Verify"), _swatch(self.rollback_colour(), "Rollback")]
        self.keys.setText("&nbsp;&nbsp;".join(keys))
        self.server_note.setVisible(self._server_steps > 0)
        drafted, accepted, rollback = self._sums
        totals = []
        if self.count:
            totals.append(f"{self.count} round{'s' if self.count != 1 else ''}")
            if drafted:
                totals.append(f"{accepted}/{drafted} accepted")
            if rollback > 0:
                totals.append(f"rollback {ms_text(rollback)}")
        self.totals_text = " · ".join(totals)
        self.totals.setToolTip(self.totals_text)
        self._elide_totals()

    def _elide_totals(self) -> None:
        self.totals.setText(self.totals.fontMetrics().elidedText(self.totals_text, Qt.TextElideMode.ElideRight,
                                                                 max(0, self.totals.width())))

    # ---------------------------------------------------------------- scrolling
    def offset(self) -> int:
        return self.scrollbar.value()

    def _sync_scroll(self) -> None:
        view = self.canvas.plot_width()
        maximum = max(0, self.count * STEP - view)
        self._syncing = True
        self.scrollbar.setRange(0, maximum)
        self.scrollbar.setPageStep(max(STEP, view))
        if self._follow:
            self.scrollbar.setValue(maximum)
        self._syncing = False
        self.scrollbar.setEnabled(maximum > 0)
        self.canvas.update()

    def _scrolled(self, value: int) -> None:
        if not self._syncing:
            self._follow = value >= self.scrollbar.maximum()
        self.canvas.update()

    def scroll_to(self, position: int) -> None:
        """Bring the round at `position` into view (centred) unless it is in view already."""
        if position in self.canvas.visible_range() and self.canvas.bar_x(position) + BAR_WIDTH <= \
                self.canvas.width() - PAD and self.canvas.bar_x(position) >= GUTTER:
            return
        self.scrollbar.setValue(position * STEP - self.canvas.plot_width() // 2)

    def resizeEvent(self, event) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._sync_scroll()
        self._elide_totals()

    # ---------------------------------------------------------------- the round focus
    def position_of(self, record) -> int | None:
        """Where `record` stands in the drawn rounds (None: not a round of this reply)."""
        if record is None:
            return None
        at = record.index
        if 0 <= at < self.count and (self.rounds[at] is record or self.rounds[at] == record):
            return at
        return next((i for i in range(self.count) if self.rounds[i] == record), None)

    def hovered_position(self) -> int | None:
        return self.position_of(self.hovered)

    def selected_position(self) -> int | None:
        return self.position_of(self.selected)

    def record_at(self, position: int | None):
        return self.rounds[position] if position is not None and 0 <= position < self.count else None

    def hover_at(self, position: int | None) -> None:
        record = self.record_at(position)
        if record is not self._hover_emitted:
            self._hover_emitted = self.hovered = record
            self.canvas.update()
            self.round_hovered.emit(record)

    def select_at(self, position: int | None) -> None:
        record = self.record_at(position)
        self.selected = record
        self.canvas.update()
        self.round_selected.emit(record)

    def show_focus(self, hovered, selected) -> None:
        moved = selected is not None and selected != self.selected
        if (hovered, selected) != (self.hovered, self.selected):
            self.hovered, self.selected = hovered, selected
            self.canvas.update()
        if moved and (position := self.position_of(selected)) is not None:
            self.scroll_to(position)
