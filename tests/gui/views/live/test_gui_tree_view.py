"""A tree round on screen: the round tree view draws its branches side by side (one column per path, the kept
path on the left, marked by solid coloured lines; the others dashed), every node's figures, why each branch ended;
it scrolls sideways when the columns don't fit; the timeline's bar and a token's tooltip say what the tree was;
the transcript draws in the text only the drafts turned down where the reply goes on."""

import dataclasses

from PySide6.QtGui import QColor

from engine.core.events import TokenStatus
from engine.core.tokens import fold_round
from fakes import fake_detail
from gui import theme
from gui.sessions.round_tree import prob_text
from gui.sessions.rounds import RoundRecord
from gui.sessions.session_model import Turn
from gui.views.chat.token_tooltip import describe_token
from gui.views.chat.transcript import TranscriptView
from gui.views.live.round_tree import KEPT_PATH_CAPTION, RoundTreeView
from gui.views.live.timeline import round_tooltip
from gui.views.live.tree_grid import grid_width
from gui.views.live.tree_painter import LineItem, TokenItem
from tree_events import tree_event


def tree_record(bonus=False) -> RoundRecord:
    return RoundRecord(1, tree_event(bonus, record=lambda e: fake_detail(e, True)), ())


def view_of(qtbot, record, width=900, palette=theme.LIGHT) -> RoundTreeView:
    view = RoundTreeView(palette)
    qtbot.addWidget(view)
    view.resize(width, 900)
    view.show()
    view.show_round(record)
    return view


def grid_tokens(view) -> list[TokenItem]:
    """The grid's token items (the kept path's list under the grid repeats its nodes: left out)."""
    sketch = view.canvas.sketch()
    caption = next(item.rect.top() for item in sketch.items if getattr(item, "text", "") == KEPT_PATH_CAPTION)
    return [item for item in sketch.items if isinstance(item, TokenItem) and item.rect.top() < caption]


def test_the_branches_stand_side_by_side_one_column_per_path(qtbot):
    for bonus in (False, True):
        record = tree_record(bonus)
        view = view_of(qtbot, record)
        tokens = grid_tokens(view)
        columns = {round(item.rect.center().x()) for item in tokens}
        assert len(columns) == len(view.tree.paths)
        assert len(tokens) == len(record.event.draft_ids) + 1  # every node once, and the target's token
        left = min(columns)
        kept = sorted((item for item in tokens if round(item.rect.center().x()) == left), key=lambda i: i.rect.top())
        assert [item.text for item in kept] == [f"“{n.piece}”" for n in view.tree.paths[0].nodes]
        assert len({round(item.rect.top()) for item in tokens}) == max(record.event.depths) + 1 + bonus  # by depth


def test_the_kept_path_is_marked_and_every_branch_says_why_it_ended(qtbot):
    view = view_of(qtbot, tree_record())
    lines = [item for item in view.canvas.sketch().items if isinstance(item, LineItem)]
    solid = [line for line in lines if not line.dashed and line.colour == theme.LIGHT.series_bars]
    assert len(solid) >= 3 and any(line.dashed for line in lines)  # the root → a → d → T; the branches dashed
    text = view.text()
    for path in view.tree.paths:
        assert path.ending in text
    assert "branch 1 (off “ d”):" in text and "branch 4 (off the text so far):" in text
    row = next(r for r in view.rows() if "“ g” rejected draft" in r)
    assert f"p_target {prob_text(0.1)}" in row and "p_draft 0.520" in row and "min(1, p/q) 0.192" in row
    image = view.canvas.grab().toImage()
    colours = {image.pixelColor(x, y).name() for x in range(0, image.width(), 2) for y in range(0, image.height(), 2)}
    assert QColor(theme.LIGHT.status(TokenStatus.SUBSTITUTED).background).name() in colours


def test_a_narrow_view_scrolls_sideways_and_lists_the_kept_path_at_its_width(qtbot):
    record = tree_record()
    view = view_of(qtbot, record, width=420)
    assert view.canvas.minimumWidth() == grid_width(view.tree) > 420
    view.show_round(RoundRecord(1, dataclasses.replace(record.event, tree_parents=()), ()))
    assert view.canvas.minimumWidth() == 0  # a chain wraps to the view as before


def test_the_timeline_and_the_tooltip_tell_a_tree_round(qtbot):
    record = tree_record()
    assert "tree of 9 nodes verified, depth 3, kept 2" in round_tooltip(record)
    tokens = [dataclasses.replace(t, serial=i) for i, t in enumerate(fold_round(record.event))]
    by_text = {t.text: t for t in tokens}
    assert "kept path, depth 2 of 3; 1 sibling drafted beside it" in describe_token(by_text[" d"], lambda s: record)
    assert " b" not in by_text and " h" not in by_text  # off the line below the kept tip: the tree view's
    ghost = describe_token(by_text[" g"], lambda s: record)
    assert "a branch off the kept path, depth 3 of 3" in ghost and "recorded along the kept path only" in ghost
    correction = describe_token(by_text[" T"], lambda s: record)
    assert "replaced the 2 drafted children turned down here: “ g”" in correction and "“ h”" in correction


def test_the_transcript_draws_only_the_drafts_turned_down_where_the_reply_goes_on(qtbot):
    record = tree_record()
    tokens = [dataclasses.replace(t, serial=i) for i, t in enumerate(fold_round(record.event))]
    view = TranscriptView(lambda serial: tokens[serial], theme.LIGHT, round_of=lambda serial: record)
    qtbot.addWidget(view)
    view.begin_assistant(Turn(role="assistant", spec_label="draft-model:k=3,tree=9"))
    view.append_tokens(tokens)
    drawn = view.toPlainText().splitlines()[-1]
    assert drawn.replace(" ", "") == "adgT"  # the kept path, then g (the tip's first child), then the target's
    chain = TranscriptView(lambda serial: tokens[serial], theme.LIGHT)  # no rounds known: the fold's ghosts alone
    qtbot.addWidget(chain)
    chain.begin_assistant(Turn(role="assistant"))
    chain.append_tokens(tokens)
    assert chain.toPlainText().splitlines()[-1].replace(" ", "") == "adgT"


def test_a_focused_node_is_highlighted_and_scrolled_into_sight(qtbot):
    record = tree_record()
    view = view_of(qtbot, record, width=420)
    view.show_round(record, 3)  # “ c”, the last column, off the view's right edge
    focus = view.canvas.sketch().focus_rect
    assert focus is not None and focus.left() > 420 and view.scroll.horizontalScrollBar().value() > 0
