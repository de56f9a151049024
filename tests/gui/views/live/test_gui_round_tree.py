"""The round's tree: the view shows every drafted token with its p_target, p_draft and min(1, p/q), the target's
top-5 at each position and the residual at a sampled substitution, says why the round ended, says so where the
round has no recorded tree; the live panel follows the picked round and steps to its neighbours; the token
popover opens for a round on the screen and closes on Esc."""

import dataclasses

from PySide6.QtCore import QPoint, QRect, Qt
from PySide6.QtGui import QColor, QGuiApplication

from engine.core.events import RoundVerified, TokenStatus
from engine.core.sampling import acceptance_probability
from fakes import fake_detail
from gui import theme
from gui.sessions.rounds import RoundRecord
from gui.sessions.session_model import LiveStats
from gui.views.chat.token_popover import TokenPopover, popover_rect
from gui.sessions.round_tree import GREEDY_RULE, NOT_RECORDED, RESIDUAL_CAPTION, SAMPLED_RULE, prob_text
from gui.views.live.panel import LivePanel, LiveSnapshot, RoundFocusPanel
from gui.views.live.round_tree import EMPTY_TEXT, RoundTreePanel, RoundTreeView
from gui.views.main.round_focus import RoundFocus

WAIT_MS = 10_000


def event(*, index=5, drafter="draft-model", n_drafted=4, n_accepted=2, one_hot=False, rollback=0.0007):
    """A round with distinct figures: drafted ids 100+i (“d0”…), the target's token 200 (“T”)."""
    ids = tuple(100 + i for i in range(n_drafted))
    pieces = tuple(f" d{i}" for i in range(n_drafted))
    p_target = tuple(0.93 - 0.11 * i if i < n_accepted else 0.031 + 0.01 * i for i in range(n_drafted))
    p_draft = tuple(None if one_hot else 0.81 - 0.07 * i for i in range(n_drafted))
    status = (TokenStatus.PLAIN if not n_drafted else
              TokenStatus.BONUS if n_accepted == n_drafted else TokenStatus.SUBSTITUTED)
    committed = ids[:n_accepted] + (200,)
    return RoundVerified(
        index=index, drafter=drafter if n_drafted else "target", draft_ids=ids, draft_pieces=pieces,
        n_accepted=n_accepted, target_id=200, target_status=status, target_piece=" T", p_target=p_target,
        p_draft=p_draft, p_target_of_target_id=0.64, committed_ids=committed,
        committed_pieces=pieces[:n_accepted] + (" T",), draft_seconds=0.0032, verify_seconds=0.0181,
        elapsed_seconds=1.0, n_committed_total=30, rollback_seconds=rollback)


def recorded(ev: RoundVerified, greedy: bool = True) -> RoundRecord:
    return RoundRecord(1, dataclasses.replace(ev, detail=fake_detail(ev, greedy)), ())


def view_of(qtbot, record, focus=None, palette=theme.LIGHT) -> RoundTreeView:
    view = RoundTreeView(palette)
    qtbot.addWidget(view)
    view.resize(460, 700)
    view.show()
    view.show_round(record, focus)
    return view


def drafted_nodes(view):
    nodes = [node for path in view.tree.paths for node in path.nodes if node.drafted]
    return sorted(nodes, key=lambda node: node.position)


def test_each_drafted_token_shows_its_probabilities_and_acceptance(qtbot):
    ev = event()
    view = view_of(qtbot, recorded(ev))
    nodes = drafted_nodes(view)
    assert [node.piece for node in nodes] == list(ev.draft_pieces)
    assert [node.status for node in nodes] == [TokenStatus.ACCEPTED] * 2 + [TokenStatus.REJECTED] * 2
    rows = view.rows()
    for i, node in enumerate(nodes):
        assert (node.p_target, node.p_draft) == (ev.p_target[i], ev.p_draft[i])
        assert node.acceptance == acceptance_probability(ev.p_target[i], ev.p_draft[i])
        row = next(row for row in rows if row.strip().startswith(f"position {i + 1} “ d{i}”"))
        assert f"p_target {prob_text(ev.p_target[i])}" in row and f"p_draft {prob_text(ev.p_draft[i])}" in row
        assert f"min(1, p/q) {prob_text(node.acceptance)}" in row
    # the rejected draft at position 3 is a branch off the committed path, which ends on the target's token
    committed, branch = view.tree.paths
    assert [node.piece for node in committed.nodes] == [" d0", " d1", " T"] and branch.fork == 2
    assert committed.nodes[-1].status is TokenStatus.SUBSTITUTED and committed.nodes[-1].position == 2
    assert "disagreed at draft position 3 of 4" in view.text() and "not its argmax" in view.text()
    assert GREEDY_RULE in rows and "draft 3.2 ms · verify 17.4 ms · rollback 0.70 ms" in rows
    assert "kept: the target's argmax" in rows[rows.index(next(r for r in rows if r.startswith("position 1")))]


def test_the_top_five_alternatives_are_the_recorded_ones(qtbot):
    for ev in (event(), event(n_accepted=4)):  # a substitution, then a bonus
        record = recorded(ev)
        view = view_of(qtbot, record)
        committed = view.tree.paths[0]
        assert len(committed.nodes) == ev.n_accepted + 1
        for node in committed.nodes:
            at = record.position_detail(node.position)
            assert [(c.token_id, c.prob, c.piece) for c in node.alternatives] == \
                list(zip(at.target.ids, at.target.probs, at.target.pieces))
            assert node.entropy_bits == at.entropy_bits
            taken = ev.target_id if not node.drafted else ev.draft_ids[node.position]
            assert [c.token_id for c in node.alternatives if c.mark == "chosen"] == [taken]
            shown = "  target's top-5: " + ", ".join(
                f"“{piece}” {prob_text(prob)}" + (" (chosen)" if token_id == taken else "")
                for token_id, prob, piece in zip(at.target.ids, at.target.probs, at.target.pieces))
            assert shown in view.rows()
    assert view.tree.paths[0].nodes[-1].status is TokenStatus.BONUS and len(view.tree.paths) == 1
    assert "All kept" in view.text() and "bonus token “ T”" in view.text()


def test_a_sampled_substitution_shows_the_draws_and_the_residual(qtbot):
    ev = event()
    record = recorded(ev, greedy=False)
    view = view_of(qtbot, record)
    nodes = drafted_nodes(view)
    assert [node.draw for node in nodes[:3]] == [record.position_detail(i).draw for i in range(3)]
    assert "u 0.100 < " in nodes[0].verdict and "✓" in nodes[0].verdict
    assert f"u 0.970 ≥ {prob_text(nodes[2].acceptance)}" in nodes[2].verdict and "✗" in nodes[2].verdict
    assert "thrown away with position 3" in nodes[3].verdict
    target = view.tree.paths[0].nodes[-1]
    residual = record.position_detail(2).residual
    assert [(c.token_id, c.prob) for c in target.residual] == list(zip(residual.ids, residual.probs))
    assert target.residual[0].mark == "chosen" and target.verdict == "drawn from max(0, p − q)"
    rows = view.rows()
    assert SAMPLED_RULE in rows
    assert f"  {RESIDUAL_CAPTION}: “ T” 0.700 (chosen), “w11” 0.100" in " ".join(rows)
    assert f"u 0.970 ≥ min(1, p/q) {prob_text(nodes[2].acceptance)}" in view.text()
    greedy = view_of(qtbot, recorded(ev, greedy=True))
    assert RESIDUAL_CAPTION not in greedy.text() and all(node.draw is None for node in drafted_nodes(greedy))


def test_a_round_without_a_recorded_tree_shows_what_its_event_has(qtbot):
    ev = event(drafter="prompt-lookup", n_drafted=3, n_accepted=3, one_hot=True)
    view = view_of(qtbot, RoundRecord(1, ev, ()))
    rows = view.rows()
    assert NOT_RECORDED in rows
    assert rows[0] == "Round 5 · prompt lookup (n-gram) · drafted 3, kept 3"
    for node in drafted_nodes(view):
        assert node.alternatives == () and node.p_draft is None
        assert node.acceptance == acceptance_probability(node.p_target, None) == node.p_target
    assert "p_draft 1 (one-hot, n-gram)" in view.text() and "target's top-5" not in view.text()
    recorded_view = view_of(qtbot, recorded(event()))
    assert NOT_RECORDED not in recorded_view.rows()


def test_a_plain_step_and_no_round(qtbot):
    view = view_of(qtbot, recorded(event(index=0, n_drafted=0, n_accepted=0)))
    assert view.rows()[0] == "Round 0 (prefill) · the target alone"
    assert "Plain step: the prefill round" in view.text()
    (node,) = view.tree.paths[0].nodes
    assert node.status is TokenStatus.PLAIN and node.position is None and len(node.alternatives) == 5
    view.show_round(None)
    assert view.rows() == [EMPTY_TEXT] and view.tree is None


def test_the_focused_position_is_highlighted_and_both_themes_paint_the_statuses(qtbot):
    record = recorded(event())
    view = view_of(qtbot, record, focus=1)
    assert view.canvas.sketch().focus_rect is not None
    view.show_round(record, None)
    assert view.canvas.sketch().focus_rect is None
    for palette in (theme.LIGHT, theme.DARK):
        view.set_palette(palette)
        view.show_round(record, 1)
        image = view.canvas.grab().toImage()
        colours = {image.pixelColor(x, y).name() for x in range(0, image.width(), 2)
                   for y in range(0, image.height(), 2)}
        for status in (TokenStatus.ACCEPTED, TokenStatus.SUBSTITUTED):
            assert QColor(palette.status(status).background).name() in colours, (palette.name, status)
        assert QColor(palette.surface).name() in colours


def live_stats(events) -> LiveStats:
    live = LiveStats()
    for ev in events:
        live.add_round(ev, RoundRecord(1, ev, ()))
    return live


def test_the_panel_shows_the_latest_round_while_a_reply_streams(qtbot):
    panel = RoundTreePanel(theme.LIGHT)
    qtbot.addWidget(panel)
    assert isinstance(panel, LivePanel) and isinstance(panel, RoundFocusPanel) and panel.name == "tree"
    live = live_stats([event(index=i) for i in range(3)])
    panel.update_from(LiveSnapshot(live, None, None, tick=True))
    assert panel.view.record is live.rounds[-1] and "latest round" in panel.caption.text()
    assert panel.prev_button.isEnabled() and not panel.next_button.isEnabled()
    ev = event(index=3)
    live.add_round(ev, RoundRecord(1, ev, ()))
    panel.update_from(LiveSnapshot(live, None, None, tick=True))
    assert panel.view.record is live.rounds[-1] and panel.view.record.index == 3
    panel.clear()
    assert panel.view.rows() == [EMPTY_TEXT] and not panel.prev_button.isEnabled()


def test_the_panel_follows_the_picked_round_and_steps_to_its_neighbours(make_window, send_and_wait, qtbot):
    window = make_window()
    window.controls.apply(method="draft-model", draft="default", k=3, max_new_tokens=40)
    send_and_wait(window)
    rounds = window.session.live.rounds
    assert len(rounds) >= 4 and all(record.detail is not None for record in rounds)
    panel = RoundTreePanel(theme.LIGHT)
    qtbot.addWidget(panel)
    focus = RoundFocus(window.session)
    focus.attach(panel)
    panel.update_from(window.live.snapshot())
    assert panel.view.record is rounds[-1] and "last round" in panel.caption.text()
    focus.select(rounds[2])
    assert panel.view.record is rounds[2] and f"round {rounds[2].index} of {len(rounds)}" in panel.caption.text()
    with qtbot.waitSignal(panel.round_selected, timeout=WAIT_MS) as picked:
        panel.prev_button.click()
    assert picked.args == [rounds[1]] and focus.selected is rounds[1] and panel.view.record is rounds[1]
    panel.prev_button.click()
    assert panel.view.record is rounds[0] and not panel.prev_button.isEnabled()
    with qtbot.waitSignal(panel.round_selected, timeout=WAIT_MS) as picked:
        panel.next_button.click()
    assert picked.args == [rounds[1]] and panel.view.record is rounds[1]
    focus.select(rounds[-1])
    assert not panel.next_button.isEnabled()
    with qtbot.assertNotEmitted(panel.round_selected):
        panel.next_button.click()
    focus.clear()
    assert panel.view.record is rounds[-1]  # nothing picked: the reply's last round again


def test_the_popover_opens_for_a_round_on_the_screen_and_closes_on_escape(qtbot):
    record = recorded(event())
    popover = TokenPopover(theme.DARK)
    qtbot.addWidget(popover)
    screen = QGuiApplication.primaryScreen().availableGeometry()
    for point in (screen.center(), screen.bottomRight(), screen.topLeft()):
        popover.show_for(record, 2, point)
        qtbot.waitExposed(popover)
        assert popover.isVisible() and popover.view.record is record and popover.view.focus_position == 2
        assert screen.contains(popover.geometry()), (point, popover.geometry())
        qtbot.keyClick(popover, Qt.Key.Key_Escape)
        qtbot.waitUntil(lambda: not popover.isVisible(), timeout=WAIT_MS)


def test_the_popover_opens_below_the_point_else_above_and_shrinks_to_the_screen():
    screen = QRect(0, 0, 1280, 720)
    below = popover_rect((460, 300), QPoint(100, 100), screen)
    assert below.top() > 100 and below.size().toTuple() == (460, 300)
    above = popover_rect((460, 300), QPoint(1270, 700), screen)
    assert above.bottom() < 700 and screen.contains(above)
    tall = popover_rect((460, 2000), QPoint(600, 360), screen)
    assert screen.contains(tall) and tall.top() > 360 and tall.height() == 720 - 374
    short_screen = QRect(0, 0, 1280, 400)  # no room on either side: the whole screen's height, over the point
    cramped = popover_rect((460, 2000), QPoint(600, 200), short_screen)
    assert cramped == QRect(600 - 24, 0, 460, 400)


def test_a_tall_popover_shrinks_to_the_roomier_side_rather_than_cover_the_token():
    screen = QRect(0, 0, 1280, 800)
    rect = popover_rect((460, 560), QPoint(300, 300), screen)  # 486 px below, 286 above
    assert rect.top() > 300 and rect.bottom() <= 799 and rect.height() == 800 - 314
    rect = popover_rect((460, 560), QPoint(300, 600), screen)  # 186 px below, 586 above
    assert rect.bottom() < 600 and rect.height() == 560
