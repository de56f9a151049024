"""Reading back what the transcript drew: the token fragments and their formats (for the GUI tests)."""

from PySide6.QtCore import Qt
from PySide6.QtGui import QTextCharFormat

from gui import theme


def fragments(window):
    """(token, char format, text, position) for every token fragment in the transcript."""
    out = []
    block = window.transcript.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            serial = fragment.charFormat().property(theme.TOKEN_SERIAL_PROPERTY)
            if isinstance(serial, int):
                out.append((window.session.tokens[serial], fragment.charFormat(), fragment.text(),
                            fragment.position()))
            it += 1
        block = block.next()
    return out


def background(fmt: QTextCharFormat) -> str | None:
    return fmt.background().color().name() if fmt.background().style() != Qt.BrushStyle.NoBrush else None
