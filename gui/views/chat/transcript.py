"""The transcript: turns as rich text, every token drawn by its status (or a figure: gui.views.chat.colouring),
a tooltip per token (gui.views.chat.token_tooltip), the round under the mouse and the picked one highlighted.

A reply is laid out as Markdown while it streams (gui.views.chat.markdown.ReplyLayout: headings, lists, emphasis,
tables, code blocks in a monospace font), every token keeping its format inside it. Appending is incremental:
each round re-lays only the block being streamed, so a long conversation costs the same per round at its end
as at its start. Only a change of what is drawn (the rejected-drafts toggle, the theme) re-renders the whole
document, from the session model. The round highlight is an overlay (extra selections), never an edit.

The legend and the tooltip live beside it (gui.views.chat.legend, .token_tooltip); `LegendBar` and
`describe_token` are imported from here too.

May touch: QtWidgets/QtGui, gui.theme, gui.views.chat (markdown, colouring, token_tooltip, legend); reads the
session's turns, tokens and rounds, never changes them.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Callable

from PySide6.QtCore import QEvent, QMimeData, QPoint, QPointF, Qt, Signal
from PySide6.QtGui import QColor, QGuiApplication, QTextBlockFormat, QTextCharFormat, QTextCursor, QTextFrameFormat, \
    QTextLength
from PySide6.QtWidgets import QTextEdit, QToolButton, QToolTip

from engine.core.events import TokenStatus
from engine.core.tokens import DisplayToken
from gui import theme
from gui.sessions.round_branches import ghost_in_place
from gui.sessions.session_model import Turn
from gui.views.chat import colouring
from gui.views.chat.legend import LegendBar, LegendChip  # noqa: F401  (imported from here too)
from gui.views.chat.markdown import ReplyLayout, code_block_range, is_code
from gui.views.chat.token_tooltip import describe_token

# how much of the accent a highlighted round's boxes take; on a dark palette 3/4 of that, so the light text stays
# readable on the lighter box
HOVER_TINT, SELECTED_TINT, DARK_TINT = 0.26, 0.42, 0.75

ACTION_SCHEME = "specscope-action:"  # the links under a turn: specscope-action:<action>:<turn index>
ACTION_TIPS = {"copy": "Copy this reply's text, without the rejected drafts (the last reply: Ctrl+Shift+C)",
               "regenerate": "Write this reply again with the settings it ran with, in a new branch of the chat "
                             "(the last reply: Ctrl+R; with the current settings: Ctrl+Shift+R)",
               "edit": "Edit this message and send it again: the chat forks from here, the history keeps both "
                       "(the last message: Ctrl+E, or Up in an empty message box)"}


class TranscriptView(QTextEdit):
    """Read-only rich text of the conversation; renders from `Turn`s and `DisplayToken`s, keeps no state of its own
    beyond the write cursor. With `actions`, each turn has links (Copy, Regenerate under a reply, Edit on a
    message) that emit `action_requested(action, turn index)`. A code block shows a Copy button on hover; text
    copied from a selection (Ctrl+C) leaves the rejected drafts out. `round_of` (a serial → its RoundRecord) gives
    the tooltips the target's alternatives and the colourings by figure their rounds, and leaves out of the text a
    tree round's drafts that were proposed elsewhere than where the reply goes on."""

    action_requested = Signal(str, int)  # copy | regenerate | edit, the turn's index in the conversation
    code_copied = Signal(str)
    token_hovered = Signal(int)  # the serial of the token under the mouse, -1: none (only when it changes)
    token_clicked = Signal(int, QPoint)  # a token's serial, the click's global position (a plain left click)

    def __init__(self, lookup: Callable[[int], DisplayToken | None], palette: theme.Palette, parent=None,
                 actions: bool = False, round_of: colouring.RoundLookup | None = None) -> None:
        super().__init__(parent)
        self.actions = actions
        self._turns_drawn = 0  # the index the next turn drawn will have
        self.copy_code_button = QToolButton(self.viewport())
        self.copy_code_button.setText("Copy")
        self.copy_code_button.setObjectName("copy_code_button")
        self.copy_code_button.setToolTip("Copy this code block (its text only)")
        self.copy_code_button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.copy_code_button.clicked.connect(lambda: self.copy_code(self._hovered_code))
        self.copy_code_button.hide()
        self._hovered_code = -1  # document position of the code block under the mouse
        self.setObjectName("transcript")
        self.setReadOnly(True)
        self.setUndoRedoEnabled(False)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse
                                     | Qt.TextInteractionFlag.TextSelectableByKeyboard)
        self.document().setDocumentMargin(14)
        self.viewport().setMouseTracking(True)
        self._lookup = lookup
        self._round_of = round_of
        self._palette = palette
        self.show_rejected = True
        self.colouring = colouring.STATUS  # a gui.views.chat.colouring mode name
        self._cursor = QTextCursor(self.document())
        self._reply: ReplyLayout | None = None  # the reply being written
        self._hovered_serial = -1
        self._highlight: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())  # hovered, selected rounds' serials
        self._reply_starts: list[tuple[int, int]] = []  # (first serial, first block number) of each reply drawn
        self._reply_block = -1  # the header block of the reply being written, until its first token
        self._rendering = False  # in render_turns (the overlay goes on once, at its end)

    # ------------------------------------------------------------------ whole-document rendering
    def set_palette(self, palette: theme.Palette) -> None:
        self._palette = palette

    def set_show_rejected(self, show: bool) -> bool:
        """Draw the drafted tokens the target threw away (struck through), or hide them, from the next render (the
        caller re-renders); True when that changed anything."""
        changed, self.show_rejected = self.show_rejected != show, show
        return changed

    def set_colouring(self, mode: str, round_of: colouring.RoundLookup | None = None) -> None:
        """What the tokens' colours show from the next render (the window re-renders): a colouring mode name;
        `round_of`, when given, replaces the serial → round lookup."""
        colouring.mode(mode)
        self.colouring = mode
        if round_of is not None:
            self._round_of = round_of

    def render_turns(self, turns: list[Turn], current: Turn | None = None) -> None:
        """Redraw everything (theme or toggle change, new chat); the hot path is `append_tokens`."""
        self.setUpdatesEnabled(False)
        self.document().clear()
        self._turns_drawn = 0
        self._reply_starts.clear()
        self.copy_code_button.hide()
        batch = QTextCursor(self.document())
        batch.beginEditBlock()  # a single layout pass for the whole document
        self._rendering = True
        try:
            self._cursor = QTextCursor(self.document())
            for turn in turns:
                if turn.role == "user":
                    self.append_user(turn)
                else:
                    self.begin_assistant(turn)
                    self.append_tokens(turn.tokens, scroll=False)
                    if turn.finished:
                        self.end_assistant(turn)
        finally:
            self._rendering = False
            batch.endEditBlock()
            self.setUpdatesEnabled(True)
        self._apply_highlight()
        self._scroll_to_end()

    # ------------------------------------------------------------------ incremental rendering
    def append_user(self, turn: Turn) -> None:
        p = self._palette
        follow = self._at_bottom()
        cursor = self._end_cursor()
        if not self.document().isEmpty() or cursor.block().previous().isValid():
            cursor.insertBlock(QTextBlockFormat(), theme.text_format(p))
        frame_format = QTextFrameFormat()
        frame_format.setBackground(QColor(p.surface_alt))
        frame_format.setPadding(10)
        frame_format.setTopMargin(10)
        frame_format.setBottomMargin(6)
        frame_format.setBorder(0)
        frame_format.setWidth(QTextLength(QTextLength.Type.PercentageLength, 100))
        cursor.insertFrame(frame_format)
        cursor.setBlockFormat(QTextBlockFormat())
        cursor.insertText("You", theme.text_format(p, bold=True, small=True, dim=True))
        index = self._next_turn()
        if self.actions:
            cursor.insertText("   ", theme.text_format(p, small=True))
            self._insert_action(cursor, "edit", "✎ Edit", index)
        cursor.insertBlock(QTextBlockFormat(), theme.text_format(p))
        cursor.insertText(turn.text, theme.text_format(p))
        self._cursor = self._end_cursor()
        self._reply = None
        if follow:
            self._scroll_to_end()

    def begin_assistant(self, turn: Turn) -> None:
        p = self._palette
        cursor = self._end_cursor()
        header = QTextBlockFormat()
        header.setTopMargin(8)
        if self.document().isEmpty():
            cursor.setBlockFormat(header)
        else:
            cursor.insertBlock(header)
        title = "Assistant"
        self._reply_index = self._next_turn()
        details = " · ".join(x for x in (turn.model, turn.spec_label) if x)
        cursor.insertText(title, theme.text_format(p, bold=True, small=True, dim=True))
        if details:
            cursor.insertText("   " + details, theme.text_format(p, small=True, dim=True))
        for warning in turn.warnings:
            cursor.insertBlock(QTextBlockFormat())
            cursor.insertText("⚠ " + warning, theme.text_format(p, small=True, color=p.warning))
        for note in turn.notes:  # information: dim, no sign
            cursor.insertBlock(QTextBlockFormat())
            cursor.insertText(note, theme.text_format(p, small=True, dim=True))
        self._cursor = cursor
        self._reply_block = cursor.blockNumber()
        self._reply = ReplyLayout(self.document(), cursor.position() + 1, p, self.show_rejected,
                                  colouring.token_formatter(self.colouring, p, self._round_of))

    def append_tokens(self, tokens: list[DisplayToken], scroll: bool = True) -> None:
        """Insert one round's tokens at the end (the per-round hot path)."""
        if not tokens:
            return
        if self._reply is None:
            raise RuntimeError("tokens arrived before begin_assistant")
        follow = scroll and self._at_bottom()
        if self._reply_block >= 0 and tokens[0].serial is not None:
            self._reply_starts.append((tokens[0].serial, self._reply_block))
            self._reply_block = -1
        cursor = self._cursor
        cursor.beginEditBlock()  # one layout pass per round, not one per token
        try:
            self._reply.add([token for token in tokens if self._drawn_in_place(token)])
            self._reply.render()
        finally:
            cursor.endEditBlock()
        if any(self._highlight) and not self._rendering:  # the live region was laid out again: its overlay too
            self._apply_highlight()
        if follow:
            self._scroll_to_end()

    def _drawn_in_place(self, token: DisplayToken) -> bool:
        """Whether the token is drawn in the text: all but a tree round's drafts off its kept path that were not
        proposed where the reply goes on (gui.sessions.round_branches.ghost_in_place; the round tree shows them)."""
        if token.status is not TokenStatus.REJECTED or self._round_of is None or token.serial is None:
            return True
        record = self._round_of(token.serial)
        return record is None or ghost_in_place(record, token.position)

    def end_assistant(self, turn: Turn) -> None:
        p = self._palette
        cursor = QTextCursor(self.document())
        cursor.setPosition(self._reply.end if self._reply is not None else self._cursor.position())
        footer = QTextBlockFormat()
        footer.setTopMargin(6)
        footer.setBottomMargin(4)
        if turn.error:
            cursor.insertBlock(footer)
            cursor.insertText("⚠ " + turn.error, theme.text_format(p, small=True, color=p.error))
        if turn.stop_reason is not None or (self.actions and turn.text):
            cursor.insertBlock(footer)
            if turn.stop_reason is not None:
                cursor.insertText(footer_text(turn) + ("   " if self.actions and turn.text else ""),
                                  theme.text_format(p, small=True, dim=True))
            if self.actions and turn.text:
                self._insert_action(cursor, "copy", "Copy", self._reply_index)
                cursor.insertText("  ", theme.text_format(p, small=True))
                self._insert_action(cursor, "regenerate", "↻ Regenerate", self._reply_index)
        self._cursor = self._end_cursor()
        self._reply = None
        if self._at_bottom(slack=200):
            self._scroll_to_end()

    def append_notice(self, message: str, error: bool = True) -> None:
        """A line that is not part of any turn (a failed request, a load error)."""
        p = self._palette
        cursor = self._end_cursor()
        fmt = QTextBlockFormat()
        fmt.setTopMargin(8)
        if self.document().isEmpty():
            cursor.setBlockFormat(fmt)
        else:
            cursor.insertBlock(fmt)
        cursor.insertText(("⚠ " if error else "") + message,
                          theme.text_format(p, small=True, color=p.error if error else p.text_dim))
        self._cursor = self._end_cursor()
        self._scroll_to_end()

    def _next_turn(self) -> int:
        self._turns_drawn += 1
        return self._turns_drawn - 1

    def _insert_action(self, cursor: QTextCursor, action: str, label: str, index: int) -> None:
        fmt = theme.text_format(self._palette, small=True, color=self._palette.accent)
        fmt.setAnchor(True)
        fmt.setAnchorHref(f"{ACTION_SCHEME}{action}:{index}")
        cursor.insertText(label, fmt)
        cursor.setCharFormat(QTextCharFormat())

    # ------------------------------------------------------------------ copying
    def is_ghost(self, fmt: QTextCharFormat) -> bool:
        serial = fmt.property(theme.TOKEN_SERIAL_PROPERTY)
        token = self._lookup(serial) if isinstance(serial, int) else None
        return token is not None and token.status is TokenStatus.REJECTED

    def text_between(self, start: int, end: int) -> str:
        """The text drawn between two document positions without the rejected drafts (and so without their
        ↵ glyphs); blocks on lines of their own."""
        lines, block = [], self.document().findBlock(start)
        while block.isValid() and block.position() <= end:
            pieces, it = [], block.begin()
            while not it.atEnd():
                fragment = it.fragment()
                lo, hi = max(start, fragment.position()), min(end, fragment.position() + fragment.length())
                if lo < hi and not self.is_ghost(fragment.charFormat()):
                    pieces.append(fragment.text()[lo - fragment.position():hi - fragment.position()])
                it += 1
            lines.append("".join(pieces))
            block = block.next()
        return "\n".join(lines).replace("\u2028", "\n")

    def createMimeDataFromSelection(self) -> QMimeData:  # noqa: N802 (Qt override: Ctrl+C, drag)
        """The selection's committed text (no rejected drafts), as Qt's own mime data of a plain copy: made by Qt,
        so Qt alone frees it (a QMimeData made in Python and kept by the clipboard was freed twice as the app
        exited: a crash on quitting after Ctrl+C)."""
        cursor = self.textCursor()
        clean = QTextEdit()
        clean.setPlainText(self.text_between(cursor.selectionStart(), cursor.selectionEnd()))
        clean.selectAll()
        return clean.createMimeDataFromSelection()

    def code_text(self, position: int) -> str:
        """The text of the code block at document position `position` (its committed tokens only)."""
        block = self.document().findBlock(position)
        if not is_code(block):
            return ""
        first, last = code_block_range(block)
        return self.text_between(first.position(), last.position() + last.length() - 1)

    def copy_code(self, position: int) -> None:
        text = self.code_text(position)
        if text:
            QGuiApplication.clipboard().setText(text)
            self.code_copied.emit(text)

    def _show_code_button(self, point) -> None:
        """The Copy button at the top right of the code block under the mouse, if any."""
        block = self.cursorForPosition(point).block()
        if not block.isValid() or not is_code(block):
            if not self.copy_code_button.underMouse():
                self.copy_code_button.hide()
            return
        first, _ = code_block_range(block)
        rect = self.document().documentLayout().blockBoundingRect(first)
        top = rect.top() - self.verticalScrollBar().value()
        right = rect.right() - self.horizontalScrollBar().value()
        self._hovered_code = first.position()
        button = self.copy_code_button
        button.adjustSize()
        button.move(int(right - button.width() - 4), int(max(0, top) + 2))
        button.show()
        button.raise_()

    def mouseMoveEvent(self, event) -> None:  # noqa: N802
        self._show_code_button(event.position().toPoint())
        self._set_hovered(self.serial_at(event.position().toPoint()))
        self.viewport().setCursor(Qt.CursorShape.PointingHandCursor
                                  if self.anchorAt(event.position().toPoint()).startswith(ACTION_SCHEME)
                                  else Qt.CursorShape.IBeamCursor)
        super().mouseMoveEvent(event)

    def mouseReleaseEvent(self, event) -> None:  # noqa: N802
        href = self.anchorAt(event.position().toPoint())
        plain_click = event.button() == Qt.MouseButton.LeftButton and not self.textCursor().hasSelection()
        if plain_click and href.startswith(ACTION_SCHEME):
            action, _, index = href[len(ACTION_SCHEME):].partition(":")
            self.action_requested.emit(action, int(index))
        elif plain_click:
            serial = self.serial_at(event.position().toPoint())
            if serial >= 0:
                self.token_clicked.emit(serial, event.globalPosition().toPoint())
        super().mouseReleaseEvent(event)

    def leaveEvent(self, event) -> None:  # noqa: N802
        self._set_hovered(-1)
        super().leaveEvent(event)

    def _set_hovered(self, serial: int) -> None:
        if serial != self._hovered_serial:
            self._hovered_serial = serial
            self.token_hovered.emit(serial)

    # ------------------------------------------------------------------ hover
    def token_at_position(self, position: int) -> DisplayToken | None:
        """The token drawn at document position `position`, if any."""
        block = self.document().findBlock(position)
        if not block.isValid():
            return None
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            if fragment.contains(position):
                serial = fragment.charFormat().property(theme.TOKEN_SERIAL_PROPERTY)
                return self._lookup(serial) if isinstance(serial, int) else None
            it += 1
        return None

    def token_at(self, point) -> DisplayToken | None:
        """The token under a viewport point."""
        offset = QPointF(self.horizontalScrollBar().value(), self.verticalScrollBar().value())
        position = self.document().documentLayout().hitTest(QPointF(point) + offset, Qt.HitTestAccuracy.ExactHit)
        return self.token_at_position(position) if position >= 0 else None

    def serial_at(self, point) -> int:
        """The serial of the token under a viewport point, -1: none."""
        token = self.token_at(point)
        return token.serial if token is not None and token.serial is not None else -1

    def viewportEvent(self, event) -> bool:  # noqa: N802 (Qt override)
        if event.type() == QEvent.Type.ToolTip:
            token = self.token_at(event.pos())
            href = self.anchorAt(event.pos())
            if href.startswith(ACTION_SCHEME):
                QToolTip.showText(event.globalPos(), ACTION_TIPS.get(href[len(ACTION_SCHEME):].partition(":")[0], ""),
                                  self.viewport())
            elif token is not None:
                QToolTip.showText(event.globalPos(), describe_token(token, self._round_of), self.viewport())
            else:
                QToolTip.hideText()
                event.ignore()
            return True
        if event.type() == QEvent.Type.Leave:
            self._set_hovered(-1)
        return super().viewportEvent(event)

    # ------------------------------------------------------------------ the round focus (an overlay)
    def show_focus(self, hovered, selected) -> None:
        """The round under the mouse and the picked one (gui.views.main.round_focus; RoundRecord | None each)."""
        self.highlight_round(hovered.serials if hovered is not None else (),
                             selected.serials if selected is not None else ())

    def highlight_round(self, serials: tuple = (), selected_serials: tuple = ()) -> None:
        """Tint the boxes of the tokens `serials` (the hovered round) and, more, `selected_serials` (the picked one,
        also overlined), as extra selections: the document is not changed."""
        self._highlight = (tuple(serials), tuple(selected_serials))
        self._apply_highlight()

    def _apply_highlight(self) -> None:
        hovered, selected = self._highlight
        chosen = set(selected)
        selections = self._round_selections([s for s in hovered if s not in chosen], HOVER_TINT, False)
        selections += self._round_selections(selected, SELECTED_TINT, True)
        self.setExtraSelections(selections)

    def _round_selections(self, serials, tint: float, overline: bool) -> list:
        wanted, out = set(serials), []
        if not wanted:
            return out
        accent, surface = self._palette.accent, self._palette.surface
        tint *= DARK_TINT if self._palette.dark else 1.0
        for start, length, fmt in self._fragments_of(wanted):
            box = fmt.background().color().name() if fmt.background().style() != Qt.BrushStyle.NoBrush else surface
            selection = QTextEdit.ExtraSelection()
            selection.cursor = QTextCursor(self.document())
            selection.cursor.setPosition(start)
            selection.cursor.setPosition(start + length, QTextCursor.MoveMode.KeepAnchor)
            overlay = QTextCharFormat()
            overlay.setBackground(colouring.scale_colour((box, accent), tint))
            if overline:
                overlay.setFontOverline(True)
            selection.format = overlay
            out.append(selection)
        return out

    def _fragments_of(self, serials: set[int]):
        """(position, length, format) of every drawn fragment of the tokens `serials`; only the blocks of the
        replies that hold them are scanned (each reply's tokens have serials above the one before)."""
        firsts = [first for first, _ in self._reply_starts]
        block, last = self.document().begin(), None
        if firsts and firsts == sorted(firsts):
            i = bisect_right(firsts, min(serials)) - 1
            block = self.document().findBlockByNumber(self._reply_starts[max(0, i)][1])
            j = bisect_right(firsts, max(serials))
            last = self._reply_starts[j][1] if j < len(firsts) else None
        while block.isValid() and (last is None or block.blockNumber() < last):
            it = block.begin()
            while not it.atEnd():
                fragment = it.fragment()
                fmt = fragment.charFormat()
                if fmt.property(theme.TOKEN_SERIAL_PROPERTY) in serials:
                    yield fragment.position(), fragment.length(), fmt
                it += 1
            block = block.next()

    # ------------------------------------------------------------------ helpers
    def _end_cursor(self) -> QTextCursor:
        return self.document().rootFrame().lastCursorPosition()

    def _at_bottom(self, slack: int = 24) -> bool:
        bar = self.verticalScrollBar()
        return bar.value() >= bar.maximum() - slack

    def _scroll_to_end(self) -> None:
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())


def footer_text(turn: Turn) -> str:
    stats = turn.stats
    reason = {"eos": "end of reply", "stop-string": "stop string", "max-new-tokens": "token limit reached",
              "cancelled": "stopped", "closed": "stopped: SpecScope was closed", "context-full": "context full", "out-of-memory": "out of memory",
              "interrupted": "interrupted", "error": "ended by an error"}.get(turn.stop_reason, turn.stop_reason)
    parts = [reason]
    if stats is not None:
        parts.append(f"{stats.committed_tokens} tokens")
        parts.append(f"{stats.tok_per_s:.1f} tok/s")
        if stats.drafted_tokens:
            parts.append(f"acceptance {stats.acceptance_rate:.0%}")
            parts.append(f"{stats.mean_accepted_length:.2f} tokens/pass")
    return " · ".join(parts)
