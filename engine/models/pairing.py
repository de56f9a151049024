"""Which installed drafts fit a target: smaller, not the same files, with a tokenizer that loads; those whose
tokenizer passes engine.core.compat's check against the target's first, then those of another tokenizer (the
draft-model method drafts through text with them: engine.drafters.cross_tokenizer). The known-good pairs worth
downloading are engine.models.pairs'.

Loads tokenizers (never weights), cached per model file; touches nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from engine.backends.source import file_stamp
from engine.core.compat import TokenizerDifference, size_difference, tokenizer_difference
from engine.core.errors import SpecScopeError
from engine.models.catalog import CatalogEntry
from engine.models.sources import resolve_source

__all__ = ["DraftCandidate", "is_smaller", "same_model", "draft_difference", "compatible_drafts", "load_tokenizer"]

_tokenizers: dict[tuple, object] = {}


@dataclass(frozen=True, slots=True)
class DraftCandidate:
    """An installed model that can draft for a target: with the target's own tokenizer, or with another one
    (drafted through text, slower per draft, exact)."""

    entry: CatalogEntry
    same_tokenizer: bool


def load_tokenizer(entry: CatalogEntry):
    """The entry's tokenizer (cached per model file)."""
    from engine.backends.transformers import load_tokenizer as load_hf_tokenizer
    try:
        stamp = file_stamp(entry.path)
    except OSError:
        stamp = None
    key = (entry.name, str(entry.path), stamp)
    if key not in _tokenizers:
        _tokenizers[key] = load_hf_tokenizer(resolve_source(entry.name), entry.name)
    return _tokenizers[key]


def is_smaller(draft: CatalogEntry, target: CatalogEntry) -> bool:
    """The draft has fewer parameters than the target (or, where a count is unknown, fewer bytes)."""
    if draft.n_parameters is not None and target.n_parameters is not None:
        return draft.n_parameters < target.n_parameters
    return draft.size_bytes < target.size_bytes


def same_model(a: CatalogEntry, b: CatalogEntry) -> bool:
    """Two entries name the same files."""
    try:
        return a.path.resolve() == b.path.resolve()
    except OSError:
        return a.path == b.path


def draft_difference(target: CatalogEntry, draft: CatalogEntry) -> TokenizerDifference | None:
    """The engine's tokenizer difference between two catalog entries (None: the same tokenizer). Loads the two
    tokenizers (never the weights); a cheap vocabulary-size check runs first."""
    if target.vocab_size is not None and draft.vocab_size is not None:
        sizes = size_difference(target.vocab_size, draft.vocab_size)
        if sizes:
            return sizes
    return tokenizer_difference(load_tokenizer(target), load_tokenizer(draft))


def compatible_drafts(target: CatalogEntry, candidates: Iterable[CatalogEntry]) -> list[DraftCandidate]:
    """The usable candidates smaller than `target` whose tokenizer loads: those whose tokenizer passes
    `engine.core.compat.tokenizer_difference` against the target's first, then those of another tokenizer, each
    in the order given. A candidate whose tokenizer (or the target's) cannot be loaded is left out."""
    same, other = [], []
    for candidate in candidates:
        if not candidate.usable or same_model(candidate, target) or not is_smaller(candidate, target):
            continue
        try:
            difference = draft_difference(target, candidate)
            if difference is not None:  # sizes alone may have told: drafting through text needs both tokenizers
                load_tokenizer(target)
                load_tokenizer(candidate)
        except SpecScopeError:  # a tokenizer cannot be loaded: not a draft we can offer
            continue
        (same if difference is None else other).append(DraftCandidate(candidate, difference is None))
    return same + other
