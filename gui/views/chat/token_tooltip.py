"""A token's tooltip in the transcript (rich text): its status, round and draft position (in a tree round: which
branch, how deep, how many siblings were drafted beside it: gui.sessions.round_branches), p_target and p_draft,
min(1, p_target/p_draft) for a drafted token, who proposed it (and, from a draft of another tokenizer,
the draft's own tokens that spelled it), what a correction replaced, and, where its round's
tree was recorded, the target's top 3 alternatives at its position and the entropy there. A draft a server turned
down without naming it (gui.sessions.rounds.unnamed_draft) says so.

May touch: gui.theme's labels, gui.sessions.rounds and .round_branches (a round's recorded detail, the per-token
figures, a tree round's branches), engine.core.tokens' wording. Pure: a token (and its round) in, a string out.
"""

from __future__ import annotations

from html import escape

from engine.core.events import TokenStatus
from engine.core.methods import plain_method
from engine.core.tokens import DisplayToken, draft_position_words
from gui import theme
from gui.sessions.round_branches import branch_words
from gui.sessions.rounds import (SERVER_DRAFTER, UNNAMED_GHOST, RoundRecord, token_acceptance, token_entropy,
                                unnamed_draft)
from gui.views.chat.colouring import RoundLookup

TOP_ALTERNATIVES = 3


def _prob(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _piece(text: str) -> str:
    shown = text.replace("\n", "↵").replace("\t", "⇥")
    return escape(shown if shown.strip() else repr(text))


def describe_token(token: DisplayToken, round_of: RoundLookup | None = None) -> str:
    """The tooltip of a token; `round_of`: a token's serial → its round (SessionModel.round_of), for what the
    target weighed at its position."""
    record = round_of(token.serial) if round_of is not None and token.serial is not None else None
    round_words = f"round {token.round_index}" + (" (prefill)" if token.round_index == 0 else "")
    if unnamed_draft(token):
        return _lines([f"<b>{theme.STATUS_LABELS[token.status]}</b> &nbsp;{UNNAMED_GHOST} &nbsp;(id not said)",
                       round_words, draft_position_words(token),
                       "the server drafted a token here and does not say which (its stream names the tokens it kept)",
                       "proposed by: the server's own drafter"])
    lines = [f"<b>{theme.STATUS_LABELS[token.status]}</b> &nbsp;“{_piece(token.text)}” &nbsp;(id {token.token_id})",
             round_words]
    drafted = token.status in (TokenStatus.ACCEPTED, TokenStatus.REJECTED)
    lines.append((branch_words(record, token.position, drafted) if record is not None else None)
                 or draft_position_words(token))
    if drafted and token.drafter == SERVER_DRAFTER:  # its drafter's probabilities stay on the server
        lines.append(f"p_target {_prob(token.p_target)} &nbsp;·&nbsp; p_draft — (the server does not say)")
        lines.append("proposed by: the server's own drafter")
    elif drafted:
        p_draft = "one-hot (n-gram)" if token.p_draft is None else _prob(token.p_draft)
        lines.append(f"p_target {_prob(token.p_target)} &nbsp;·&nbsp; p_draft {p_draft}")
        q = "1 (one-hot)" if token.p_draft is None else "p_draft"
        lines.append(f"min(1, p_target / {q}) {_prob(token_acceptance(token))}"
                     " &nbsp;(the chance sampling keeps it)")
        lines.append(f"proposed by: {escape(token.drafter)}")
        if token.draft_source:
            lines.append(f"drafted as the draft model's tokens: {_piece(token.draft_source)}")
    else:
        lines.append(f"p_target {_prob(token.p_target)} &nbsp;·&nbsp; p_draft — (not drafted)")
        lines.append("proposed by: the target model" + (f" (round drafter: {escape(token.drafter)})"
                                                        if token.drafter not in ("", plain_method().name) else ""))
    turned_down = turned_down_words(record) if token.status is TokenStatus.SUBSTITUTED else None
    if turned_down:
        lines.append(turned_down)
    elif token.replaced == "" and token.replaced_p_target is None:
        lines.append("replaced a draft the server does not name")
    elif token.replaced is not None:
        p_draft = "one-hot" if token.replaced_p_draft is None else _prob(token.replaced_p_draft)
        lines.append(f"replaced the draft “{_piece(token.replaced)}” "
                     f"(p_target {_prob(token.replaced_p_target)}, p_draft {p_draft})")
    lines += alternatives_lines(token, record)
    return _lines(lines)


def _lines(lines: list[str]) -> str:
    return "<br>".join(f"<nobr>{line}</nobr>" for line in lines)


def turned_down_words(record: RoundRecord | None) -> str | None:
    """A tree round's correction: the drafted children it replaced, those the target turned down under the kept
    path's tip (None: a chain round, whose correction names its one replaced draft)."""
    if record is None or not record.is_tree:
        return None
    event = record.event
    turned = [i for i, parent in enumerate(event.tree_parents) if parent == record.n_accepted - 1
              and i >= record.n_accepted]
    pieces = ", ".join(f"“{_piece(event.draft_pieces[i])}” (p_target {_prob(event.p_target[i])})" for i in turned)
    children = "child" if len(turned) == 1 else "children"
    return f"replaced the {len(turned)} drafted {children} turned down here: {pieces}"


def alternatives_lines(token: DisplayToken, record: RoundRecord | None) -> list[str]:
    """The target's top alternatives at the token's position (the token itself in bold) and the entropy there."""
    if record is not None and record.is_tree and token.status is TokenStatus.REJECTED:
        return ["target's alternatives: recorded along the kept path only"]
    detail = record.position_detail(token.position) if record is not None else None
    if detail is None and record is not None and record.detail is not None:
        return ["nothing decided here: a draft before it was turned down"]
    if detail is None or not detail.target.ids:
        return ["target's alternatives not recorded for this round"]
    target = detail.target
    shown = []
    for token_id, prob, piece in list(zip(target.ids, target.probs, target.pieces))[:TOP_ALTERNATIVES]:
        entry = f"“{_piece(piece)}” {prob:.3f}"
        shown.append(f"<b>{entry}</b>" if token_id == token.token_id else entry)
    entropy = token_entropy(token, record)
    return [f"target's top {len(shown)} here: " + " &nbsp;·&nbsp; ".join(shown),
            f"target entropy here: {entropy:.2f} bits"]
