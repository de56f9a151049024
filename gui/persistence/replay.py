"""A saved reply's run, back as events: what a reopened chat needs to show its stats cards, graphs and the
settings it ran with.

The history store keeps each round's tokens (statuses, positions, p_target, p_draft) and its counts and
times (`gui.persistence.records.round_meta`), and the reply's final stats and settings. `saved_run` turns the last reply
of a stored conversation back into `engine.core.events.RoundVerified` events (the same the live view folded) and
its `GenerationStats`, so the session's live figures and ring buffers are rebuilt by the very fold that
built them live. `apply_values` turns its settings record (gui.sessions.chat.settings_record: the SpecConfig's
one record, engine.core.config.spec_to_record, plus the sampling's, sampling_to_record, and the budget) into the
settings panel's fields.

May touch: engine events (build), engine.core.config's record readers and the method registry (read),
gui.persistence.records (read), gui.persistence.recorder's stats reader. No Qt.
"""

from __future__ import annotations

from dataclasses import dataclass

import engine.drafters  # noqa: F401  (registers the methods)
from engine.core.config import (SamplingConfig, SpecConfig, sampling_from_record, sampling_to_values, sampling_words,
                                spec_from_record)
from engine.core.errors import ConfigError
from engine.core.events import RoundVerified
from gui.persistence.recorder import stats_from_dict
from gui.persistence.records import ConversationRecord, StoredMessage, round_event  # noqa: F401 (re-exported)

@dataclass(frozen=True, slots=True)
class SavedRun:
    """The last reply of a saved chat: how it ran and its rounds, to fold again."""

    settings: dict  # the message's settings record (model, the SpecConfig's record, sampling, …)
    method: str
    k: int
    model: str
    rounds: tuple[RoundVerified, ...]
    stats: object  # engine.core.stats.GenerationStats | None (a reply that never finished)


def saved_run(conversation: ConversationRecord) -> SavedRun | None:
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
    spec = saved_spec(settings) or SpecConfig()
    return SavedRun(settings=settings, method=spec.method, k=spec.k if spec.speculative else 0,
                    model=str(settings.get("model_label") or settings.get("model") or ""), rounds=tuple(rounds),
                    stats=stats_from_dict(message.stats))


def saved_spec(settings: dict) -> SpecConfig | None:
    """The SpecConfig a settings record ran with; None for one that no longer fits (a method not registered
    now, a value out of range)."""
    try:
        return spec_from_record(settings)
    except ConfigError:
        return None


def saved_sampling(settings: dict) -> SamplingConfig | None:
    """The SamplingConfig a settings record ran with; None for a record that keeps none (or one that no longer
    fits: a value out of range)."""
    record = settings.get("sampling")
    if not isinstance(record, dict) or not record:
        return None
    try:
        return sampling_from_record(record)
    except ConfigError:
        return None


def _spec_values(spec: SpecConfig | None) -> dict:
    """The panel's fields of `spec`: method, k, draft, adaptive, the tree and each of the method's parameters
    (0: auto)."""
    if spec is None:
        return {}
    values = {"method": spec.method, "k": spec.k, "draft": spec.draft, "adaptive": spec.adaptive, "tree": spec.tree}
    for param in spec.info.params:
        value = spec.param(param.name)
        values[param.name] = 0 if value is None and param.type in (int, float) else value
    return values


def apply_values(settings: dict) -> dict:
    """A settings record as the settings panel's fields (gui.views.chat.controls.ControlsPanel.apply's keywords)."""
    sampling = saved_sampling(settings)
    values = {"model": settings.get("model"), **_spec_values(saved_spec(settings)),
              "max_new_tokens": settings.get("max_new_tokens"),
              "system_prompt": settings.get("system_prompt") or "",
              **(sampling_to_values(sampling) if sampling is not None else {})}
    return {name: value for name, value in values.items() if value is not None}


def settings_words(settings: dict) -> str:
    """What the user reads: "draft-model:k=4,draft=small · temperature 0.7 · seed 7 · 256 tokens"."""
    sampling = saved_sampling(settings)
    parts = [str(settings.get("spec") or settings.get("method") or SpecConfig().label())]
    if sampling is not None:
        parts.append(sampling_words(sampling))
    if settings.get("max_new_tokens"):
        parts.append(f"{settings['max_new_tokens']} tokens")
    return " · ".join(parts)
