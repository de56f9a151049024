"""A saved reply's run, back as events: what a reopened chat needs to show its stats cards, graphs and the
settings it ran with.

The history store keeps each round's tokens (statuses, positions, p_target, p_draft) and its counts and
times (`gui.persistence.store.round_meta`), and the reply's final stats and settings. `saved_run` turns the last reply
of a stored conversation back into `engine.core.events.RoundVerified` events (the same the live view folded) and
its `GenerationStats`, so the session's live figures and ring buffers are rebuilt by the very fold that
built them live. `apply_values` turns its settings record (gui.sessions.chat.settings_record) into the
settings panel's fields.

May touch: engine events (build), gui.persistence.store's records (read), gui.persistence.recorder's stats reader. No Qt.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.core.events import RoundVerified, TokenStatus
from gui.persistence.recorder import stats_from_dict
from gui.persistence.store import Conversation, StoredMessage, StoredRound

_TARGET_STATUSES = (TokenStatus.SUBSTITUTED, TokenStatus.BONUS, TokenStatus.PLAIN)


@dataclass(frozen=True, slots=True)
class SavedRun:
    """The last reply of a saved chat: how it ran and its rounds, to fold again."""

    settings: dict  # the message's settings record (model, method, k, draft, layers, sampling, …)
    method: str
    k: int
    model: str
    rounds: tuple[RoundVerified, ...]
    stats: object  # engine.core.stats.GenerationStats | None (a reply that never finished)


def round_event(stored: StoredRound, n_before: int) -> RoundVerified:
    """A stored round as the RoundVerified it was made from (ids of unknown tokens are -1)."""
    meta = stored.meta or {}
    drafted = sorted((t for t in stored.tokens if t.status in (TokenStatus.ACCEPTED, TokenStatus.REJECTED)),
                     key=lambda t: (t.position if t.position is not None else 0))
    target = next((t for t in reversed(stored.tokens) if t.status in _TARGET_STATUSES), None)
    committed = [t for t in stored.tokens if t.status is not TokenStatus.REJECTED]
    n_accepted = int(meta.get("n_accepted", sum(t.status is TokenStatus.ACCEPTED for t in drafted)))
    return RoundVerified(
        index=stored.index, drafter=str(meta.get("drafter", "none")),
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
        elapsed_seconds=float(meta.get("elapsed_seconds", 0.0)), n_committed_total=n_before + len(committed))


def saved_run(conversation: Conversation) -> SavedRun | None:
    """The last reply of `conversation` that has rounds or stats, or None (no reply yet)."""
    message: StoredMessage | None = next((m for m in reversed(conversation.messages)
                                          if m.role == "assistant" and (m.rounds or m.stats)), None)
    if message is None:
        return None
    settings = dict(message.settings or {})
    rounds, total = [], 0
    for stored in message.rounds:
        event = round_event(stored, total)
        total = event.n_committed_total
        rounds.append(event)
    method = str(settings.get("method") or "none")
    k = settings.get("k") if isinstance(settings.get("k"), int) and method != "none" else 0
    return SavedRun(settings=settings, method=method, k=k,
                    model=str(settings.get("model_label") or settings.get("model") or ""), rounds=tuple(rounds),
                    stats=stats_from_dict(message.stats))


def apply_values(settings: dict) -> dict:
    """A settings record as the settings panel's fields (gui.views.chat.controls.ControlsPanel.apply's keywords)."""
    sampling = settings.get("sampling") if isinstance(settings.get("sampling"), dict) else {}
    values = {"model": settings.get("model"), "method": settings.get("method"), "k": settings.get("k"),
              "draft": settings.get("draft"), "layers": settings.get("layers") or 0,
              "max_new_tokens": settings.get("max_new_tokens"),
              "system_prompt": settings.get("system_prompt") or "",
              "temperature": sampling.get("temperature"), "top_p": sampling.get("top_p"),
              "top_k": sampling.get("top_k"), "seed": -1 if sampling.get("seed") is None else sampling.get("seed")}
    if "sampling" not in settings:
        for name in ("temperature", "top_p", "top_k", "seed"):
            values.pop(name)
    return {name: value for name, value in values.items() if value is not None}


def settings_words(settings: dict) -> str:
    """What the user reads: "draft-model:k=4,draft=small · temperature 0 · seed 7 · 256 tokens"."""
    sampling = settings.get("sampling") if isinstance(settings.get("sampling"), dict) else {}
    parts = [str(settings.get("spec") or settings.get("method") or "none")]
    if sampling:
        parts.append(f"temperature {sampling.get('temperature', 0)}")
        if sampling.get("seed") is not None:
            parts.append(f"seed {sampling['seed']}")
    if settings.get("max_new_tokens"):
        parts.append(f"{settings['max_new_tokens']} tokens")
    return " · ".join(parts)
