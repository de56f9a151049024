"""Replies laid out as Markdown while they stream (gui/views/chat/markdown.py): headings, lists, emphasis, tables and
code blocks, every token keeping its colour, underline and tooltip inside them, in the chat and the compare
panes; the layout streamed round by round equals the layout of the whole reply; only the block being streamed
is written again (the characters written grow with the reply, not with its square); a code block's Copy."""

import random
import re

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QGuiApplication, QTextCursor, QTextDocument, QTextFormat

import fakes
from engine.core.config import parse_spec
from engine.core.events import TokenStatus
from engine.core.tokens import DisplayToken
from fakes import FakeEngine
from gui import theme
from gui.views.chat.markdown import FEATURES, ReplyLayout, is_code
from transcript_probe import background, fragments

WAIT_MS = 10_000

CODE_REPLY = ("Here", " is", " a", " **", "fast", "**", " way", ":\n\n", "```", "python", "\n", "def", " reverse",
              "(text", "):", "\n", "    return", " text", "[::-1]", "\n", "```", "\n\n", "Done", ".")
RICH_REPLY = ("# ", "Title", "\n\n", "Some", " *", "slanted", "*", " words", ".\n\n", "- ", "first", " item", "\n",
              "- ", "second", "\n\n", "| a", " | b", " |\n", "|---|---|\n", "| 1", " | 2", " |\n\n", "End", ".")
CORPUS = """# Reversing a string

Here is a **simple** way to do it in *Python*, with `slicing`:

```python
def reverse(text: str) -> str:
    # a step of -1 walks backwards

    return text[::-1]
```

1. Call `reverse("abc")`.
2. It returns `"cba"`.

3. A loose item.

| input | output |
|-------|--------|
| abc   | cba    |

- one
- two
  still two

> A quote
> on two lines.

That's all.
A second line, and [a link](https://example.com/path) at the end."""


@pytest.fixture
def reply_words(monkeypatch):
    """The fake engine writes `words` (its drafts and corrections cycle through them)."""
    def use(words):
        monkeypatch.setattr(fakes, "WORDS", tuple(words))
    return use


def code_fragments(window):
    return [(token, fmt, text) for token, fmt, text, position in fragments(window)
            if is_code(window.transcript.document().findBlock(position))]


def test_a_code_block_is_monospace_and_keeps_every_tokens_format(make_window, reply_words, qtbot):
    reply_words(CODE_REPLY)
    window = make_window()
    window.controls.apply(method="draft-model", draft="default", k=3, max_new_tokens=len(CODE_REPLY))
    with qtbot.waitSignal(window.reply_finished, timeout=WAIT_MS) as blocker:
        assert window.send("Write a function that reverses a string, in a code block.")
    turn = blocker.args[0]
    assert "```" in turn.text
    inside = code_fragments(window)
    assert {token.status for token, _, _ in inside} >= {TokenStatus.ACCEPTED, TokenStatus.REJECTED}
    for token, fmt, _ in inside:
        assert "monospace" in (fmt.fontFamilies() or []) or fmt.fontFixedPitch()
        style = theme.LIGHT.status(token.status)
        assert background(fmt) in ({style.background, style.background_alt} if style.background else {None})
        assert fmt.fontStrikeOut() == style.strike
    # the code's committed text is the reply's code, its rejected drafts drawn struck through among it
    view = window.transcript
    first_code = next(b for b in _blocks(view.document()) if is_code(b))
    assert view.code_text(first_code.position()) == "def reverse(text):\n    return text[::-1]"
    drawn = "".join(text for token, _, text in inside if token.committed)
    assert drawn == "def reverse(text):    return text[::-1]"
    # no fence, no language tag, no ** is drawn; the emphasis is bold and still coloured
    plain = view.toPlainText()
    assert "```" not in plain and "**" not in plain
    bold = [(token, fmt) for token, fmt, text, _ in fragments(window) if text == "fast"]
    assert bold and bold[0][1].fontWeight() >= 700 and bold[0][1].property(theme.TOKEN_SERIAL_PROPERTY) == \
        bold[0][0].serial
    # the tooltip of a token inside the code block is that token's
    token, _, text = next((t, f, x) for t, f, x in inside if t.committed and x.strip())
    position = next(p for t, _, x, p in fragments(window) if t is token)
    assert view.token_at_position(position) is token


def test_headings_lists_emphasis_and_tables_keep_their_tokens(make_window, reply_words, qtbot):
    reply_words(RICH_REPLY)
    window = make_window()
    window.controls.apply(method="none", max_new_tokens=len(RICH_REPLY))
    with qtbot.waitSignal(window.reply_finished, timeout=WAIT_MS):
        assert window.send("Show me some Markdown")
    document = window.transcript.document()
    blocks = {b.text(): b for b in _blocks(document)}
    assert blocks["Title"].blockFormat().headingLevel() == 1
    assert blocks["first item"].textList() is not None
    assert blocks["first item"].textList().item(0) == blocks["first item"]
    assert blocks["second"].textList() is not None
    cells = [b for b in _blocks(document) if QTextCursor(b).currentTable() is not None]
    assert [b.text() for b in cells] == ["a", "b", "1", "2"]
    slanted = [fmt for token, fmt, text, _ in fragments(window) if text == "slanted"]
    assert slanted and slanted[0].fontItalic()
    drawn = {text for _, _, text, _ in fragments(window)}
    assert {"Title", "first", " item", "1", "2", "End"} <= drawn  # every word is a token fragment
    assert "#" not in window.transcript.toPlainText() and "|" not in window.transcript.toPlainText()


def _blocks(document):
    block = document.begin()
    while block.isValid():
        yield block
        block = block.next()


def tokens_of(source: str, rng: random.Random, ghosts: bool) -> list[DisplayToken]:
    """`source` cut into tokens of 1 to 5 characters, each status in turn, with rejected drafts among them."""
    tokens, i = [], 0
    while i < len(source):
        n = rng.randint(1, 5)
        if ghosts and rng.random() < 0.2:
            tokens.append(DisplayToken("zz\n", TokenStatus.REJECTED, 1, 0, 2, 0.1, 0.2, "draft", 7, serial=len(tokens)))
        status = rng.choice((TokenStatus.ACCEPTED, TokenStatus.PLAIN, TokenStatus.SUBSTITUTED, TokenStatus.BONUS))
        tokens.append(DisplayToken(source[i:i + n], status, 1, 0, 2, 0.5, 0.5, "draft", 8, serial=len(tokens)))
        i += n
    return tokens


def lay_out(tokens, round_size) -> tuple[QTextDocument, ReplyLayout]:
    document = QTextDocument()
    cursor = QTextCursor(document)
    cursor.insertText("Assistant")
    layout = ReplyLayout(document, cursor.position() + 1, theme.LIGHT, show_rejected=True)
    i = 0
    while i < len(tokens):
        n = round_size()
        layout.add(tokens[i:i + n])
        layout.render()
        i += n
    return document, layout


def committed_runs(document):
    """(text, serial, Markdown format, block kind) of the committed tokens, ghosts left out."""
    out = []
    for block in _blocks(document):
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            fmt = fragment.charFormat()
            serial = fmt.property(theme.TOKEN_SERIAL_PROPERTY)
            if not fmt.fontStrikeOut():
                key = (serial, fmt.fontWeight(), fmt.fontItalic(), tuple(fmt.fontFamilies() or ()),
                       block.blockFormat().headingLevel(), is_code(block), block.textList() is not None)
                if out and out[-1][1:] == key:
                    out[-1] = (out[-1][0] + fragment.text(), *key)
                else:
                    out.append((fragment.text(), *key))
            it += 1
    return out


@pytest.mark.parametrize("seed", range(12))
def test_streamed_round_by_round_equals_the_whole_reply_laid_out_at_once(qapp, seed):
    rng = random.Random(seed)
    tokens = tokens_of(CORPUS, rng, ghosts=seed % 3 != 0)
    whole, _ = lay_out(tokens, lambda: len(tokens))
    streamed, layout = lay_out(tokens, lambda: rng.randint(1, 4))
    assert committed_runs(streamed) == committed_runs(whole)
    ghosts = [t for t in tokens if t.status is TokenStatus.REJECTED]
    assert streamed.toPlainText().count("zz↵") == len(ghosts) == whole.toPlainText().count("zz↵")
    assert layout.appends > layout.relayouts  # most rounds only extend the layout
    # what is drawn (ghosts aside) is Qt's own layout of the Markdown, soft line breaks as line breaks
    reference = QTextDocument()
    reference.setMarkdown(CORPUS, FEATURES)
    drawn = streamed.toPlainText().replace("zz↵", "").replace("\u2028", " ")

    def words(text):
        return re.sub(r"\s+", " ", text.replace("Assistant", "", 1)).strip()

    assert words(drawn) == words(reference.toPlainText())


def test_only_the_block_being_streamed_is_written_again(qapp):
    """A 60-paragraph reply streamed a token at a time: the characters written in all stay within a few times
    the reply's length (a paragraph is laid out again when its emphasis opens or closes); a whole-reply
    re-render per round would write about rounds × length / 2 of them, here some 3.5 million."""
    paragraphs = [f"Paragraph {i} says **something** about item {i}, with `code` and *style*." for i in range(60)]
    source = "\n\n".join(paragraphs)
    tokens = tokens_of(source, random.Random(3), ghosts=True)
    document, layout = lay_out(tokens, lambda: 1)
    length = document.characterCount()
    assert layout.copied < 8 * length, (layout.copied, length)
    assert layout.live_source > len(source) - len(paragraphs[-1]) - 4  # the live region is the last paragraph


def test_the_code_blocks_copy_button_copies_its_code_only(make_window, reply_words, qtbot):
    reply_words(CODE_REPLY)
    window = make_window()
    window.controls.apply(method="draft-model", draft="default", k=3, max_new_tokens=len(CODE_REPLY))
    with qtbot.waitSignal(window.reply_finished, timeout=WAIT_MS):
        assert window.send("code please")
    view = window.transcript
    code = next(b for b in _blocks(view.document()) if is_code(b))
    cursor = QTextCursor(code)
    view.setTextCursor(cursor)
    view.ensureCursorVisible()
    qtbot.wait(1)
    rect = view.cursorRect(cursor)
    qtbot.mouseMove(view.viewport(), QPoint(rect.left() + 4, rect.center().y()))
    qtbot.waitUntil(view.copy_code_button.isVisible, timeout=WAIT_MS)
    QGuiApplication.clipboard().clear()
    with qtbot.waitSignal(view.code_copied, timeout=WAIT_MS):
        qtbot.mouseClick(view.copy_code_button, Qt.MouseButton.LeftButton)
    assert QGuiApplication.clipboard().text() == "def reverse(text):\n    return text[::-1]"


def test_the_compare_panes_lay_replies_out_as_markdown(make_window, reply_words, qtbot):
    reply_words(CODE_REPLY)
    window = make_window()
    compare = window.open_compare()
    qtbot.addWidget(compare)
    compare.set_specs([parse_spec("prompt-lookup:k=3")])
    compare.prompt.setPlainText("code please")
    compare.max_new_tokens.setValue(len(CODE_REPLY))
    with qtbot.waitSignal(compare.comparison_finished, timeout=WAIT_MS):
        assert compare.run_comparison()
    for pane in compare.panes:
        document = pane.transcript.document()
        code = [b for b in _blocks(document) if is_code(b)]
        assert [b.text() for b in code if b.text()] and "```" not in document.toPlainText()
        serials = {f.charFormat().property(theme.TOKEN_SERIAL_PROPERTY) for b in code for f in _fragments(b)}
        assert any(isinstance(s, int) for s in serials)
        assert not any(f.charFormat().isAnchor() for b in _blocks(document) for f in _fragments(b))  # no links


def _fragments(block):
    it = block.begin()
    while not it.atEnd():
        yield it.fragment()
        it += 1


def test_an_unfinished_code_block_is_code_while_it_streams(qapp):
    tokens = tokens_of("Look:\n\n```\nx = 1\ny = 2", random.Random(1), ghosts=False)
    document, _ = lay_out(tokens, lambda: 2)
    code = [b.text() for b in _blocks(document) if b.blockFormat().hasProperty(QTextFormat.Property.BlockCodeFence)]
    assert code == ["x = 1", "y = 2"]
