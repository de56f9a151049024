"""A runner that verifies token trees with no model behind it, for the tree tests of the core and the drafters:
its next-token logits depend on the last two ids only (a fixed random table), so what a tree's node should
get is easy to compute, and every Runner call of the tree contract is checked as it is made."""

from __future__ import annotations

import torch

from engine.core.runner import Runner
from engine.core.tree_shape import node_depths


class TableRunner(Runner):
    """Logits (V,) after a context are table[hash of its last two ids]; a KV cache is the list of ids."""

    device = torch.device("cpu")

    def __init__(self, vocab: int = 12, seed: int = 0, sharpness: float = 3.0) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.vocab = vocab
        self.table = torch.randn((vocab * vocab, vocab), generator=generator) * sharpness
        self.ids: list[int] = []
        self._pending: tuple[list[int], list[int], list[int]] | None = None  # feed, node ids, parents
        self.passes = 0
        self.nodes_verified = 0

    def row(self, context: list[int]) -> torch.Tensor:
        a, b = (context[-2] if len(context) > 1 else 0), context[-1]
        return self.table[a * self.vocab + b].clone()

    def forward(self, new_ids: list[int], n_logits: int) -> torch.Tensor:
        assert self._pending is None, "forward while a tree is pending"
        self.passes += 1
        self.ids = self.ids + list(new_ids)
        return torch.stack([self.row(self.ids[: len(self.ids) - i]) for i in reversed(range(n_logits))])

    def rollback(self, length: int) -> None:
        self.ids = self.ids[:length]

    def sync(self, context_ids: list[int]) -> list[int]:
        common = 0
        limit = min(len(self.ids), len(context_ids) - 1)
        while common < limit and self.ids[common] == context_ids[common]:
            common += 1
        self.ids = self.ids[:common]
        return list(context_ids[common:])

    def reset(self) -> None:
        self.ids = []

    def release(self) -> None:
        self.ids = []

    def tree_refusal(self) -> str | None:
        return None

    def path_context(self, node: int) -> list[int]:
        feed, nodes, parents = self._pending
        path = []
        while node >= 0:
            path.append(nodes[node])
            node = parents[node]
        return self.ids + feed + path[::-1]

    def forward_tree(self, feed: list[int], ids: list[int], parents) -> torch.Tensor:
        assert self._pending is None and (feed or self.ids), "nothing to predict from"
        node_depths(parents)  # the shape is checked
        self.passes += 1
        self.nodes_verified += len(ids)
        self._pending = (list(feed), [], [])
        rows = [self.row(self.ids + list(feed))]
        return torch.stack(rows + [self._grow(ids, parents)[i] for i in range(len(ids))]) if ids else \
            torch.stack(rows)

    def grow_tree(self, ids: list[int], parents) -> torch.Tensor:
        assert self._pending is not None, "grow_tree without forward_tree"
        self.passes += 1
        return self._grow(ids, parents)

    def _grow(self, ids, parents) -> torch.Tensor:
        _, nodes, old_parents = self._pending
        start = len(nodes)
        nodes.extend(ids)
        old_parents.extend(parents)
        node_depths(old_parents)
        return torch.stack([self.row(self.path_context(start + i)) for i in range(len(ids))])

    def keep_path(self, path: list[int]) -> None:
        feed, nodes, parents = self._pending
        for a, b in zip(path, path[1:]):
            assert parents[b] == a, "the kept path is no path"
        assert not path or parents[path[0]] == -1
        self.ids = self.ids + feed + [nodes[i] for i in path]
        self._pending = None


class LetterTokenizer:
    """Id i reads as the i-th letter."""

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return "".join(chr(ord("a") + i % 26) for i in ids)


class TableTarget:
    """A LoadedModel-like target around a TableRunner, for an Engine (engine.core.engine) with no model."""

    backend = "table"
    device = torch.device("cpu")
    device_label = "cpu"
    dtype_label = "float32"
    label = "table"
    context_length = 4096
    supports_rollback = True
    rollback_refusal = None

    def __init__(self, runner: TableRunner, eos_ids=(), tokenizer=None) -> None:
        self.runner = runner
        self.eos_ids = set(eos_ids)
        self.tokenizer = tokenizer or LetterTokenizer()

    def new_runner(self) -> TableRunner:
        return self.runner


class FixedSource:
    """A DraftSource (engine.core.engine) that hands out one drafter, with a given cost curve (None: unmeasured)
    for chains and trees alike."""

    def __init__(self, drafter, curve=None) -> None:
        self._drafter, self._curve = drafter, curve

    def validate(self, spec) -> None:
        pass

    def drafter(self, spec, target_runner):
        return self._drafter

    def verify_curve(self, k):
        return self._curve

    def tree_curve(self, budget):
        return self._curve

    def release(self) -> None:
        pass


def joint_fits(counts: dict, joint: dict, n: int) -> tuple[bool, float, int]:
    """Whether `counts` of n draws fit the exact `joint` distribution (chi-square over the cells expected ≥ 5
    times, the rest pooled): (fits at p ≈ 1e-6, the statistic, degrees of freedom). The critical value is bounded
    by df + 5.3·sqrt(2·df) + 20 for every df here."""
    big = {cell: p for cell, p in joint.items() if p * n >= 5}
    rest = 1.0 - sum(big.values())
    statistic = sum((counts.get(c, 0) - p * n) ** 2 / (p * n) for c, p in big.items())
    other = n - sum(counts.get(c, 0) for c in big)
    statistic += (other - rest * n) ** 2 / (rest * n) if rest * n >= 5 else 0.0
    df = len(big)
    return statistic < df + 5.3 * (2 * df) ** 0.5 + 20, statistic, df
