"""A reply laid out as Markdown while it streams, every token keeping its colour, underline and tooltip.

Qt parses the Markdown (QTextDocument.setMarkdown, GitHub dialect, no HTML); nothing here parses it. A reply's
text is split into what is settled and the *live region*: the blocks from the last safe boundary (a blank
line between two top-level blocks that are not one list, one table or one code block) to the end. Each round
only the live region is parsed again, into a small document of its own; the result is copied into the
transcript. When the new layout only adds text to the old one (the usual case: words appended to a paragraph
or lines to a code block) only the new characters are copied; otherwise the live region is replaced. Blocks
before the live region are never touched again, so a round costs what the block being streamed costs, however
long the reply is.

Which token each laid-out character came from is found by aligning the laid-out text with the Markdown source
(a block's text is found whole in the source, else character by character: markup characters are what the
layout leaves out). Each token's character format (one callable, gui.views.chat.colouring: by default
theme.token_format's colour, strike-out, underline and the serial the tooltip looks up) is merged over the Markdown one (weight, italics, monospace), so a token inside
`**bold**` or a code block keeps both. A source newline laid out as a space (a soft line break) is drawn as a
line break, as chat apps do. Rejected drafts are drawn where they were proposed, after the layout (a draft a server
does not name as a placeholder, ▯).

May touch: QtGui text classes, gui.theme, gui.views.chat.colouring, engine.core.tokens' DisplayToken and
gui.sessions.rounds' unnamed_draft (read). No state beyond the reply's layout.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

from PySide6.QtGui import (QColor, QTextBlockFormat, QTextCharFormat, QTextCursor, QTextDocument,
                           QTextDocumentFragment, QTextFormat, QTextFrameFormat)

from engine.core.events import TokenStatus
from engine.core.tokens import DisplayToken
from gui import theme
from gui.sessions.rounds import UNNAMED_GHOST, unnamed_draft
from gui.views.chat.colouring import TokenFormat, status_formatter

FEATURES = QTextDocument.MarkdownFeature.MarkdownDialectGitHub | QTextDocument.MarkdownFeature.MarkdownNoHTML
CODE_FENCE = QTextFormat.Property.BlockCodeFence  # Qt's importer marks each line of a code block with it
CODE_LANGUAGE = QTextFormat.Property.BlockCodeLanguage
SENTINEL = "\u200b\n\n"  # a first paragraph, so that the live region's first block keeps its own format
SEARCH_WINDOW = 48  # how far a laid-out character is looked for in the source (markup runs are short)
LINE_HEIGHT = 125  # percent, prose blocks


_MARKDOWN_PROPERTIES = (QTextFormat.Property.FontFamilies, QTextFormat.Property.FontWeight,
                        QTextFormat.Property.FontItalic, QTextFormat.Property.FontFixedPitch,
                        QTextFormat.Property.FontSizeAdjustment, QTextFormat.Property.FontPointSize)


def markdown_format(fmt: QTextCharFormat) -> QTextCharFormat:
    """Only the Markdown part of a character format (font, weight, italics, size), not a token's."""
    out = QTextCharFormat()
    for name in _MARKDOWN_PROPERTIES:
        if fmt.hasProperty(name):
            out.setProperty(name, fmt.property(name))
    return out


def is_code(block) -> bool:
    return block.blockFormat().hasProperty(CODE_FENCE)


def ghost_text(text: str) -> str:
    """Rejected drafts never break a line: a drafted newline shows as ↵."""
    return text.replace("\r\n", "↵").replace("\n", "↵")


def drawn_ghost(token: DisplayToken) -> str:
    """What a rejected draft is drawn as: its text (ghost_text), or a placeholder where a server does not name it."""
    return UNNAMED_GHOST if unnamed_draft(token) else ghost_text(token.text)


def _in_table(block) -> bool:
    return QTextCursor(block).currentTable() is not None


def _list_key(block):
    text_list = block.textList()
    if text_list is None:
        return None
    fmt = text_list.format()
    return fmt.style(), fmt.start(), text_list.item(0).position(), text_list.itemNumber(block)


def _runs(block) -> tuple:
    """The block's Markdown character formats as (length, weight, italic, families, strike, anchor) runs."""
    runs, it = [], block.begin()
    while not it.atEnd():
        fragment = it.fragment()
        fmt = fragment.charFormat()
        key = (fmt.fontWeight(), fmt.fontItalic(), tuple(fmt.fontFamilies() or ()), fmt.fontStrikeOut(),
               fmt.anchorHref())
        if runs and runs[-1][1] == key:
            runs[-1] = (runs[-1][0] + fragment.length(), key)
        else:
            runs.append((fragment.length(), key))
        it += 1
    return tuple(runs)


@dataclass(frozen=True, slots=True)
class BlockKey:
    """What a laid-out block looks like: equal keys, equal layout."""

    text: str
    heading: int
    code: bool
    language: str
    list_key: tuple | None
    table: bool
    runs: tuple

    @classmethod
    def of(cls, block) -> "BlockKey":
        fmt = block.blockFormat()
        return cls(block.text(), fmt.headingLevel(), fmt.hasProperty(CODE_FENCE),
                   str(fmt.property(CODE_LANGUAGE) or ""), _list_key(block), _in_table(block), _runs(block))

    def extends(self, old: "BlockKey") -> bool:
        """This block is `old` with text added at its end, formats unchanged on the old part."""
        if (self.heading, self.code, self.language, self.list_key, self.table) != \
                (old.heading, old.code, old.language, old.list_key, old.table) or not self.text.startswith(old.text):
            return False
        return _clip(self.runs, len(old.text)) == _clip(old.runs, len(old.text))


def _clip(runs: tuple, length: int) -> tuple:
    out = []
    for size, key in runs:
        if length <= 0:
            break
        out.append((min(size, length), key))
        length -= size
    return tuple(out)


def align_block(source: str, pointer: int, text: str, offset: int = 0) -> tuple[list[tuple[int, int, int]], int]:
    """Where the characters text[offset:] of one laid-out block come from in `source`, searching from `pointer`:
    (index in text, index in source, length) runs and the pointer after them. A block's text is usually in the
    source whole (code, plain prose); otherwise each character is looked for a little ahead (the skipped ones
    are markup), a space also matching a newline (a soft line break)."""
    part = text[offset:]
    if not part:
        return [], pointer
    found = source.find(part, pointer) if offset == 0 else -1
    if found >= 0:
        return [(offset, found, len(part))], found + len(part)
    runs: list[tuple[int, int, int]] = []
    for i, char in enumerate(part, start=offset):
        limit = pointer + SEARCH_WINDOW
        at = source.find(char, pointer, limit)
        if char == " ":
            newline = source.find("\n", pointer, at if at >= 0 else limit)
            at = newline if newline >= 0 else at
        if at < 0:
            continue  # laid out but not in the source (a hard line break): no token
        if runs and runs[-1][0] + runs[-1][2] == i and runs[-1][1] + runs[-1][2] == at:
            runs[-1] = (runs[-1][0], runs[-1][1], runs[-1][2] + 1)
        else:
            runs.append((i, at, 1))
        pointer = at + 1
    return runs, pointer


class ReplyLayout:
    """One assistant reply in the transcript's document, laid out as Markdown as its tokens arrive.

    `start`: the document position where the reply's first block will begin (right after the block that
    holds the reply's header); nothing may be written after the reply while it streams."""

    def __init__(self, document: QTextDocument, start: int, palette: theme.Palette, show_rejected: bool,
                 token_format: TokenFormat | None = None) -> None:
        self.document = document
        self.palette = palette
        # each token's format (gui.views.chat.colouring: by status, the default, or by a figure on a scale)
        self.token_format = token_format or status_formatter(palette)
        self.show_rejected = show_rejected
        self.source = ""  # the committed text (the Markdown)
        self.starts: list[int] = []  # source offset of each committed token
        self.committed: list[DisplayToken] = []
        self.ghosts: list[tuple[int, DisplayToken]] = []  # (source offset proposed at, token)
        self.live_source = 0  # where the live region starts in the source
        self.live_position = start  # where its first block starts in the document
        self.end = start - 1  # the document position after the reply's last character
        self.first = True  # the live region is the reply's first block (it gets the body's top margin)
        self._keys: list[BlockKey] = []  # the live region's blocks as last laid out
        self._mini_end = 0  # where that layout ended in its own document
        self._pointer = 0  # the source index after the last aligned character
        self._ghosts_drawn = 0
        self._live_ghost = 0  # the first ghost drawn in the live region
        self.relayouts = self.appends = 0  # how often the live region was replaced / extended (benchmark)
        self.copied = 0  # characters written into the transcript in all (linear in the reply's length)

    # ------------------------------------------------------------------ input
    def add(self, tokens: list[DisplayToken]) -> None:
        for token in tokens:
            if token.status is TokenStatus.REJECTED:
                if self.show_rejected and (token.text or unnamed_draft(token)):
                    self.ghosts.append((len(self.source), token))
            elif token.text:
                self.starts.append(len(self.source))
                self.committed.append(token)
                self.source += token.text

    # ------------------------------------------------------------------ layout
    def render(self) -> None:
        """Lay the live region out again (or extend it) after `add`."""
        mini = QTextDocument()
        mini.setMarkdown(SENTINEL + self.source[self.live_source:], FEATURES)
        blocks = []
        block = mini.begin().next()  # after the sentinel paragraph
        while block.isValid():
            blocks.append(block)
            block = block.next()
        if not blocks:  # nothing laid out yet: an empty block for the rejected drafts to go in
            cursor = QTextCursor(mini)
            cursor.movePosition(QTextCursor.MoveOperation.End)
            cursor.insertBlock(QTextBlockFormat())
            blocks.append(cursor.block())
        keys = [BlockKey.of(b) for b in blocks]
        old = self._keys
        # a new list item must join the list laid out before it (a copy would start a list of its own)
        append = (bool(old) and len(keys) >= len(old) and keys[:len(old) - 1] == old[:-1]
                  and keys[len(old) - 1].extends(old[-1]) and not any(k.table for k in keys)
                  and not any(k.list_key for k in keys[len(old):]))
        mini_end = mini.characterCount() - 1
        if append:  # only what is new: the end of the last block, and the blocks after it
            first_block, first_offset, pointer, from_position = len(old) - 1, len(old[-1].text), self._pointer, \
                self._mini_end
            first_ghost, new_blocks = self._ghosts_drawn, len(old)
        else:  # the whole live region
            first_block, first_offset, pointer, from_position = 0, 0, self.live_source, 1
            first_ghost, new_blocks = self._live_ghost, 0
        ghost_floor = from_position if append else 2  # never in the sentinel paragraph
        settled = pointer - 1  # the source index of the last character aligned before this round
        runs, pointer = self._align(blocks, first_block, first_offset, pointer)
        boundary = self._boundary(blocks, runs, max(1, new_blocks), {first_block: settled} if append else {})
        self._decorate(blocks[new_blocks:])
        self._format(mini, runs)
        ghosts = self._draw_ghosts(mini, runs, first_ghost, ghost_floor, mini_end)
        old_end = self.end
        self._copy(mini, from_position, append)
        self._keys, self._mini_end, self._pointer = keys, mini_end, pointer
        if boundary is not None:
            number, mini_position, source_index = boundary
            shift = sum(length for position, length in ghosts if position < mini_position)
            if append:
                self.live_position = old_end + (mini_position - from_position) + shift
            else:
                self.live_position = self.live_position + (mini_position - 2) + shift
            self.live_source = source_index
            self._live_ghost = first_ghost + sum(1 for position, _ in ghosts if position < mini_position)
            self._keys = keys[number:]
            self._mini_end = mini_end - mini_position + 2  # as the next parse, from that block, lays it out
            self.first = False

    def _align(self, blocks, first_block: int, first_offset: int, pointer: int):
        """(mini position, source index, length) runs of blocks[first_block:] (the first from first_offset)."""
        runs = []
        for number in range(first_block, len(blocks)):
            block = blocks[number]
            block_runs, pointer = align_block(self.source, pointer, block.text(),
                                              first_offset if number == first_block else 0)
            runs.extend((block.position() + i, at, n) for i, at, n in block_runs)
        return runs, pointer

    def _boundary(self, blocks, runs, from_block: int, lasts: dict[int, int]):
        """The last block (from `from_block` on) where the live region may start instead: it follows a blank
        line and is not part of the block before it (one list, one table, one code block). `lasts`: what is
        known of where blocks end in the source before `runs`. Returns (its number, its mini position, its
        source index) or None."""
        firsts = {}  # block number -> source index of its first aligned character (lasts: of its last)
        number, ends = 0, [b.position() + b.length() - 1 for b in blocks]
        for position, at, length in runs:
            while number < len(blocks) - 1 and position >= ends[number]:
                number += 1
            firsts.setdefault(number, at)
            lasts[number] = at + length - 1
        for number in range(len(blocks) - 1, from_block - 1, -1):
            block, previous = blocks[number], blocks[number - 1]
            if number not in firsts or (number - 1) not in lasts or _in_table(block) or _in_table(previous):
                continue
            if is_code(block) and is_code(previous):
                continue
            if block.textList() is not None and previous.textList() is not None and \
                    block.textList().item(0).position() == previous.textList().item(0).position():
                continue
            blank = self.source.rfind("\n\n", lasts[number - 1] + 1, firsts[number])
            if blank >= 0:
                return number, block.position(), blank + 2
        return None

    def _decorate(self, blocks) -> None:
        """Block formats the Markdown leaves to us: code on a tinted background, prose with air, tables ruled in
        the palette's border colour."""
        tables = set()
        for block in blocks:
            table = QTextCursor(block).currentTable()
            if table is not None and table.firstPosition() not in tables:
                tables.add(table.firstPosition())
                table_format = table.format()
                table_format.setBorderBrush(QColor(self.palette.border))
                table_format.setBorderStyle(QTextFrameFormat.BorderStyle.BorderStyle_Solid)
                table_format.setCellPadding(4)
                table_format.setBorderCollapse(True)
                table.setFormat(table_format)
            fmt = QTextBlockFormat()
            if is_code(block):
                fmt.setBackground(QColor(self.palette.surface_alt))
                fmt.setLeftMargin(6)
                fmt.setRightMargin(6)
            else:
                fmt.setLineHeight(LINE_HEIGHT, QTextBlockFormat.LineHeightTypes.ProportionalHeight.value)
            if self.first and block.blockNumber() == 1:
                fmt.setTopMargin(max(4.0, block.blockFormat().topMargin()))
            QTextCursor(block).mergeBlockFormat(fmt)

    def _format(self, mini: QTextDocument, runs) -> None:
        """Each token's format over its characters; a soft line break drawn as a line break."""
        cursor = QTextCursor(mini)
        source, starts, committed = self.source, self.starts, self.committed
        for position, at, length in runs:
            newline = source.find("\n", at, at + length)
            while newline >= 0:
                cursor.setPosition(position + newline - at)
                cursor.setPosition(position + newline - at + 1, QTextCursor.MoveMode.KeepAnchor)
                cursor.insertText("\u2028", cursor.charFormat())
                newline = source.find("\n", newline + 1, at + length)
            j, end = bisect_right(starts, at) - 1, at + length
            while at < end and 0 <= j < len(committed):
                n = min(end, starts[j] + len(committed[j].text)) - at
                if n > 0:
                    token = committed[j]
                    cursor.setPosition(position)
                    cursor.setPosition(position + n, QTextCursor.MoveMode.KeepAnchor)
                    cursor.mergeCharFormat(self.token_format(token))
                    position += n
                    at += n
                j += 1

    def _draw_ghosts(self, mini: QTextDocument, runs, first: int, from_position: int,
                     mini_end: int) -> list[tuple[int, int]]:
        """Insert the rejected drafts from ghosts[first] on, each before the first character laid out from at or
        after where it was proposed. Returns (mini position before any insertion, length) of each, in order."""
        placed = []
        for offset, token in self.ghosts[first:]:
            position = mini_end
            for run_position, at, length in runs:
                if at + length > offset:
                    position = run_position + max(0, offset - at)
                    break
            placed.append((max(position, from_position), token))
        self._ghosts_drawn = len(self.ghosts)
        cursor = QTextCursor(mini)
        drawn = []
        for position, token in reversed(placed):  # from the end, so earlier positions stay put
            cursor.setPosition(position)
            fmt = markdown_format(cursor.charFormat())
            fmt.merge(self.token_format(token))
            text = drawn_ghost(token)
            cursor.insertText(text, fmt)
            drawn.append((position, len(text)))
        return drawn[::-1]

    def _copy(self, mini: QTextDocument, from_position: int, append: bool) -> None:
        """Put the mini document's characters from `from_position` into the transcript (appended after the
        reply, or in place of its live region)."""
        cursor = QTextCursor(self.document)
        if append:
            # the end of the last block goes in as text (a copied piece of a list item would make a new block),
            # the blocks after it as a copy that starts with their separator (each keeps its own format)
            cursor.setPosition(self.end)
            block = mini.findBlock(from_position)
            it = block.begin()
            while not it.atEnd():
                fragment = it.fragment()
                skip = max(0, from_position - fragment.position())
                if skip < fragment.length():
                    cursor.insertText(fragment.text()[skip:], fragment.charFormat())
                it += 1
            from_position = block.position() + block.length() - 1
            self.appends += 1
        else:
            cursor.setPosition(self.live_position - 1)
            cursor.setPosition(self.end, QTextCursor.MoveMode.KeepAnchor)
            self.relayouts += 1
        selection = QTextCursor(mini)
        selection.setPosition(from_position)
        selection.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        if selection.hasSelection() or not append:
            cursor.insertFragment(QTextDocumentFragment(selection))
        self.copied += cursor.position() - (self.end if append else self.live_position - 1)
        self.end = cursor.position()


def code_block_range(block):
    """The first and last blocks of the code block `block` is a line of."""
    first = last = block
    while first.previous().isValid() and is_code(first.previous()):
        first = first.previous()
    while last.next().isValid() and is_code(last.next()):
        last = last.next()
    return first, last
