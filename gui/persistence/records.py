"""The plain records a chat history holds and reads back: a stored conversation (`ConversationRecord`), its
messages, their rounds of `engine.core.tokens.DisplayToken`s, list and search entries, and the compact row a
token is stored as. No SQL, no Qt; used by the store, the exports, the recorder, fork and replay.

A token is stored as a row `[text, status code, position, p_target, p_draft, token id]`; its round's index,
drafter and draft length are the round's (its row and its meta), so a stored round reads back as the very
DisplayTokens the fold made: p's rounded to 4 places, each correction told its ghost (`fill_replacements`),
positions in engine.core.tokens' 0-based convention, as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from engine.core.events import TokenStatus
from engine.core.tokens import DisplayToken, fill_replacements

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
    return [token.text, STATUS_CODE[token.status], token.position, _round_p(token.p_target),
            _round_p(token.p_draft), token.token_id]


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
            text, code, position, p_target, p_draft, token_id = (list(row) + [None] * 6)[:6]
            tokens.append(DisplayToken(text=text, status=_status_of(code), round_index=index, position=position,
                                       draft_length=n_drafted, p_target=p_target, p_draft=p_draft,
                                       drafter=drafter, token_id=token_id))
        return cls(index, tuple(fill_replacements(tokens)), meta)


def round_meta(event) -> dict:
    """What a round keeps besides its tokens (`engine.core.events.RoundVerified`'s counts and times)."""
    return {"drafter": event.drafter, "n_drafted": len(event.draft_ids), "n_accepted": event.n_accepted,
            "draft_seconds": round(event.draft_seconds, 6), "verify_seconds": round(event.verify_seconds, 6),
            "elapsed_seconds": round(event.elapsed_seconds, 6)}


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
