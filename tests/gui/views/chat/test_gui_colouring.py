"""Colour by (gui/views/chat/colouring.py): each mode's figure of a token is gui.sessions.rounds' (and the engine's
acceptance probability); changing the mode re-renders the transcript in the scale's colours, status cues kept, and
status mode draws today's formats; the legend's gradient; the tooltip's alternatives and min(1, p/q); the
transcript's hover and click signals and the round highlight (an overlay, the document unchanged)."""

import dataclasses

import pytest
from PySide6.QtCore import QEvent, QPoint, Qt
from PySide6.QtGui import QColor, QHelpEvent, QTextCharFormat, QTextCursor
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QToolTip

from engine.core.events import TokenStatus
from engine.core.sampling import acceptance_probability
from gui import theme
from gui.sessions.rounds import RoundRecord, token_acceptance, token_confidence, token_entropy
from gui.views.chat import colouring
from gui.views.chat.transcript import describe_token
from transcript_probe import background, fragments

WAIT_MS = 10_000
DRAFTED = (TokenStatus.ACCEPTED, TokenStatus.REJECTED)


@pytest.fixture
def replied(make_window, send_and_wait):
    """A window with one draft-model reply (every status; the fake engine records each round's tree)."""
    window = make_window()
    window.controls.apply(method="draft-model", draft="default", k=4, max_new_tokens=40)
    turn = send_and_wait(window)
    assert turn.rounds and all(record.detail is not None for record in turn.rounds)
    return window, turn


def pick(window, mode: str) -> None:
    combo = window.legend.colour_by
    combo.setCurrentIndex(combo.findData(mode))


def drawn(window) -> dict[int, QTextCharFormat]:
    return {token.serial: fmt for token, fmt, text, _ in fragments(window) if text.strip()}


def test_each_modes_value_is_the_rounds_figure(replied):
    window, turn = replied
    round_of = window.session.round_of
    seen = set()
    for token in turn.tokens:
        record = round_of(token.serial)
        assert record is not None and token.serial in record.serials
        acceptance = colouring.token_value("acceptance", token, round_of)
        entropy = colouring.token_value("entropy", token, round_of)
        confidence = colouring.token_value("confidence", token, round_of)
        assert colouring.token_value("status", token, round_of) is None
        assert acceptance == token_acceptance(token) and confidence == token_confidence(token)
        decided = token.position is None or token.position <= record.n_accepted  # recorded where the target decided
        assert entropy == token_entropy(token, record)
        assert entropy == (record.position_detail(token.position).entropy_bits if decided else None)
        if token.status in DRAFTED:
            assert acceptance == acceptance_probability(token.p_target, token.p_draft) \
                == pytest.approx(min(1.0, token.p_target / token.p_draft))
            assert confidence == token.p_draft
        else:
            assert acceptance is None and confidence is None  # the target's own token: no value
        seen.add(token.status)
    assert seen == set(theme.LEGEND_ORDER)
    # a round whose tree was not recorded has no entropy
    record = turn.rounds[1]
    bare = RoundRecord(record.turn, dataclasses.replace(record.event, detail=None), record.serials)
    token = window.session.tokens[record.serials[0]]
    assert colouring.token_value("entropy", token, lambda _serial: bare) is None
    assert background(colouring.token_formatter("entropy", theme.LIGHT, lambda _serial: bare)(token)) is None


def test_a_one_hot_draft_counts_p_draft_as_one(make_window, send_and_wait):
    window = make_window()
    window.controls.apply(method="prompt-lookup", k=3, max_new_tokens=30)
    turn = send_and_wait(window)
    accepted = next(t for t in turn.tokens if t.status is TokenStatus.ACCEPTED)
    assert accepted.p_draft is None
    assert colouring.token_value("acceptance", accepted) == min(1.0, accepted.p_target)
    assert colouring.token_value("confidence", accepted) is None  # no distribution: no value


def test_changing_the_colouring_re_renders_in_the_scales_colours(replied, qtbot):
    window, turn = replied
    palette = theme.LIGHT
    status_formats = drawn(window)
    tokens = window.session.tokens
    for serial, fmt in status_formats.items():  # today's look
        token = tokens[serial]
        expected = theme.token_format(palette, token.status, serial % 2 == 1, serial)
        assert background(fmt) == background(expected) and fmt.fontStrikeOut() == expected.fontStrikeOut()
    for mode in ("acceptance", "entropy", "confidence"):
        with qtbot.waitSignal(window.legend.colouring_changed, timeout=WAIT_MS) as blocker:
            pick(window, mode)
        assert blocker.args == [mode] and window.transcript.colouring == mode
        chosen = colouring.mode(mode)
        formats = drawn(window)
        assert set(formats) == set(status_formats)
        for serial, fmt in formats.items():
            token = tokens[serial]
            value = colouring.token_value(mode, token, window.session.round_of)
            want = None if value is None else \
                colouring.scale_colour(chosen.stops(palette), chosen.fraction(value)).name()
            assert background(fmt) == want, (mode, token)
            # the status stays visible: struck-through ghosts, underlined corrections and bonus tokens
            assert fmt.fontStrikeOut() == (token.status is TokenStatus.REJECTED)
            assert fmt.underlineStyle() == status_formats[serial].underlineStyle()
        assert any(background(formats[s]) != background(status_formats[s]) for s in formats)
        assert len({background(f) for f in formats.values()} - {None}) > 1  # a scale, not one colour
        if mode == "entropy":  # every round was recorded: every token the target decided has a value
            for serial, f in formats.items():
                token, record = tokens[serial], window.session.round_of(serial)
                decided = token.position is None or token.position <= record.n_accepted
                assert (background(f) is not None) == decided, token
    pick(window, "status")
    assert {s: background(f) for s, f in drawn(window).items()} == \
        {s: background(f) for s, f in status_formats.items()}


def test_a_new_reply_streams_in_the_chosen_colouring(make_window, send_and_wait):
    window = make_window()
    window.set_colouring("acceptance")
    assert window.legend.colouring == "acceptance" and window.legend.scale_legend.isVisibleTo(window.legend)
    window.controls.apply(method="draft-model", draft="default", k=4, max_new_tokens=30)
    send_and_wait(window)
    for serial, fmt in drawn(window).items():
        token = window.session.tokens[serial]
        if token.status is TokenStatus.SUBSTITUTED:
            assert background(fmt) is None  # the target's own token has no acceptance probability
        if token.status is TokenStatus.ACCEPTED:
            stops = theme.LIGHT.scale_probability
            assert background(fmt) == colouring.scale_colour(stops, token_acceptance(token)).name()


def test_the_legend_shows_a_gradient_with_its_ends_in_a_scale_mode(make_window):
    window = make_window()
    legend = window.legend
    assert all(chip.isVisibleTo(legend) for chip in legend.chips.values())
    assert not legend.scale_legend.isVisibleTo(legend)
    tips = [legend.colour_by.itemData(i, Qt.ItemDataRole.ToolTipRole) for i in range(legend.colour_by.count())]
    assert [legend.colour_by.itemText(i) for i in range(legend.colour_by.count())] == \
        ["Status", "Acceptance probability", "Target entropy", "Draft confidence"]
    assert "min(1, p_target / p_draft)" in tips[1] and "p_draft = 1" in tips[1]
    assert "bits" in tips[2] and "recorded" in tips[2] and "drafter's probability" in tips[3]
    pick(window, "entropy")
    scale = legend.scale_legend
    assert not any(chip.isVisibleTo(legend) for chip in legend.chips.values()) and scale.isVisibleTo(legend)
    assert (scale.low.text(), scale.high.text()) == ("0 bits", "8+ bits")
    assert legend.colour_by.short_label() == "Entropy"  # the closed box; the list names it in full
    assert scale.strip.stops == theme.LIGHT.scale_entropy and scale.no_value.isVisibleTo(legend)
    image = scale.strip.grab().toImage()
    left, right = image.pixelColor(3, image.height() // 2), image.pixelColor(image.width() - 4, image.height() // 2)
    for got, stop in ((left, theme.LIGHT.scale_entropy[0]), (right, theme.LIGHT.scale_entropy[-1])):
        assert abs(got.red() - QColor(stop).red()) + abs(got.blue() - QColor(stop).blue()) < 40
    pick(window, "acceptance")
    assert (scale.low.text(), scale.high.text()) == ("0", "1")
    assert scale.strip.stops == theme.LIGHT.scale_probability
    window.set_theme("dark")
    assert scale.strip.stops == theme.DARK.scale_probability
    pick(window, "status")
    assert all(chip.isVisibleTo(legend) for chip in legend.chips.values()) and not scale.isVisibleTo(legend)


def test_the_tooltip_names_the_targets_alternatives_and_the_acceptance_probability(replied, qtbot):
    window, turn = replied
    round_of = window.session.round_of
    token = next(t for t in turn.tokens if t.status is TokenStatus.ACCEPTED)
    detail = round_of(token.serial).position_detail(token.position)
    text = describe_token(token, round_of)
    assert "target's top 3 here" in text and all(f"“{piece}”" in text for piece in detail.target.pieces[:3])
    assert f"“{detail.target.pieces[3]}”" not in text
    assert f"min(1, p_target / p_draft) {acceptance_probability(token.p_target, token.p_draft):.3f}" in text
    assert f"{detail.entropy_bits:.2f} bits" in text and "not recorded" not in text
    plain = next(t for t in turn.tokens if t.status is TokenStatus.PLAIN)
    assert "min(1," not in describe_token(plain, round_of)
    for no_record in (describe_token(token), describe_token(token, lambda _serial: None)):
        assert "alternatives not recorded" in no_record and "top 3" not in no_record
    # the view's own tooltip asks the session for the round
    view = window.transcript
    position = next(p for t, _, text, p in fragments(window) if t.serial == token.serial)
    point = on_screen(view, position)
    QApplication.sendEvent(view.viewport(), QHelpEvent(QEvent.Type.ToolTip, point, view.viewport().mapToGlobal(point)))
    qtbot.waitUntil(QToolTip.isVisible, timeout=WAIT_MS)
    assert "target's top 3 here" in QToolTip.text()
    QToolTip.hideText()


def on_screen(view, position: int) -> QPoint:
    """A viewport point on the character after document position `position`, scrolled into view."""
    cursor = QTextCursor(view.document())
    cursor.setPosition(position + 1)
    view.setTextCursor(cursor)
    view.ensureCursorVisible()
    rect = view.cursorRect(cursor)
    return QPoint(rect.left() - 3, rect.center().y())


def test_hovering_and_clicking_a_token_emit_its_serial(replied, qtbot):
    window, turn = replied
    view = window.transcript
    hovered, clicked = [], []
    view.token_hovered.connect(hovered.append)
    view.token_clicked.connect(lambda serial, where: clicked.append((serial, where)))
    token, position = next((t, p) for t, _, text, p in fragments(window)
                           if t.status is TokenStatus.ACCEPTED and len(text.strip()) > 2)
    point = on_screen(view, position + 1)
    assert view.serial_at(point) == token.serial
    QTest.mouseMove(view.viewport(), point)
    qtbot.waitUntil(lambda: hovered == [token.serial], timeout=WAIT_MS)
    QTest.mouseMove(view.viewport(), point + QPoint(1, 0))  # the same token: no new signal
    QTest.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, point)
    assert [serial for serial, _ in clicked] == [token.serial]
    assert clicked[0][1] == view.viewport().mapToGlobal(point)
    empty = QPoint(view.viewport().width() // 2, view.viewport().height() - 5)  # below the text
    assert view.serial_at(empty) == -1
    QTest.mouseMove(view.viewport(), empty)
    qtbot.waitUntil(lambda: hovered == [token.serial, -1], timeout=WAIT_MS)
    QTest.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, empty)
    assert len(clicked) == 1


def covered(view) -> dict[int, list]:
    """serial -> the extra selections' (start, end, overline, box colour) over its characters."""
    out = {}
    for selection in view.extraSelections():
        cursor = selection.cursor
        start, end = cursor.selectionStart(), cursor.selectionEnd()
        probe = QTextCursor(view.document())
        probe.setPosition(start + 1)
        serial = probe.charFormat().property(theme.TOKEN_SERIAL_PROPERTY)
        out.setdefault(serial, []).append((start, end, selection.format.fontOverline(),
                                           selection.format.background().color().name()))
    return out


def test_highlight_round_overlays_exactly_the_rounds_tokens(replied, send_and_wait):
    window, first_turn = replied
    second_turn = send_and_wait(window, "And again")  # the scan must find rounds of either reply
    view = window.transcript
    before = [(t.serial, background(f), text, p) for t, f, text, p in fragments(window)]
    spans = {}
    for token, _, text, position in fragments(window):
        spans.setdefault(token.serial, []).append((position, position + len(text)))
    hovered = next(r for r in first_turn.rounds if r.n_drafted and r.n_accepted < r.n_drafted)
    selected = second_turn.rounds[3]
    view.highlight_round(hovered.serials, selected.serials)
    got = covered(view)
    assert set(got) == {s for s in hovered.serials + selected.serials if s in spans}
    own_box = {serial: box or theme.LIGHT.surface for serial, box, _, _ in before}
    for serial, ranges in got.items():
        assert [(a, b) for a, b, _, _ in ranges] == spans[serial]
        assert all(overline == (serial in selected.serials) for _, _, overline, _ in ranges)
        assert all(box != own_box[serial] for *_, box in ranges)  # tinted
    assert [(t.serial, background(f), text, p) for t, f, text, p in fragments(window)] == before  # no edit
    # the focus object's call, a re-render keeps it, and nothing clears it
    view.show_focus(None, hovered)
    assert set(covered(view)) == {s for s in hovered.serials if s in spans}
    window.set_colouring("entropy")
    assert set(covered(view)) == {s for s in hovered.serials if s in spans}
    view.show_focus(None, None)
    assert view.extraSelections() == []
