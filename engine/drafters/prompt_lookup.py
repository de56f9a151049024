"""Method `prompt-lookup`: copy what followed the latest earlier occurrence of the context's last n-gram
(Saxena 2023, "prompt lookup decoding"; n from ngram_max down to ngram_min). No model, no distribution. Asked
for a tree, what followed several earlier occurrences, merged as a trie (engine.drafters.tree_shapes).

An index from n-gram to its latest end positions grows with the context, so a lookup costs O(1) per round
instead of a scan over the whole text. Touches no model.
"""

from __future__ import annotations

import operator

from engine.backends import common_prefix_length
from engine.core.drafting import Drafter, Proposal
from engine.core.errors import ConfigError
from engine.core.methods import MethodSpec, ParamSpec
from engine.drafters.tree_shapes import TokenTrie

MAX_MATCHES = 8  # the latest occurrences of an n-gram kept in the index: a tree's branches


class PromptLookupDrafter(Drafter):
    name = "prompt-lookup"
    free_to_propose = True  # a dictionary lookup: proposing k and trimming costs nothing
    note: str | None = None  # nothing to say at the start of a generation

    def __init__(self, ngram_max: int = 3, ngram_min: int = 1) -> None:
        self.ngram_max = ngram_max
        self.ngram_min = ngram_min
        self._ids: list[int] = []
        # n-gram → the indices just after its latest MAX_MATCHES occurrences, the latest last
        self._latest: dict[tuple[int, ...], list[int]] = {}
        self._indexed = 0  # n-grams ending before this index are in the index

    def begin(self, sampling, generator) -> None:
        pass

    def _index_up_to(self, end: int) -> None:
        ids, latest = self._ids, self._latest
        for stop in range(self._indexed + 1, end + 1):
            for n in range(self.ngram_min, self.ngram_max + 1):
                if stop >= n:
                    stops = latest.setdefault(tuple(ids[stop - n:stop]), [])
                    stops.append(stop)
                    if len(stops) > MAX_MATCHES:
                        del stops[0]
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
        """What followed the latest earlier occurrence of the context's last n-gram, at most k ids; the longest
        n-gram that occurred before wins (its n is the proposal's bucket).

        Context [1, 2, 3, 4, 2, 3], n up to 2: the last 2-gram [2, 3] occurred before at 1, so what followed it
        from 3 on is proposed; a last token that never came before proposes nothing:

        >>> PromptLookupDrafter(ngram_max=2, ngram_min=1).propose([1, 2, 3, 4, 2, 3], k=3).ids
        [4, 2, 3]
        >>> PromptLookupDrafter(ngram_max=2, ngram_min=1).propose([1, 2, 3, 4, 9], k=3).ids
        []
        """
        self._sync(context_ids)
        ids = self._ids
        # Index every n-gram except those ending at the very end: the tail must find an *earlier* match.
        self._index_up_to(len(ids) - 1)
        for n in range(self.ngram_max, self.ngram_min - 1, -1):
            if len(ids) < n:
                continue
            stops = self._latest.get(tuple(ids[-n:]))
            if stops:
                return Proposal(ids[stops[-1]:stops[-1] + k], None, bucket=n)
        return Proposal.empty()

    def propose_tree(self, context_ids: list[int], k: int, budget: int) -> Proposal:
        """What followed each of the latest MAX_MATCHES earlier occurrences of the context's last n-gram, for
        every n that matched, k ids each, merged as a trie; a node's score is the sum of the matched n of the
        continuations through it (longer and more frequent matches first). The chain (propose's) is kept whole
        within the budget; the bucket is its n.

        Context [1, 2, 5, 1, 2, 3, 1, 2]: [1, 2] was followed by 5 and by 3, and the chain (the latest) is 3, 1:

        >>> tree = PromptLookupDrafter(ngram_max=2).propose_tree([1, 2, 5, 1, 2, 3, 1, 2], k=2, budget=4)
        >>> tree.ids, tree.parents
        ([3, 5, 1, 1], (-1, -1, 0, 1))
        """
        chain = self.propose(context_ids, k)
        if not chain.ids or budget < 1:
            return chain.trimmed(budget)
        ids, trie, keep, seen = self._ids, TokenTrie(), None, set()
        for n in range(chain.bucket, self.ngram_min - 1, -1):
            for stop in reversed(self._latest.get(tuple(ids[-n:]), ())):
                if stop not in seen:  # one vote an occurrence, by its longest match
                    seen.add(stop)
                    path = trie.add(ids[stop:stop + k], [n] * k, operator.add)
                    keep = path if keep is None else keep
        shape = trie.selected(budget, keep)
        return Proposal(shape.ids, None, bucket=chain.bucket, parents=shape.parents)

    def observe(self, n_accepted: int) -> None:
        pass

    def release(self) -> None:
        self._ids = []
        self._latest.clear()
        self._indexed = 0


def check_ngrams(params: dict) -> None:
    """The shortest n-gram matched is no longer than the longest."""
    if params["ngram_min"] > params["ngram_max"]:
        raise ConfigError(f"n-gram sizes need 1 ≤ min ≤ max, got min={params['ngram_min']} "
                          f"max={params['ngram_max']}")


def hf_kwargs(spec, engine) -> dict:
    """transformers generate()'s own prompt lookup with the same setting."""
    return {"prompt_lookup_num_tokens": spec.k, "max_matching_ngram_size": spec.param("ngram_max")}


METHOD = MethodSpec(
    name=PromptLookupDrafter.name, label="prompt lookup (n-gram)",
    description="Drafts by copying what followed the last n-gram where it appeared earlier in the text.",
    params=(ParamSpec("ngram_max", int, 3, "prompt-lookup: longest n-gram matched", min=1, aliases=("max_ngram",),
                      label="longest n-gram"),
            ParamSpec("ngram_min", int, 1, "prompt-lookup: shortest n-gram matched", min=1,
                      aliases=("min_ngram",), label="shortest n-gram")),
    check_params=check_ngrams, cache_params=("ngram_max", "ngram_min"), hf_generate_kwargs=hf_kwargs, branches=True,
    llama_reference=lambda spec: {"k": spec.k, "ngram_max": spec.param("ngram_max")},
    build=lambda spec, target, draft, target_runner: PromptLookupDrafter(spec.param("ngram_max"),
                                                                         spec.param("ngram_min")),
    sweep_rank=0, lookup=True)
