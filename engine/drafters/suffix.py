"""Method `suffix`: suffix decoding (Oliaro et al., "SuffixDecoding", arXiv 2411.04975; vLLM's and Arctic
Inference's `suffix` method). Two suffix trees (engine.drafters.suffix_tree): one over the conversation so far,
always, and, with learning on ("learn from my chats", off by default), one over this model's past replies, kept
across restarts in the data folder (engine.drafters.suffix_store). Each round both propose the path of most
frequent continuations of the context's tail, at most k long and no longer than the match's length × spec_factor,
cut where its probability (the product of the frequencies) falls below min_token_prob; the higher-scoring one
drafts. No model, no distribution: the draft is verified one-hot, so sampling stays lossless.

Asked for a tree (a target that verifies trees), each tree offers its continuations best first by probability
(Arctic Inference's tree speculation), merged as a trie around the chain.
A finished reply is learned when the engine hands it over (`learn`), one store transaction each.
Touches no model; with learning on, its store's file.
"""

from __future__ import annotations

from pathlib import Path

from engine.backends import common_prefix_length
from engine.core.drafting import Drafter, Proposal
from engine.core.methods import MethodSpec, ParamSpec
from engine.drafters.suffix_tree import Candidate, SpeculationLimits, SuffixTree, best_of
from engine.drafters.tree_shapes import TokenTrie


class LearnedReplies:
    """A model's past replies: their tree in memory and the store they are kept in."""

    def __init__(self, model: str, max_replies: int, path: Path | None = None) -> None:
        from engine.drafters.suffix_store import SuffixStore
        self.model, self.max_replies = model, max_replies
        self.store = SuffixStore(path)
        self.tree = SuffixTree()
        for ids in self.store.replies(model, max_replies):
            self.tree.add(ids)
        held = self.tree.n_sequences
        self.warning = self.store.warning  # the store could not be read and started afresh (else None)
        self.note = (f"suffix: learning from this model's past replies ({held} kept)" if held else
                     "suffix: learning from this model's replies (none kept yet: this chat is the first)")

    def add(self, ids: list[int]) -> str | None:
        """Learn a finished reply; the reason where it could not be stored (it is learned in memory anyway)."""
        self.tree.add(ids)
        if self.tree.n_sequences > 2 * self.max_replies:  # forget the oldest, as the store does
            self.tree = SuffixTree()
            for kept in self.store.replies(self.model, self.max_replies):
                self.tree.add(kept)
        return self.store.add(self.model, ids, self.max_replies)


class SuffixDrafter(Drafter):
    name = "suffix"
    free_to_propose = True  # a lookup: proposing k and trimming costs nothing
    note: str | None = None  # said at the start of the next generation (learning on, and how much it holds)
    warning: str | None = None  # likewise, a problem: the store started afresh, a reply that could not be kept

    def __init__(self, limits: SpeculationLimits = SpeculationLimits(), learned: LearnedReplies | None = None,
                 warning: str | None = None) -> None:
        self.limits = limits
        self.learned = learned
        self._ids: list[int] = []  # the conversation the local tree holds
        self._local = SuffixTree()
        self._pending_note = learned.note if learned is not None else None
        self._pending_warning = learned.warning if learned is not None else warning
        self.last_source = ""  # which tree drafted the last proposal: "conversation" | "learned" | ""

    def begin(self, sampling, generator) -> None:
        self.note, self._pending_note = self._pending_note, None
        self.warning, self._pending_warning = self._pending_warning, None

    def _sync(self, context_ids: list[int]) -> None:
        if len(self._ids) <= len(context_ids) and common_prefix_length(self._ids, context_ids) == len(self._ids):
            new = context_ids[len(self._ids):]
        else:  # another conversation: its own tree
            self._local.clear()
            self._ids, new = [], context_ids
        self._ids.extend(new)
        self._local.extend(new)

    def propose(self, context_ids: list[int], k: int) -> Proposal:
        """The higher-scoring path of the two trees (SuffixTree.speculate), at most k ids; the match length
        (up to 8) is the proposal's bucket.

        Context [1, 2, 3, 4, 1, 2]: its tail [1, 2] occurred at 0, followed by 3 then 4; the match is 2 long, so
        the draft is at most 2 × spec_factor (1) = 2 ids:

        >>> drafter = SuffixDrafter()
        >>> drafter.propose([1, 2, 3, 4, 1, 2], k=4).ids
        [3, 4]
        """
        best, _ = self._speculate(context_ids, k)
        return Proposal(list(best.ids), None, bucket=min(best.match_length, 8))

    def propose_tree(self, context_ids: list[int], k: int, budget: int) -> Proposal:
        """The chain (propose's) and, around it, each tree's continuations of its own best match best first by
        probability (SuffixTree.branches, no deeper than that match allows), merged as a trie (a node shared by
        both trees keeps the higher probability), cut to `budget` nodes with the chain kept.

        >>> drafter = SuffixDrafter()
        >>> tree = drafter.propose_tree([1, 2, 3, 1, 2, 4, 1, 2], k=2, budget=4)
        >>> tree.ids, tree.parents
        ([4, 3, 1, 1], (-1, -1, 0, 1))
        """
        best, candidates = self._speculate(context_ids, k)
        if not best.ids or budget < 1:
            return Proposal.empty()
        trie = TokenTrie()
        keep = trie.add(best.ids, best.probs)
        for tree, candidate in candidates:
            if candidate.ids:
                length = min(k, int(candidate.match_length * self.limits.spec_factor + self.limits.spec_offset
                                    + 1e-6))
                trie.add_tree(*tree.branches(context_ids, candidate.match_length, length, budget,
                                             self.limits.min_token_prob))
        shape = trie.selected(budget, keep)
        return Proposal(shape.ids, None, bucket=min(best.match_length, 8), parents=shape.parents)

    def _speculate(self, context_ids: list[int], k: int) -> tuple[Candidate, list[tuple[SuffixTree, Candidate]]]:
        """The best path of the two trees (the conversation's first), and each tree with its own best path."""
        self._sync(context_ids)
        local = self._local.speculate(context_ids, k, self.limits)
        candidates = [(self._local, local)]
        if self.learned is not None:
            candidates.append((self.learned.tree, self.learned.tree.speculate(context_ids, k, self.limits)))
        best = best_of(*(candidate for _, candidate in candidates))
        self.last_source = "" if not best.ids else "conversation" if best is local else "learned"
        return best, candidates

    def observe(self, n_accepted: int) -> None:
        pass

    def learn(self, reply_ids: list[int]) -> None:
        """A finished reply of the model (the engine hands it over): learned when learning is on."""
        if self.learned is not None and reply_ids:
            problem = self.learned.add(list(reply_ids))
            if problem:
                self._pending_warning = problem

    def release(self) -> None:
        self._ids = []
        self._local.clear()


def model_key(target) -> str:
    """Whose replies these are: the model's file (name and size) and vocabulary, the same on either backend and
    across restarts."""
    file = target.source.file
    try:
        size = file.stat().st_size if file.is_file() else 0
    except OSError:
        size = 0
    return f"{file.name}|{size}|{target.vocab_size}"


def limits_of(spec) -> SpeculationLimits:
    return SpeculationLimits(max_depth=spec.param("tree_depth"), spec_factor=spec.param("spec_factor"),
                             min_token_prob=spec.param("min_token_prob"))


def build(spec, target, draft, target_runner) -> SuffixDrafter:
    """The drafter; with learning on, over this model's past replies, or, where their store can't be opened
    (an unusable data folder), without them for this run, saying so once as a warning."""
    from engine.drafters.suffix_store import StoreUnavailable
    if not spec.param("learn"):
        return SuffixDrafter(limits_of(spec))
    try:
        return SuffixDrafter(limits_of(spec), LearnedReplies(model_key(target), spec.param("max_learned")))
    except StoreUnavailable as exc:
        return SuffixDrafter(limits_of(spec), warning=f"suffix: learning is off for this run: {exc}")


METHOD = MethodSpec(
    name=SuffixDrafter.name, label="suffix decoding",
    description="Drafts the most frequent continuation of the text's tail from suffix trees over the conversation "
                "and, when learning is on, over this model's past replies.",
    params=(ParamSpec("tree_depth", int, 24, "suffix: longest pattern matched (tokens)", min=1, max=256,
                      label="longest match"),
            ParamSpec("spec_factor", float, 1.0, "suffix: a draft is at most this × the matched length (and ≤ k)",
                      min=0.1, max=64, label="draft per matched token"),
            ParamSpec("min_token_prob", float, 0.1, "suffix: stop drafting where the continuation's frequency "
                      "falls below this", min=0.0, max=1.0, label="least frequency"),
            ParamSpec("learn", bool, False, "suffix: learn from my chats (this model's past replies, kept in the "
                      "data folder beside the history, cleared with it)", label="Learn from my chats"),
            ParamSpec("max_learned", int, 1000, "suffix: most past replies kept per model", min=1, max=100000,
                      label="replies kept")),
    cache_params=("tree_depth", "spec_factor", "min_token_prob", "learn", "max_learned"),
    build=build, sweep_rank=3, lookup=True, branches=True, learns=lambda spec: bool(spec.param("learn")))
