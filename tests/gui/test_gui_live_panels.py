"""The live-panel contract: every panel of the dock implements it, and a panel added to the list is fed, themed
and cleared by the main window without any other change."""

from PySide6.QtWidgets import QLabel

from gui import theme
from gui.views.live.panel import LivePanel, LiveSnapshot
from gui.views.main import live_dock
from gui.views.main.live_dock import LIVE_PANELS


def test_every_panel_of_the_dock_implements_the_contract(qtbot):
    assert LIVE_PANELS
    for panel_class in LIVE_PANELS:
        panel = panel_class(theme.LIGHT)
        qtbot.addWidget(panel)
        assert isinstance(panel, LivePanel), panel_class
        for name in ("update_from", "set_palette", "clear"):
            assert callable(getattr(panel_class, name)) and name in vars(panel_class), (panel_class, name)
        assert isinstance(panel_class.stretch, int)


class ToyPanel(QLabel):
    """Counts what the dock asks of it."""

    stretch = 0

    def __init__(self, palette: theme.Palette, parent=None) -> None:
        super().__init__("toy", parent)
        self.palettes, self.snapshots, self.clears = [palette], [], 0

    def update_from(self, snapshot: LiveSnapshot) -> bool:
        self.snapshots.append(snapshot)
        self.setText(f"{snapshot.figures.committed_tokens} tokens")
        return False

    def set_palette(self, palette: theme.Palette) -> None:
        self.palettes.append(palette)

    def clear(self) -> None:
        self.clears += 1


def test_a_panel_added_to_the_list_is_fed_themed_and_cleared(make_window, send_and_wait, monkeypatch):
    monkeypatch.setattr(live_dock, "LIVE_PANELS", (*LIVE_PANELS, ToyPanel))
    window = make_window()
    toy = window.live.panel(ToyPanel)
    assert isinstance(toy, LivePanel) and window.live_scroll.widget().isAncestorOf(toy)
    assert toy.palettes == [theme.LIGHT]

    window.controls.apply(method="prompt-lookup", k=3, max_new_tokens=30)
    clears = toy.clears
    turn = send_and_wait(window)
    assert toy.clears == clears + 1  # the reply started
    last = toy.snapshots[-1]  # the end of the reply draws every panel
    assert not last.tick and last.live is window.session.live
    assert last.figures == window.session.figures() and last.figures.committed_tokens == turn.stats.committed_tokens
    assert toy.text() == f"{turn.stats.committed_tokens} tokens"

    window.set_theme("dark")
    assert toy.palettes[-1] == theme.DARK

    window.new_chat()
    assert toy.clears == clears + 2
    assert toy.snapshots[-1].figures.committed_tokens == 0 and toy.text() == "0 tokens"
