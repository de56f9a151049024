"""A model's own drafters: whether it drafts for itself, as the registered methods tell it (MTP layers in its
config, a known assistant drafter for its family), and, for a GGUF, the drafter files beside it that fit it (an
mtp-*.gguf head with the MTP layers it lacks, a Gemma 4 assistant GGUF) or, for such a drafter file alone, what it
drafts for. Separate draft models that fit a target are engine.models.pairing's; known pairs worth downloading
engine.models.pairs'.

Reads GGUF facts (engine.models.gguf_facts, cached) of the files in the same folder; loads nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.backends.gguf_file import ASSISTANT_ARCHITECTURE, ASSISTANT_TARGETS, shared_name
from engine.models.gguf_facts import gguf_facts

__all__ = ["GgufDrafting", "gguf_drafting", "own_drafter"]


@dataclass(frozen=True, slots=True)
class GgufDrafting:
    """How a GGUF drafts, from its facts and the files beside it."""

    n_mtp_layers: int = 0  # MTP layers inside it, or in the head beside it
    mtp_sidecar: Path | None = None  # the mtp-*.gguf head beside it that fits it
    assistant_file: Path | None = None  # a Gemma 4 model: the assistant GGUF beside it that fits it
    problem: str | None = None  # a drafter file alone: whose drafter it is, and what to load instead


def own_drafter(entry) -> tuple[str, str] | None:
    """(method, words) when the model `entry` (an engine.models.catalog.CatalogEntry, which imports this module)
    drafts for itself, as the registered methods tell it (MethodSpec.own_drafter: MTP layers in its config, a
    known assistant drafter for its family in engine.models.pairs); None otherwise."""
    from engine.core.methods import methods
    from engine.models.pairs import pairs_for
    pairs = pairs_for(entry.name, entry.label, entry.repo_id)
    for method in methods():
        words = method.own_drafter(entry, pairs) if method.own_drafter is not None else None
        if words:
            return method.name, words
    return None


def gguf_drafting(path: Path, facts: dict) -> GgufDrafting:
    """What the GGUF at `path` (with its `facts`) drafts with, or, for a drafter file alone, why it is no model."""
    if facts.get("mtp_only"):  # a head alone: it drafts for another model, and is no model to load
        return GgufDrafting(problem=_head_problem(path, facts))
    if facts.get("architecture") == ASSISTANT_ARCHITECTURE:  # a drafter, no model to chat with
        return GgufDrafting(facts.get("nextn_layers", 0), problem=_assistant_problem(path, facts))
    if facts.get("architecture") in ASSISTANT_TARGETS:
        return GgufDrafting(facts.get("nextn_layers", 0), assistant_file=_fitting_assistant(path, facts))
    if facts.get("nextn_layers", 0):
        return GgufDrafting(facts["nextn_layers"])
    sidecar = _fitting_sidecar(path, facts)
    return GgufDrafting(gguf_facts(sidecar).get("nextn_layers", 0) if sidecar is not None else 0, sidecar)


def _beside(path: Path) -> list[Path]:
    try:
        return sorted(p for p in path.parent.glob("*.gguf") if p.is_file() and p != path)
    except OSError:
        return []


def _assistant_pairs(path: Path, facts: dict, want: frozenset[str]) -> list[Path]:
    """The GGUFs beside `path` of architecture `want` (an assistant's targets, a target's assistants) with the
    same vocabulary: a Gemma 4 assistant and its target share the tokenizer."""
    found = []
    for other in _beside(path):
        try:
            theirs = gguf_facts(other)
        except Exception:  # unreadable: no partner
            continue
        if theirs.get("architecture") in want and theirs.get("vocab_size") == facts.get("vocab_size"):
            found.append(other)
    return found


def _fitting_assistant(path: Path, facts: dict) -> Path | None:
    found = _assistant_pairs(path, facts, frozenset({ASSISTANT_ARCHITECTURE}))
    return max(found, key=lambda p: shared_name(p.stem, path.stem), default=None)


def _assistant_problem(path: Path, facts: dict) -> str:
    """What a Gemma 4 assistant GGUF says in the list: it drafts for a Gemma 4 model, and which one lies beside it."""
    targets = _assistant_pairs(path, facts, ASSISTANT_TARGETS)
    if targets:
        target = max(targets, key=lambda p: shared_name(p.stem, path.stem))
        return (f"a Gemma 4 assistant drafter for {target.name}, not a model to chat with; load {target.name} "
                "(method assistant drafts with this)")
    return ("a Gemma 4 assistant drafter, not a model to chat with; load its Gemma 4 target and use method "
            "assistant with this file as the draft")


def _head_shape(path: Path) -> dict | None:
    """An MTP head's facts (cached; they hold its engine.backends.gguf_file.mtp_shape); None: not a head alone."""
    try:
        facts = gguf_facts(path)
    except Exception:  # an unreadable file beside the model is no head for it
        return None
    return facts if facts.get("mtp_only") else None


def _fitting_sidecar(path: Path, facts: dict) -> Path | None:
    """The mtp-*.gguf head beside the GGUF at `path` that fits it (as llama.cpp's MTP head finds it)."""
    from engine.backends.gguf_file import fitting_sidecar
    return fitting_sidecar(path, facts, head_of=_head_shape)


def _head_problem(path: Path, facts: dict) -> str:
    """What an mtp-*.gguf head alone says in the list: whose head it is, and what to load instead."""
    from engine.backends.gguf_file import mtp_mismatch
    targets = []
    for other in _beside(path):
        try:
            theirs = gguf_facts(other)
        except Exception:  # unreadable: not its target
            continue
        if not theirs.get("mtp_only") and not theirs.get("nextn_layers") \
                and mtp_mismatch(facts, theirs, other.name) is None:
            targets.append(other)
    layers = facts.get("nextn_layers", 0)
    what = f"an MTP head ({layers} nextn layer{'s' if layers != 1 else ''}) for"
    if targets:
        target = max(targets, key=lambda p: shared_name(path.stem.removeprefix("mtp-"), p.stem))
        return f"{what} {target.name}, not a model to chat with; load {target.name} (method mtp drafts with this)"
    return (f"{what} a {facts.get('architecture')} model, not a model to chat with; load its target (this file "
            "beside it, or named as method mtp's draft)")
