"""The Help menu's pages: the keyboard shortcuts (read from the window's own actions, so they never drift)
and "What am I looking at?", a short guide to the colours and the figures.

The colours come from the palette and the status words from gui.theme, the figures' definitions are
engine.core.stats' (written out in words here). Touches QtWidgets and QtGui only.
"""

from __future__ import annotations

from html import escape

from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QTextBrowser, QVBoxLayout

from gui import theme

# keys that belong to a widget rather than to a menu action
WIDGET_KEYS = (("Enter", "Send the message"), ("Shift+Enter", "New line in the message"),
               ("Esc", "Stop the reply at the next round (what was written stays)"))

FIGURES = (
    ("tok/s", "committed tokens per second after the first; the first token's wait is reported apart"),
    ("acceptance", "accepted drafted tokens ÷ drafted tokens"),
    ("mean accepted length", "committed tokens per target forward pass (plain decoding: 1.0)"),
    ("speed-up", "tok/s of the reply ÷ tok/s of plain decoding of this model on this device and dtype, "
                 "measured once (Measure plain speed) and shown with its date"),
    ("theoretical speed-up", "what acceptance, k and the measured cost of verifying k+1 tokens predict "
                             "(Leviathan et al. 2023, eq. 1)"),
    ("efficiency", "measured speed-up ÷ theoretical speed-up: how much of the prediction the machine delivers"),
    ("draft vs verify time", "seconds spent drafting and verifying in the reply"),
    ("which setting is fastest?", "every method at each k, repeated: the median speed-up and its range "
                                  "(lowest – highest); a range that reaches below 1× may be noise"),
)


def shortcut_rows(actions) -> list[tuple[str, str]]:
    """(keys, what it does) for every action with a shortcut, then the message box's keys."""
    rows = []
    for action in actions:
        keys = action.shortcut().toString(QKeySequence.SequenceFormat.NativeText)
        if keys:
            rows.append((keys, action.text().replace("&", "").rstrip("…")))
    return rows + list(WIDGET_KEYS)


def shortcuts_html(actions) -> str:
    rows = "".join(f"<tr><td><b>{escape(keys)}</b>&nbsp;&nbsp;</td><td>{escape(what)}</td></tr>"
                   for keys, what in shortcut_rows(actions))
    return f"<h3>Keyboard shortcuts</h3><table cellspacing='4'>{rows}</table>"


def guide_html(palette: theme.Palette) -> str:
    """The colours of the transcript (each status in its own colour, with its non-colour cue) and the figures."""
    colours = []
    for status in theme.LEGEND_ORDER:
        style = palette.status(status)
        css = [f"background:{style.background}" if style.background else "",
               f"color:{style.foreground}" if style.foreground else "",
               "text-decoration:line-through" if style.strike else
               "text-decoration:underline" if style.underline else ""]
        sample = f"<span style='{';'.join(c for c in css if c)}'>&nbsp;{escape(theme.STATUS_LABELS[status])}&nbsp;</span>"
        colours.append(f"<tr><td>{sample}&nbsp;&nbsp;</td><td>{escape(theme.STATUS_DESCRIPTIONS[status])}</td></tr>")
    figures = "".join(f"<tr><td><b>{escape(name)}</b>&nbsp;&nbsp;</td><td>{escape(text)}</td></tr>"
                      for name, text in FIGURES)
    return ("<h3>What am I looking at?</h3>"
            "<p>Each round a drafter proposes k tokens and the target model checks them all in one pass. The "
            "reply is drawn token by token in the colour of what happened to it; hover a token for its round, "
            "position and probabilities (p_target, p_draft).</p>"
            f"<table cellspacing='4'>{''.join(colours)}</table>"
            "<h4>The figures on the right</h4>"
            f"<table cellspacing='4'>{figures}</table>"
            "<p>The graphs: acceptance and tok/s over the reply (cumulative and rolling), the dashed line being "
            "plain decoding's speed; acceptance by draft position; how many drafted tokens each round kept.</p>")


class HelpPage(QDialog):
    """A page of rich text with a Close button."""

    def __init__(self, title: str, html: str, parent=None) -> None:
        super().__init__(parent)
        self.setWindowTitle(title)
        layout = QVBoxLayout(self)
        self.text = QTextBrowser()
        self.text.setObjectName("help_text")
        self.text.setOpenExternalLinks(False)
        self.text.setHtml(html)
        layout.addWidget(self.text, 1)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.close)
        layout.addWidget(buttons)
        self.resize(620, 520)
