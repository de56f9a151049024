"""What a rejected draft costs to undo on a model with a recurrent state (Qwen 3.5/3.6, Nemotron-H, Mamba-style
layers): how the engine rolls it back (llama.cpp's per-token snapshots, or a snapshot restored and the kept
tokens recomputed), how big a snapshot is, and, once a reply is done, how many rollbacks had to restore and
what they took. Hidden for a KV cache, where a rollback is free.

Renders the live stats it is given (`LiveStats.rollback`, from the engine's GenerationStarted, and the final
GenerationStats' rollback counts); computes nothing. A live panel (gui.views.live.panel.LivePanel).
"""

from __future__ import annotations

from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from gui import theme
from gui.views.live.panel import LiveSnapshot


def rollback_text(description: str, stats) -> str:
    """The panel's words: the engine's description, then the reply's restores where there were any."""
    if not description:
        return ""
    parts = [description + "."]
    if stats is not None and (stats.rollback_restores or stats.rollback_refills):
        mean = 1000 * stats.rollback_seconds / stats.rollback_restores if stats.rollback_restores else 0.0
        parts.append(f"This reply: {stats.rollback_restores} restore{'s' if stats.rollback_restores != 1 else ''}"
                     + (f" ({mean:.1f} ms each)" if stats.rollback_restores else "")
                     + (f", {stats.rollback_refills} recomputed from the start" if stats.rollback_refills else "")
                     + ".")
    return " ".join(parts)


class RollbackNote(QWidget):
    name = "rollback"
    stretch = 0

    def __init__(self, palette: theme.Palette | None = None, parent=None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.label = QLabel()
        self.label.setObjectName("dim")
        self.label.setWordWrap(True)
        self.label.setToolTip("A model with linear-attention (recurrent) layers keeps a state that a KV-cache "
                              "cut can't undo; a rejected draft is undone from a snapshot of that state.")
        layout.addWidget(self.label)
        self.hide()

    def update_from(self, snapshot: LiveSnapshot) -> bool:
        live = snapshot.live
        text = rollback_text(live.rollback, live.final)
        self.label.setText(text)
        self.setVisible(bool(text))
        return False

    def set_palette(self, palette: theme.Palette) -> None:
        pass  # the label's colour comes from the style sheet ("dim")

    def clear(self) -> None:
        self.label.clear()
        self.hide()
