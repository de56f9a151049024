"""Token trees on a llama.cpp context (engine.core.runner's forward_tree, grow_tree, keep_path): every node of a
drafted tree decoded in one llama_decode, each token carrying the sequence ids of the tree's leaves below it.

Sequence 0 holds the committed context; each leaf of the pending tree has a sequence of its own (1, 2, …) made
of the context, the fed chain and the nodes from the root to that leaf. A context made with `kv_unified` keeps
one cell per token whatever the number of sequences sharing it (llama_memory_seq_cp only tags cells), and
llama.cpp masks a token's attention by the first sequence it carries: any leaf below a node sees exactly the
node's ancestors, the fed chain and the context at positions up to the node's. llama.cpp's own
examples/speculative/speculative.cpp (n_seq_dft) drafts trees this way.

Touches the runner's llama.cpp memory and a batch of its own. No torch, no Qt.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from engine.core.config import MAX_TREE
from engine.core.errors import ConfigError
from engine.core.tree_shape import children_of, leaves, node_depths

LLAMA_MAX_SEQ = 256  # llama.cpp's cap on a context's n_seq_max (src/llama-cparams.h), not exported by its bindings
SEQ_CAPACITY = min(LLAMA_MAX_SEQ, MAX_TREE + 1)  # sequence ids a tree batch's token may carry


def make_tree_capable(params) -> None:
    """Context params for trees: sequences for the leaves, all sharing one KV cache (llama.cpp refuses a token
    shared by several sequences without `kv_unified`). A chain's decoding is the same either way. llama.cpp
    reserves its worst-case graph for a micro-batch of n_ubatch tokens split evenly among n_seq_max sequences,
    rounding the tokens up to a multiple: n_seq_max divides n_ubatch, so that nothing is reserved beyond it."""
    params.kv_unified = True
    params.n_seq_max = max(d for d in range(1, SEQ_CAPACITY + 1) if params.n_ubatch % d == 0)


@dataclass(slots=True)
class PendingTree:
    """The tree a context holds between forward_tree and keep_path."""

    start: int  # the cache length before the fed chain
    feed: list[int]
    ids: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    depths: list[int] = field(default_factory=list)
    leaf_seq: dict[int, int] = field(default_factory=dict)  # each leaf's sequence
    some_seq: list[int] = field(default_factory=list)  # for each node, one sequence that holds it
    slot: dict[int, int] = field(default_factory=dict)  # each node's place among the tree's cells (feed's first: 0)
    placed: int = 0  # cells the tree's batches took so far, the fed chain's included

    def position(self, node: int) -> int:
        """Where node `node` sits (−1: the fed chain's last id)."""
        return self.start + len(self.feed) + (self.depths[node] if node >= 0 else -1)


class TreeBatch:
    """A llama_batch whose tokens may each carry up to SEQ_CAPACITY sequence ids, with numpy views of its
    arrays made once."""

    def __init__(self, lib, size: int) -> None:
        self.lib, self.size = lib, size
        self.batch = lib.llama_batch_init(size, 0, SEQ_CAPACITY)
        batch = self.batch
        self.tokens = np.ctypeslib.as_array(batch.token, shape=(size,))
        self.positions = np.ctypeslib.as_array(batch.pos, shape=(size,))
        self.flags = np.ctypeslib.as_array(batch.logits, shape=(size,))
        self.n_seq_id = np.ctypeslib.as_array(batch.n_seq_id, shape=(size,))
        self.seq_ids = [np.ctypeslib.as_array(batch.seq_id[i], shape=(SEQ_CAPACITY,)) for i in range(size)]

    def fill(self, tokens: list[int], positions: list[int], seqs: list[list[int]], first_output: int) -> None:
        """Tokens with their positions and sequences; logits asked for every token from `first_output` on."""
        m = len(tokens)
        self.tokens[:m], self.positions[:m] = tokens, positions
        self.flags[:m] = 0
        self.flags[first_output:m] = 1
        for i, token_seqs in enumerate(seqs):
            self.n_seq_id[i] = len(token_seqs)
            self.seq_ids[i][:len(token_seqs)] = token_seqs
        self.batch.n_tokens = m

    def free(self) -> None:
        self.lib.llama_batch_free(self.batch)


def preorder(parents: list[int], first_new: int) -> list[int]:
    """The nodes from `first_new` on, depth first, each node's children in index order (the drafter's order of
    preference): the batch's order. The cells of a tree's first-child path are then contiguous, as a chain's
    are: where that path is kept, the cache is laid out as plain decoding's, and its logits are the same bit for
    bit (llama.cpp sums attention over the cells in cell order, so other layouts round slightly differently)."""
    children = children_of(parents)
    stack = [i for i in reversed(range(first_new, len(parents))) if parents[i] < first_new]
    order = []
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(reversed(children.get(node, ())))
    return order


class LlamaCppTrees:
    """The token-tree side of one LlamaCppRunner (engine.backends.llama_cpp_runner), which it is given: the pending
    tree, its sequences and the batch that feeds them."""

    def __init__(self, runner) -> None:
        self.runner = runner
        self.pending: PendingTree | None = None
        self._batch: TreeBatch | None = None

    def forward(self, feed: list[int], ids: list[int], parents) -> list[int] | None:
        """Decode `feed` and the tree's nodes in one batch; logits of feed's last id and of every node (where in
        llama.cpp's rows, as _add says)."""
        if self.pending is not None:
            raise ValueError("a tree is pending: keep_path() first")
        if not feed:
            raise ValueError("forward_tree needs a fed chain (at least the last committed id)")
        runner = self.runner
        room = self._batch_size() - len(ids)
        if len(feed) > room:  # a long chain first, on the context's sequence, as forward() feeds one
            head = feed[:len(feed) - 1]
            runner.decode(np.asarray(head, dtype=np.int32), 0)
            runner.ids.extend(head)
            feed = feed[-1:]
        self.pending = PendingTree(len(runner.ids), list(feed))
        try:
            return self._add(ids, parents, feed)
        except BaseException:
            self.drop()
            raise

    def grow(self, ids: list[int], parents) -> list[int] | None:
        """Decode more nodes of the pending tree; logits of each (where in llama.cpp's rows, as _add says)."""
        if self.pending is None:
            raise ValueError("grow_tree() needs a tree: forward_tree() first")
        try:
            return self._add(ids, parents, [])
        except BaseException:
            self.drop()
            raise

    def _add(self, ids: list[int], parents, feed: list[int]) -> list[int] | None:
        """Nodes `ids` after those pending (each one's parent an index among all, the pending ones first), with
        `feed` before them where it is new. Returns which output row holds each new node's logits (feed's last id
        first), None where they are in order."""
        tree = self.pending
        first_new = len(tree.ids)
        if len(parents) != len(ids):
            raise ValueError(f"{len(parents)} parents for {len(ids)} nodes")
        if len(feed) + len(ids) > self._batch_size():
            raise ValueError(f"{len(ids)} nodes do not fit in a batch of {self._batch_size()}")
        parents = tree.parents + list(parents)
        depths = node_depths(parents)
        seqs = self._sequences(tree, parents, first_new)
        tree.ids.extend(ids)
        tree.parents, tree.depths = parents, depths
        tree.some_seq.extend(node_seqs[0] for node_seqs in seqs)
        every = [0] + sorted(tree.leaf_seq.values())
        order = preorder(tree.parents, first_new)
        tree.placed += len(feed)
        for node in order:
            tree.slot[node], tree.placed = tree.placed, tree.placed + 1
        tokens = list(feed) + [tree.ids[i] for i in order]
        positions = [tree.start + j for j in range(len(feed))] + [tree.position(i) for i in order]
        self._batch.fill(tokens, positions, [every] * len(feed) + [seqs[i - first_new] for i in order],
                         max(len(feed) - 1, 0))
        self.runner.run_batch(self._batch.batch, len(tokens))
        if order == list(range(first_new, len(depths))):
            return None
        row_of = {node: row for row, node in enumerate(order, start=1 if feed else 0)}
        return ([0] if feed else []) + [row_of[i] for i in range(first_new, len(depths))]

    def _sequences(self, tree: PendingTree, parents: list[int], first_new: int) -> list[list[int]]:
        """The sequences of each new node (those of the leaves below it): a new leaf takes over the sequence of
        the old leaf it grows from, or gets a free one copied from its nearest old ancestor's."""
        tips, n_seqs = leaves(parents), self.runner.model.lib.llama_n_seq_max(self.runner.context)
        if len(tips) >= n_seqs:
            raise ConfigError(f"a tree of {len(tips)} leaves: llama.cpp verifies at most {n_seqs - 1} leaves in "
                              f"one pass of {self.runner.model.label}")
        lib, memory = self.runner.model.lib, self.runner.memory
        old_leaf_seq, leaf_seq = tree.leaf_seq, {}
        free = sorted(set(range(1, n_seqs)) - set(old_leaf_seq.values()), reverse=True)
        seqs: list[list[int]] = [[] for _ in range(len(parents) - first_new)]
        for tip in tips:
            if tip < first_new:
                leaf_seq[tip] = old_leaf_seq[tip]
                continue
            anchor = tip
            while anchor >= first_new:
                anchor = parents[anchor]
            if anchor in old_leaf_seq:  # the old leaf's sequence holds exactly its path: it goes on
                seq = old_leaf_seq.pop(anchor)
            else:
                seq = free.pop()
                source = tree.some_seq[anchor] if anchor >= 0 else 0
                lib.llama_memory_seq_cp(memory, source, seq, -1, tree.position(anchor) + 1 if anchor >= 0 else -1)
            leaf_seq[tip] = seq
            node = tip
            while node >= first_new:
                seqs[node - first_new].append(seq)
                node = parents[node]
        tree.leaf_seq = leaf_seq
        return seqs

    def keep_path(self, path: list[int]) -> list[int]:
        """Keep the context, the fed chain and the nodes of `path` that lie in line on sequence 0, every other
        cell freed; the ids the cache gained (the runner's next sync feeds the rest of the path again).

        In line: the path's first nodes whose cells follow the fed chain's one after another, as a chain's would
        (the first-child line of the depth-first batch). A node further on sits after cells of other branches;
        kept there, the next tokens would fill the freed cells before it, and llama.cpp, which sums attention in
        cell order, computes their rows differently from plain decoding's (by up to 1.7 logits on the built-in
        Q4_1 model, measured): greedy output would no longer be plain decoding's. Dropped and fed again in the
        next pass, the cache keeps the context's cells in position order with no hole, as a chain leaves it."""
        tree = self.pending
        if tree is None:
            raise ValueError("keep_path() needs a tree: forward_tree() first")
        for depth, node in enumerate(path):
            if tree.depths[node] != depth or (depth and tree.parents[node] != path[depth - 1]):
                raise ValueError(f"{path} is not a path from the root of the pending tree")
        in_line = next((depth for depth, node in enumerate(path) if tree.slot[node] != len(tree.feed) + depth),
                       len(path))
        kept = path[:in_line]
        lib, memory = self.runner.model.lib, self.runner.memory
        if kept:
            # the tip's sequence holds the path at positions below the tip's and its own leaf's branch after it
            first = tree.position(kept[0])
            lib.llama_memory_seq_cp(memory, tree.some_seq[kept[-1]], 0, first, first + len(kept))
        lib.llama_memory_seq_keep(memory, 0)  # every leaf's sequence dropped: cells on no path freed
        self.pending = None
        return tree.feed + [tree.ids[i] for i in kept]

    def drop(self) -> None:
        """Forget the pending tree and free its cells (a failed pass, or the cache emptied)."""
        tree, self.pending = self.pending, None
        if tree is not None and self.runner.open_context is not None:
            self.runner.model.lib.llama_memory_seq_keep(self.runner.memory, 0)
            self.runner.model.lib.llama_memory_seq_rm(self.runner.memory, 0, tree.start, -1)

    def _batch_size(self) -> int:
        if self._batch is None:
            self._batch = TreeBatch(self.runner.model.lib, self.runner.batch_size)
        return self._batch.size

    def close(self) -> None:
        """The runner's context is freed: forget the tree and free the batch."""
        self.pending = None
        batch, self._batch = self._batch, None
        if batch is not None:
            batch.free()
