"""A stored conversation to and from files: JSON (everything, tokens included, that `conversation_from_json`
reads back) and Markdown (who said what, each reply's settings and stats; rejected drafts struck through on
request, a draft a server does not name as ▯), written owner-only. Works on gui.persistence.records' records; the
history store reads and adds them (`HistoryStore.load_conversation`, `HistoryStore.add_conversation`). No SQL, no
Qt.

JSON format versions: 1 named a token's round `round`; 2 (current) writes the token fields under
engine.core.tokens.DisplayToken's own names (`round_index`, …). Both are read; a token's round is its round's
`index` either way. A token drafted by a draft of another tokenizer also has its `draft_source` (the draft
model's own pieces), written only where there is one; a token without it reads back with None.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from engine.core.events import TokenStatus
from engine.core.tokens import DisplayToken
from engine.host import owner_only
from gui.persistence.records import (COMPLETE, INTERRUPTED, ROLES, STATUS_CODE, ConversationRecord, StoredMessage,
                                     StoredRound)
from gui.persistence.private_files import PRIVATE
from gui.persistence.store import HistoryError
from gui.sessions.round_branches import proposed_in_place
from gui.sessions.rounds import UNNAMED_GHOST, unnamed_draft

EXPORT_FORMAT = "specscope.conversation"
EXPORT_FORMAT_VERSION = 2
_TOKEN_FIELDS = ("text", "status", "round_index", "position", "p_target", "p_draft", "token_id")


def write_private(path: str | os.PathLike, text: str) -> None:
    """Write an export of a chat owner-only (0600), whole or not at all (a temporary file, then a rename)."""
    from engine.core.validation import write_text_atomic
    with owner_only():
        write_text_atomic(path, text, mode=PRIVATE)


# ---------------------------------------------------------------- JSON

def _token_dict(token: DisplayToken) -> dict:
    data = {name: getattr(token, name).value if name == "status" else getattr(token, name) for name in _TOKEN_FIELDS}
    if token.draft_source is not None:
        data["draft_source"] = token.draft_source
    return data


def _token_row(data: dict) -> list:
    """An exported token as a stored row (gui.persistence.records; its round gives the rest)."""
    return [data["text"], STATUS_CODE[TokenStatus(data["status"])], data.get("position"), data.get("p_target"),
            data.get("p_draft"), data.get("token_id"), data.get("draft_source")]


def conversation_json(conversation: ConversationRecord) -> str:
    """The whole conversation, tokens included, as JSON that `conversation_from_json` reads back."""
    c = conversation
    data = {
        "format": EXPORT_FORMAT, "format_version": EXPORT_FORMAT_VERSION, "exported_at": time.time(),
        "conversation": {
            "title": c.title, "created_at": c.created_at, "updated_at": c.updated_at, "settings": c.settings,
            "messages": [{
                "role": m.role, "content": m.content, "state": m.state, "created_at": m.created_at,
                "finished_at": m.finished_at, "settings": m.settings, "stats": m.stats,
                "stop_reason": m.stop_reason, "error": m.error,
                "rounds": [{"index": r.index, "meta": r.meta, "tokens": [_token_dict(t) for t in r.tokens]}
                           for r in m.rounds]} for m in c.messages]}}
    return json.dumps(data, ensure_ascii=False, indent=1)


def _message(data: dict) -> StoredMessage:
    if data.get("role") not in ROLES:
        raise ValueError(f"unknown role {data.get('role')!r}")
    now = time.time()
    rounds = tuple(StoredRound.from_rows(int(r["index"]), r.get("meta") or {}, [_token_row(t) for t in r["tokens"]])
                   for r in data.get("rounds", []))
    return StoredMessage(
        id=0, conversation_id=0, role=data["role"], content=data.get("content", ""),
        state=data.get("state") if data.get("state") in (COMPLETE, INTERRUPTED) else INTERRUPTED,
        created_at=data.get("created_at", now), finished_at=data.get("finished_at"),
        settings=data.get("settings") or {}, stats=data.get("stats"), stop_reason=data.get("stop_reason"),
        error=data.get("error"), rounds=rounds)


def conversation_from_json(text: str) -> ConversationRecord:
    """A conversation exported by `conversation_json` (any format version up to this one), not stored yet (id
    0): give it to `HistoryStore.add_conversation`. Raises HistoryError, in words, for anything else."""
    try:
        data = json.loads(text)
        if data.get("format") != EXPORT_FORMAT:
            raise ValueError("not a SpecScope conversation export")
        if int(data.get("format_version", 0)) > EXPORT_FORMAT_VERSION:
            raise ValueError("exported by a newer SpecScope")
        conversation = data["conversation"]
        now = time.time()
        return ConversationRecord(
            id=0, title=conversation.get("title", "Imported chat"), created_at=conversation.get("created_at", now),
            updated_at=conversation.get("updated_at", now), settings=conversation.get("settings") or {},
            messages=tuple(_message(m) for m in conversation["messages"]))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise HistoryError(f"this file cannot be imported: {exc}") from None


# ---------------------------------------------------------------- Markdown

def conversation_markdown(conversation: ConversationRecord, *, show_rejected: bool = False) -> str:
    """The conversation as Markdown: who said what, each reply with its settings and stats line. With
    `show_rejected`, rejected drafts appear struck through (~~like this~~) where they were drafted."""
    c = conversation
    lines = [f"# {c.title}", ""]
    if c.settings:
        lines += [f"*{_settings_words(c.settings)}*", ""]
    for m in c.messages:
        heading = {"user": "You", "assistant": "Assistant", "system": "System"}[m.role]
        notes = [_settings_words(m.settings)] if m.settings else []
        if m.state == INTERRUPTED:
            notes.append("interrupted")
        lines.append(f"## {heading}" + (f" ({'; '.join(n for n in notes if n)})" if any(notes) else ""))
        lines.append("")
        if m.role == "assistant" and show_rejected and m.rounds:
            body = "".join(_marked_text(r) for r in m.rounds)
        else:
            body = m.content
        lines += [body, ""]
        if m.stats:
            lines += [f"> {_stats_words(m.stats, m.stop_reason)}", ""]
        if m.error:
            lines += [f"> error: {m.error}", ""]
    return "\n".join(lines).rstrip() + "\n"


def _marked_text(stored: StoredRound) -> str:
    """A round's text with its rejected drafts struck through where they were drafted (a tree round's: only those
    turned down where the reply goes on, gui.sessions.round_branches.proposed_in_place)."""
    parents = tuple(stored.meta.get("tree_parents") or ())
    n_accepted = int(stored.meta.get("n_accepted", 0))
    return "".join(t.text if t.status is not TokenStatus.REJECTED else
                   f"~~{UNNAMED_GHOST if unnamed_draft(t) else t.text}~~"
                   if proposed_in_place(parents, n_accepted, t.position) else "" for t in stored.tokens)


def _settings_words(settings: dict[str, Any]) -> str:
    parts = []
    for key in ("model", "draft", "method", "k", "tree"):
        if settings.get(key) not in (None, "") and not (key == "tree" and not settings[key]):  # tree 0: a chain
            parts.append(f"{key} {settings[key]}")
    sampling = settings.get("sampling")
    if isinstance(sampling, dict) and sampling:
        parts.append(", ".join(f"{k} {v}" for k, v in sampling.items()))
    return " · ".join(parts)


def _stats_words(stats: dict[str, Any], stop_reason: str | None) -> str:
    parts = []
    if "committed_tokens" in stats:
        parts.append(f"{stats['committed_tokens']} tokens")
    if stats.get("tok_per_s"):
        parts.append(f"{stats['tok_per_s']:.1f} tok/s")
    if stats.get("drafted_tokens"):
        parts.append(f"acceptance {stats.get('acceptance_rate', 0):.0%}")
        if stats.get("mean_accepted_length"):
            parts.append(f"mean accepted length {stats['mean_accepted_length']:.2f}")
    if stop_reason:
        parts.append(f"stop: {stop_reason}")
    return " · ".join(parts)
