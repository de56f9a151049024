"""The plain records a chat history holds and reads back: a stored conversation (`ConversationRecord`), its
messages, their rounds of `engine.core.tokens.DisplayToken`s, list and search entries, and the compact row a
token is stored as. No SQL, no Qt; used by the store, the exports, the recorder, fork and replay.

A token is stored as a row `[text, status code, position, p_target, p_draft, token id]`, and a token drafted by a
draft of another tokenizer (engine.drafters.cross_tokenizer) adds its `draft_source` (the draft model's own
pieces) as a seventh element; a row without it (every other token's, and every row of an older history) reads
back with None. Its round's index, drafter and draft length are the round's (its row and its meta; a token tree's
round also its `tree_parents`, a round stored before trees reading back as a chain), so a stored
round reads back as the very DisplayTokens the fold made: p's rounded to 4 places, each correction told its
ghost (`fill_replacements`), positions in engine.core.tokens' 0-based convention, as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from engine.core.events import RoundDetail, RoundVerified, TokenStatus
from engine.core.methods import plain_method
from engine.core.tokens import DisplayToken, fill_replacements
from engine.core.tree_shape import node_depths

STREAMING, COMPLETE, INTERRUPTED = "streaming", "complete", "interrupted"
ROLES = ("system", "user", "assistant")

# One letter per status in the stored rows; exports spell them out.
STATUS_CODE = {TokenStatus.PLAIN: "p", TokenStatus.ACCEPTED: "a", TokenStatus.REJECTED: "r",
               TokenStatus.SUBSTITUTED: "s", TokenStatus.BONUS: "b", TokenStatus.PROMPT: "P"}
_CODE_STATUS = {code: status for status, code in STATUS_CODE.items()}


def _round_p(p: float | None) -> float | None:
    return None if p is None else round(float(p), 4)


def token_row(token: DisplayToken) -> list:
    """The stored form of a token (see the module docstring)."""
    row = [token.text, STATUS_CODE[token.status], token.position, _round_p(token.p_target),
           _round_p(token.p_draft), token.token_id]
    return row if token.draft_source is None else row + [token.draft_source]


def _status_of(code: str) -> TokenStatus:
    """A row's status: its one-letter code, or the status spelt out."""
    return _CODE_STATUS.get(code) or TokenStatus(code)


@dataclass(frozen=True, slots=True)
class StoredRound:
    index: int
    tokens: tuple[DisplayToken, ...]
    meta: dict = field(default_factory=dict)  # drafter, n_drafted, n_accepted, draft/verify/elapsed seconds

    @classmethod
    def from_rows(cls, index: int, meta: dict | None, rows: Sequence[Sequence]) -> "StoredRound":
        """A round read back: its token rows become DisplayTokens with the round's index, drafter and length."""
        meta = meta or {}
        drafter, n_drafted = str(meta.get("drafter", "")), int(meta.get("n_drafted", 0))
        tokens = []
        for row in rows:
            text, code, position, p_target, p_draft, token_id, draft_source = (list(row) + [None] * 7)[:7]
            tokens.append(DisplayToken(text=text, status=_status_of(code), round_index=index, position=position,
                                       draft_length=n_drafted, p_target=p_target, p_draft=p_draft,
                                       drafter=drafter, token_id=token_id, draft_source=draft_source))
        return cls(index, tuple(fill_replacements(tokens)), meta)


def round_meta(event) -> dict:
    """What a round keeps besides its tokens (`engine.core.events.RoundVerified`'s counts and times, its recorded
    detail where it was recorded: `detail`, RoundDetail.as_dict, and a token tree's shape: `tree_parents`)."""
    meta = {"drafter": event.drafter, "n_drafted": len(event.draft_ids), "n_accepted": event.n_accepted,
            "draft_seconds": round(event.draft_seconds, 6), "verify_seconds": round(event.verify_seconds, 6),
            "elapsed_seconds": round(event.elapsed_seconds, 6)}
    if getattr(event, "rollback_seconds", 0.0):
        meta["rollback_seconds"] = round(event.rollback_seconds, 6)
    if getattr(event, "detail", None) is not None:
        meta["detail"] = event.detail.as_dict()
    if event.tree_parents:
        meta["tree_parents"] = list(event.tree_parents)
        # the nodes its tokens don't show (the fold shows the kept path and the line below its tip): [node, id,
        # piece, p_target, p_draft] each, so that the round reads back as the whole tree it drafted (a stop that
        # cut the round before the target's token left no ghost: it reads back as the nodes it kept)
        shown = set(range(event.n_accepted)) | set(event.ghost_nodes)
        if len(event.committed_ids) > event.n_accepted:
            meta["tree_nodes"] = [[i, event.draft_ids[i], _at(event.draft_pieces, i) or "",
                                   _round_p(_at(event.p_target, i)), _round_p(_at(event.p_draft, i))]
                                  for i in range(len(event.draft_ids)) if i not in shown]
    return meta


def _at(values, i: int):
    return values[i] if i < len(values) else None


def _tree_nodes(meta: dict, stored: StoredRound) -> list[DisplayToken]:
    """A tree round's nodes kept in its meta (round_meta), as the rejected tokens they would have been."""
    nodes = []
    for row in meta.get("tree_nodes") or ():
        try:
            index, token_id, text, p_target, p_draft = row
            nodes.append(DisplayToken(text=str(text), status=TokenStatus.REJECTED, round_index=stored.index,
                                      position=int(index), draft_length=0, p_target=p_target, p_draft=p_draft,
                                      drafter="", token_id=None if token_id is None else int(token_id)))
        except (TypeError, ValueError):
            return []  # a shape that does not read: the round reads back with what its tokens show
    return nodes


_TARGET_STATUSES = (TokenStatus.SUBSTITUTED, TokenStatus.BONUS, TokenStatus.PLAIN)


def round_event(stored: StoredRound, n_before: int) -> RoundVerified:
    """A stored round as the RoundVerified it was made from (ids of unknown tokens are -1)."""
    meta = stored.meta or {}
    drafted = sorted([t for t in stored.tokens if t.status in (TokenStatus.ACCEPTED, TokenStatus.REJECTED)]
                     + _tree_nodes(meta, stored), key=lambda t: (t.position if t.position is not None else 0))
    target = next((t for t in reversed(stored.tokens) if t.status in _TARGET_STATUSES), None)
    committed = [t for t in stored.tokens if t.status is not TokenStatus.REJECTED]
    n_accepted = int(meta.get("n_accepted", sum(t.status is TokenStatus.ACCEPTED for t in drafted)))
    return RoundVerified(
        index=stored.index, drafter=str(meta.get("drafter", plain_method().name)),
        draft_ids=tuple(-1 if t.token_id is None else t.token_id for t in drafted),
        draft_pieces=tuple(t.text for t in drafted), n_accepted=n_accepted,
        target_id=-1 if target is None or target.token_id is None else target.token_id,
        target_status=target.status if target is not None else TokenStatus.PLAIN,
        target_piece=target.text if target is not None else "",
        p_target=tuple(t.p_target or 0.0 for t in drafted), p_draft=tuple(t.p_draft for t in drafted),
        p_target_of_target_id=(target.p_target if target is not None and target.p_target is not None else 1.0),
        committed_ids=tuple(-1 if t.token_id is None else t.token_id for t in committed),
        committed_pieces=tuple(t.text for t in committed),
        draft_seconds=float(meta.get("draft_seconds", 0.0)), verify_seconds=float(meta.get("verify_seconds", 0.0)),
        elapsed_seconds=float(meta.get("elapsed_seconds", 0.0)), n_committed_total=n_before + len(committed),
        rollback_seconds=float(meta.get("rollback_seconds", 0.0)), detail=_detail_of(meta),
        draft_sources=_draft_sources(drafted), tree_parents=_tree_parents_of(meta, len(drafted)))


def _tree_parents_of(meta: dict, n_drafted: int) -> tuple[int, ...]:
    """A stored tree round's shape, for the drafted tokens it kept (a stop inside a round keeps fewer: the event
    lists the kept path first and a parent before its child, so any first nodes are a tree); () for a chain, a
    round stored before trees, or a shape that does not read as one."""
    try:
        parents = tuple(int(parent) for parent in meta.get("tree_parents") or ())[:n_drafted]
        node_depths(parents)
    except (TypeError, ValueError):
        return ()
    return parents


def _draft_sources(drafted: Sequence[DisplayToken]) -> tuple[str, ...]:
    """A stored round's `draft_sources` as its drafted tokens keep them (empty: no draft of another tokenizer)."""
    if all(t.draft_source is None for t in drafted):
        return ()
    return tuple(t.draft_source or "" for t in drafted)


def _detail_of(meta: dict) -> RoundDetail | None:
    """A stored round's tree (None: not recorded, or not readable: a round's tree is never worth an error)."""
    try:
        return RoundDetail.from_dict(meta.get("detail"))
    except (TypeError, ValueError, AttributeError):
        return None


@dataclass(frozen=True, slots=True)
class StoredMessage:
    id: int
    conversation_id: int
    role: str
    content: str
    state: str  # complete | streaming | interrupted
    created_at: float
    finished_at: float | None = None
    settings: dict = field(default_factory=dict)
    stats: dict | None = None
    stop_reason: str | None = None
    error: str | None = None
    rounds: tuple[StoredRound, ...] = ()

    @property
    def tokens(self) -> tuple[DisplayToken, ...]:
        return tuple(token for r in self.rounds for token in r.tokens)


@dataclass(frozen=True, slots=True)
class ConversationSummary:
    """A conversation as the history list shows it."""

    id: int
    title: str
    created_at: float
    updated_at: float
    settings: dict
    n_messages: int


@dataclass(frozen=True, slots=True)
class ConversationRecord:
    """A stored conversation, whole: everything needed to re-render it coloured (id 0: not stored yet, as an
    import read from a file)."""

    id: int
    title: str
    created_at: float
    updated_at: float
    settings: dict
    messages: tuple[StoredMessage, ...]


@dataclass(frozen=True, slots=True)
class SearchHit:
    conversation_id: int
    title: str
    message_id: int | None  # None when the title matched
    role: str | None
    snippet: str
