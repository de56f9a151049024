"""KV-cache rollback: the one place that knows the transformers cache API.

A `CachedModel` pairs a causal LM with its DynamicCache and the token ids that cache holds, so that any
new context can be synced by its common prefix: a rejected draft, a new chat turn or a regenerated reply
only recomputes what changed.
"""

from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache


def cache_length(cache) -> int:
    return 0 if cache is None else int(cache.get_seq_length())


def crop_cache(cache, length: int) -> None:
    """Drop cached positions beyond `length`. transformers ≥ 5 wants the count to remove, negated."""
    n_remove = cache_length(cache) - length
    if n_remove < 0:
        raise ValueError(f"cannot grow a cache by cropping ({cache_length(cache)} → {length})")
    if n_remove:
        cache.crop(-n_remove)


def common_prefix_length(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] holds, a[:hi] == b[:hi] does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


class CachedModel:
    """A causal LM, its KV cache and the ids in it. Not thread-safe: one generation at a time."""

    def __init__(self, model, config=None) -> None:
        self.model = model
        self.config = config if config is not None else model.config
        self.device = next(model.parameters()).device
        self.cache = None
        self.ids: list[int] = []
        params = inspect.signature(model.forward).parameters
        self._takes_logits_to_keep = "logits_to_keep" in params
        self._cache_kwarg = "cache" if "cache" in params else "past_key_values"

    def reset(self) -> None:
        self.cache = None
        self.ids = []

    def rollback(self, length: int) -> None:
        """Keep the first `length` cached positions."""
        if length >= len(self.ids):
            return
        try:
            crop_cache(self.cache, length)
        except (RuntimeError, ValueError):
            # A layer that can't be cropped (a sliding window past its size): recompute from scratch.
            self.reset()
            return
        del self.ids[length:]

    def sync(self, context_ids: list[int]) -> list[int]:
        """Roll the cache back to its common prefix with `context_ids` (always leaving the last id out)
        and return the ids still to be fed."""
        keep = min(common_prefix_length(self.ids, context_ids), len(context_ids) - 1)
        self.rollback(keep)
        return context_ids[len(self.ids):]

    def forward(self, new_ids: list[int], n_logits: int) -> torch.Tensor:
        """Feed `new_ids` after the cached ones; return float32 logits of the last `n_logits` positions."""
        if self.cache is None:
            self.cache = DynamicCache(config=self.config)
        input_ids = torch.tensor([new_ids], dtype=torch.long, device=self.device)
        kwargs = {self._cache_kwarg: self.cache, "use_cache": True}
        if self._takes_logits_to_keep:
            kwargs["logits_to_keep"] = n_logits
        try:
            out = self.model(input_ids=input_ids, **kwargs)
        except BaseException:
            self.reset()  # the cache may hold part of this pass: start clean next time
            raise
        self.ids.extend(new_ids)
        return out.logits[0, -n_logits:].float()
