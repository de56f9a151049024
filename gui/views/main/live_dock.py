"""The main window's live dock: the list of live panels, and the one loop each that feeds, themes and clears them.

Adding a panel to the dock: write it in gui/views/live/ (the LivePanel contract of gui.views.live.panel) and add
its class to `LIVE_PANELS`. The dock reads the chat session (gui.sessions.chat: its live stats, figures and
plain-speed reference) into a snapshot, and redraws from a timer (≤ 20 Hz) while a reply is written, only when
the live stats moved or a panel has more to draw.

May touch: the live panels (their contract only), the chat session (read only), QtWidgets / QtCore.
"""

from __future__ import annotations

from PySide6.QtCore import QTimer, Qt
from PySide6.QtWidgets import QScrollArea, QVBoxLayout, QWidget

from gui import theme
from gui.views.live.cost_curve import CostCurveView
from gui.views.live.panel import LivePanel, LiveSnapshot, RoundFocusPanel
from gui.views.live.plots import LivePlots
from gui.views.live.rollback import RollbackNote
from gui.views.live.stats import StatsStrip
from gui.views.live.round_tree import RoundTreePanel
from gui.views.live.timeline import RoundTimeline
from gui.views.main.round_focus import RoundFocus

REFRESH_MS = 50  # at most 20 redraws a second

LIVE_PANELS = (
    StatsStrip,  # tok/s, acceptance, mean accepted length, speed-ups, draft vs verify time
    CostCurveView,  # what verifying n tokens costs against one on this machine
    RollbackNote,  # what undoing a rejected draft costs where the model keeps a recurrent state
    RoundTimeline,  # one bar per round: draft, verify, rollback, accepted/drafted
    RoundTreePanel,  # the picked round: its drafted path, the target's alternatives, the draws, the times
    LivePlots,  # acceptance, tok/s, acceptance by position, accepted tokens per round
)


class LiveDock:
    """The panels of `LIVE_PANELS` in a scroll area (`widget`), top to bottom, and their redraw timer.

    The timer stops once no reply is being written and every panel is drawn. `focus` is the chat's round focus
    (gui.views.main.round_focus): every panel that takes part in it is attached; the window attaches the transcript."""

    def __init__(self, palette: theme.Palette, session, parent: QWidget, popover=None) -> None:
        """`popover`: the round focus's (gui.views.main.round_focus.RoundFocus), a clicked token's round beside it."""
        self.session = session  # gui.sessions.chat.ChatSession
        self.panels: list[LivePanel] = [panel_class(palette) for panel_class in LIVE_PANELS]
        self.focus = RoundFocus(session, parent, popover)
        for panel in self.panels:
            if isinstance(panel, RoundFocusPanel):
                self.focus.attach(panel)
        live = QWidget()
        layout = QVBoxLayout(live)
        layout.setContentsMargins(6, 0, 6, 6)
        layout.setSpacing(6)
        for panel in self.panels:
            layout.addWidget(panel, panel.stretch)
        # a short screen scrolls the panels instead of raising the window's minimum height; a narrow dock
        # reflows the tiles (StatsStrip) instead of raising its minimum width
        self.widget = scroll = QScrollArea()
        scroll.setWidget(live)
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setMinimumWidth(max(panel.minimumWidth() for panel in self.panels) + 12
                               + scroll.verticalScrollBar().sizeHint().width())
        self.timer = QTimer(parent)
        self.timer.setInterval(REFRESH_MS)
        self.timer.timeout.connect(self._tick)
        self._fed_version = -1
        self._more_to_draw = False

    def snapshot(self, tick: bool = False) -> LiveSnapshot:
        session = self.session
        return LiveSnapshot(session.live, session.figures(), session.baseline_tok_per_s(), tick=tick)

    def panel(self, panel_class: type) -> LivePanel:
        """The dock's panel of that class."""
        return next(panel for panel in self.panels if isinstance(panel, panel_class))

    def feed(self) -> None:
        """Every panel draws everything now (the end of a reply, a theme change, a chat opened)."""
        snapshot = self.snapshot(False)
        for panel in self.panels:
            panel.update_from(snapshot)
        self._fed_version, self._more_to_draw = snapshot.version, False

    def set_palette(self, palette: theme.Palette) -> None:
        for panel in self.panels:
            panel.set_palette(palette)
        self.focus.set_palette(palette)

    def clear(self) -> None:
        self.focus.clear()  # the rounds shown are gone
        for panel in self.panels:
            panel.clear()
        self._fed_version, self._more_to_draw = -1, True

    def show_panels(self, panel_classes) -> None:
        """Bring these panels into view (the scripted --panel): the graphs and the cost table give way, the dock
        scrolls to the first."""
        wanted = [panel for panel in self.panels if isinstance(panel, tuple(panel_classes))]
        if not wanted:
            return
        for panel in self.panels:
            if isinstance(panel, (LivePlots, CostCurveView)) and panel not in wanted:
                panel.hide()
        for panel in wanted:
            panel.show()
        self.widget.widget().adjustSize()
        self.widget.ensureWidgetVisible(wanted[0], 0, 0)

    def show_named(self, names) -> None:
        """show_panels by the scripted mode's names (each panel class's `name`)."""
        self.show_panels([type(panel) for panel in self.panels if panel.name in names])

    def start(self) -> None:
        """A reply is being written: redraw from the timer."""
        self.timer.start()

    def stop(self) -> None:
        self.timer.stop()

    def _tick(self) -> None:
        moved = self.session.live.version != self._fed_version or self._more_to_draw
        if moved and self.widget.isVisible():
            snapshot = self.snapshot(tick=True)
            self._fed_version = snapshot.version
            self._more_to_draw = any([panel.update_from(snapshot) for panel in self.panels])
        elif not self.session.generating:
            self.timer.stop()
