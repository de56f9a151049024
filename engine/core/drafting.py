"""What the loop sees of a drafter: the Proposal it returns and the Drafter protocol. The drafters themselves
(engine.drafters) build on these; the loop never imports them. Types only, no Qt."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from engine.core.config import SamplingConfig

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, slots=True)
class Proposal:
    """A drafter's guess for the next tokens: n drafted ids and, where the drafter has one, the distribution each
    was drawn from."""

    ids: list[int]  # n drafted ids, in order
    # p_draft: float (n, vocab), row i the distribution ids[i] was drawn from (vocabulary of the drafter), or
    # None for a drafter without one (n-gram): it is then verified as a one-hot draft, which keeps sampling
    # lossless.
    p_draft: torch.Tensor | None = None
    # What kind of guess this is, for the adaptive draft length's acceptance estimates (prompt lookup: the
    # matched n-gram size). Drafters with one kind of guess leave it at 0.
    bucket: int = 0
    # For each id, the drafter's own pieces that spelled it (a draft model of another tokenizer), else None.
    sources: tuple[str, ...] | None = None
    # A tree (engine.core.tree): parents[i] is the index in `ids` of node i's parent, −1 for a child of the last
    # committed token; parents come before their children. None: a chain (parents −1, 0, 1, …). In a tree, row i
    # of p_draft is the distribution node i was drawn from given its ancestors and its earlier siblings (None:
    # every node was picked deterministically, verified as one-hot: EAGLE's rule for top-k drafts).
    parents: tuple[int, ...] | None = None

    @property
    def is_tree(self) -> bool:
        return self.parents is not None

    def depths(self) -> list[int]:
        """Each node's depth: 0 for a child of the last committed token (a chain: 0, 1, 2, …)."""
        from engine.core.tree_shape import node_depths
        return list(range(len(self.ids))) if self.parents is None else node_depths(self.parents)

    def trimmed(self, length: int) -> "Proposal":
        """At most `length` drafted tokens can be committed: a chain keeps its first `length` ids, a tree its nodes
        of depth < length."""
        if self.parents is not None:
            return self.kept([i for i, depth in enumerate(self.depths()) if depth < length])
        if length >= len(self.ids):
            return self
        return Proposal(self.ids[:length], None if self.p_draft is None else self.p_draft[:length], self.bucket,
                        None if self.sources is None else self.sources[:length])

    def ended(self, eos_ids) -> "Proposal":
        """Cut after the first end-of-sequence id (in a tree, every node below one): nothing drafted past the
        reply's end can be committed, so it is neither verified nor counted as drafted."""
        if self.parents is not None:
            ended: set[int] = set()
            for i, parent in enumerate(self.parents):
                if parent in ended or (parent >= 0 and self.ids[parent] in eos_ids):
                    ended.add(i)
            return self.kept([i for i in range(len(self.ids)) if i not in ended]) if ended else self
        end = next((i + 1 for i, token in enumerate(self.ids) if token in eos_ids), None)
        return self if end is None else self.trimmed(end)

    def kept(self, nodes: list[int]) -> "Proposal":
        """A tree of the given nodes only, in the given order (each node's parent among them, before it), with
        the parents renumbered."""
        if self.parents is None:
            raise ValueError("kept() renumbers a tree; a chain is trimmed")
        if len(nodes) == len(self.ids) and nodes == sorted(nodes):
            return self
        from engine.core.tree_shape import renumbered
        return Proposal([self.ids[i] for i in nodes], None if self.p_draft is None else self.p_draft[nodes],
                        self.bucket, None if self.sources is None else tuple(self.sources[i] for i in nodes),
                        renumbered(self.parents, nodes))

    @staticmethod
    def empty() -> "Proposal":
        return Proposal([], None)


class Drafter(Protocol):
    """What the loop drafts with. A drafter subclasses this Protocol to inherit the defaults of the optional
    parts it lacks (`note`, `warning`, `learn`), which the loop then reads directly."""

    name: str
    free_to_propose: bool  # proposing costs next to nothing (a lookup): the adaptive length trims after
    # one line for the start of a generation (e.g. the model a foreign eagle head was made for)
    note: str | None = None
    # a problem to say at the start (its store started afresh, a setting that drafts poorly)
    warning: str | None = None

    def begin(self, sampling: SamplingConfig, generator: torch.Generator) -> None:
        """A generation starts with these sampling settings."""

    def prefill(self, context_ids: list[int]) -> None:
        """The target has just taken in the prompt (all of `context_ids` but the last id, its first token): take
        in now what the first propose() would otherwise catch up on (a draft model's prompt, an MTP head's
        states), so that it counts in the time to the first token, as it does in llama.cpp's own server. By
        default, nothing."""

    def propose(self, context_ids: list[int], k: int) -> Proposal:
        """Up to k tokens that should follow `context_ids` (prompt + everything committed)."""

    def propose_tree(self, context_ids: list[int], k: int, budget: int) -> Proposal:
        """A tree of at most `budget` nodes and depth k (Proposal.parents) of continuations of `context_ids`, for
        a target that verifies trees in one pass; only a method whose MethodSpec says `branches` is asked. By
        default, the chain of propose()."""
        return self.propose(context_ids, min(k, budget))

    def observe(self, n_accepted: int) -> None:
        """How many of the last proposal the target kept."""

    def release(self) -> None:
        """Free caches (memory) between conversations."""

    def learn(self, reply_ids: list[int]) -> None:
        """A finished reply, for a drafter that learns from past replies (suffix decoding); by default, nothing."""


class PickingDrafter(Drafter):
    """A base for drafters that choose each drafted token from logits of their own: the argmax when greedy, else
    a draw with the generation's settings; the Proposal carries the distribution each token was chosen from
    (the rejection rule needs it), softmaxed once for a greedy draft."""

    def __init__(self) -> None:
        self._sampling = SamplingConfig()
        self._generator: torch.Generator | None = None

    def begin(self, sampling: SamplingConfig, generator: torch.Generator) -> None:
        self._sampling = sampling
        self._generator = generator

    def pick(self, logits: torch.Tensor) -> tuple[int, torch.Tensor]:
        """From float logits (vocab,): a drafted token and the row (vocab,) to keep for it (the logits themselves
        when greedy: clone them first where the caller's buffer is reused)."""
        import torch

        from engine.core.sampling import probabilities, sample
        if self._sampling.greedy:
            # numpy's argmax (the same first maximum) where the row is in host memory: torch's costs ~20× more
            return int(logits.numpy().argmax() if logits.device.type == "cpu" else torch.argmax(logits)), logits
        probs = probabilities(logits, self._sampling)
        return int(sample(probs, self._generator)), probs

    def proposal(self, ids: list[int], rows: list[torch.Tensor]) -> Proposal:
        """The n drafted ids with the n rows (vocab,) pick() kept for them: p_draft (n, vocab)."""
        import torch
        if not ids:
            return Proposal.empty()
        stacked = torch.stack(rows)
        return Proposal(ids, torch.softmax(stacked, dim=-1) if self._sampling.greedy else stacked)

    def proposal_from(self, draft, context_ids: list[int], k: int) -> Proposal:
        """Up to k tokens from `draft(context_ids, k, choose)`, a loop that runs a head and asks `choose(logits)`
        for each token (llama.cpp's MTP and assistant contexts), each chosen by pick()."""
        if k < 1 or len(context_ids) < 2:
            return Proposal.empty()
        rows: list[torch.Tensor] = []

        def choose(logits: torch.Tensor) -> int:
            token, row = self.pick(logits)
            rows.append(row)
            return token

        ids, _ = draft(context_ids, k, choose)
        return self.proposal(ids, rows)
