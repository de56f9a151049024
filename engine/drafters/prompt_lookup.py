"""Method `prompt-lookup`: copy what followed the latest earlier occurrence of the context's last n-gram
(Saxena 2023, "prompt lookup decoding"; n from ngram_max down to ngram_min). No model, no distribution.

An index from n-gram to its latest end position grows with the context, so a lookup costs O(1) per round
instead of a scan over the whole text. Touches no model.
"""

from __future__ import annotations

from engine.backends import common_prefix_length
from engine.drafters.base import Proposal


class PromptLookupDrafter:
    name = "prompt-lookup"
    free_to_propose = True  # a dictionary lookup: proposing k and trimming costs nothing
    note: str | None = None  # nothing to say at the start of a generation

    def __init__(self, ngram_max: int = 3, ngram_min: int = 1) -> None:
        self.ngram_max = ngram_max
        self.ngram_min = ngram_min
        self._ids: list[int] = []
        self._latest: dict[tuple[int, ...], int] = {}  # n-gram → index just after its latest occurrence
        self._indexed = 0  # n-grams ending before this index are in the index

    def begin(self, sampling, generator) -> None:
        pass

    def _index_up_to(self, end: int) -> None:
        ids, latest = self._ids, self._latest
        for stop in range(self._indexed + 1, end + 1):
            for n in range(self.ngram_min, self.ngram_max + 1):
                if stop >= n:
                    latest[tuple(ids[stop - n:stop])] = stop
        self._indexed = max(self._indexed, end)

    def _sync(self, context_ids: list[int]) -> None:
        if len(self._ids) <= len(context_ids) and \
                common_prefix_length(self._ids, context_ids) == len(self._ids):
            self._ids.extend(context_ids[len(self._ids):])
        else:  # the context changed under us (a new conversation): start over
            self._ids = list(context_ids)
            self._latest.clear()
            self._indexed = 0

    def propose(self, context_ids: list[int], k: int) -> Proposal:
        self._sync(context_ids)
        ids = self._ids
        # Index every n-gram except those ending at the very end: the tail must find an *earlier* match.
        self._index_up_to(len(ids) - 1)
        for n in range(self.ngram_max, self.ngram_min - 1, -1):
            if len(ids) < n:
                continue
            start = self._latest.get(tuple(ids[-n:]))
            if start is not None:
                return Proposal(ids[start:start + k], None, bucket=n)
        return Proposal.empty()

    def observe(self, n_accepted: int) -> None:
        pass

    def release(self) -> None:
        self._ids = []
        self._latest.clear()
        self._indexed = 0
