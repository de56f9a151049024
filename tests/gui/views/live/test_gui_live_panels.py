"""The live-panel contract: every panel of the dock implements it, and a panel added to the list is fed, themed
and cleared by the main window without any other change."""

from PySide6.QtWidgets import QLabel

from gui import theme
from gui.views.live.panel import LivePanel, LiveSnapshot
from gui.views.live.plots import LivePlots
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
        assert isinstance(panel_class.name, str) and panel_class.name.isidentifier(), panel_class
    names = [panel_class.name for panel_class in LIVE_PANELS]
    assert len(set(names)) == len(names)  # the scripted --panel finds each by its name


class ToyPanel(QLabel):
    """Counts what the dock asks of it."""

    name = "toy"
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

    window.live.show_named(["toy"])  # the scripted --panel finds a panel by its class's name
    assert toy.isVisibleTo(window) and not window.live.panel(LivePlots).isVisibleTo(window)


def test_the_rollback_note_says_what_undoing_a_draft_costs_and_hides_for_a_kv_cache(qtbot):
    import dataclasses

    from engine.core.stats import StatsAccumulator, describe_rollback
    from gui.sessions.session_model import LiveStats
    from gui.views.live.rollback import RollbackNote
    note = RollbackNote(theme.LIGHT)
    qtbot.addWidget(note)
    live = LiveStats()
    snapshot = LiveSnapshot(live=live, figures=None, baseline_tok_per_s=None)
    note.update_from(snapshot)
    assert note.isHidden()  # a KV cache: nothing to say
    live.reset(k=3, method="prompt-lookup", model="tiny-hybrid", rollback=describe_rollback(
        {"kind": "", "snapshot_bytes": 18_432, "snapshots": 4, "restores": 0, "refills": 0, "mean_restore_ms": None}))
    note.update_from(snapshot)
    assert not note.isHidden()
    assert note.label.text() == ("Recurrent state: llama.cpp keeps 4 per-token snapshots of it (18.0 kB each), so a "
                                 "rejected draft is cut off like a KV cache's tail.")
    live.finish(dataclasses.replace(StatsAccumulator(3).snapshot(), rollback_restores=4, rollback_seconds=0.01,
                                    rollback_refills=1))
    note.update_from(snapshot)
    assert note.label.text().endswith("This reply: 4 restores (2.5 ms each), 1 recomputed from the start.")
    note.clear()
    assert note.isHidden()
