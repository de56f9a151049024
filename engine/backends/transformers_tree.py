"""Token trees on the transformers backend (engine.core.tree): every node of a drafted tree verified in one pass
of the target, then the cache cut to the kept path.

A tree pass feeds the pending chain and then the nodes, in index order, after the cached positions, with a 4D
additive attention mask (batch, 1, queries, keys) in the model's dtype, which transformers passes to eager and
SDPA attention as given: the chain is causal over the cache, each node sees the cache, the whole chain and its
own ancestors (engine.core.tree.ancestor_mask); a node's position is the cache's length + the chain's + its
depth. Keeping a path gathers its nodes' keys and values to the slots right after the chain, in every layer.
Sliding-window layers (Gemma 2/3, gpt-oss) get a mask of their own, over the slots they return, with the window
counted in positions; a model with both kinds takes the two masks keyed by layer type, as its forward builds them.

`TreeVerification` is the part of engine.backends.transformers' TransformersRunner that does this (split off
for size): it reads the runner's cache, ids, kept hidden rows and `_pass`. Touches torch and transformers'
cache layers only. No Qt.
"""

from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache
from transformers.cache_utils import (
    DynamicLayer,
    DynamicSlidingWindowLayer,
    LinearAttentionCacheLayerMixin,
)

from engine.backends.device import device_ids
from engine.core.errors import ConfigError
from engine.core.tree import ancestor_mask
from engine.core.tree_shape import node_depths

TREE_ATTENTION = ("eager", "sdpa")  # the attention implementations that take a custom 4D mask as given


def model_tree_refusal(model, config) -> str | None:
    """Why a model can't verify a tree in one pass on this backend, in the user's words; None where it can."""
    attention = config._attn_implementation
    if attention not in TREE_ATTENTION:
        name = "FlashAttention-2" if attention == "flash_attention_2" else attention
        return f"its attention ({name}) takes no tree mask; load it with eager or sdpa attention for trees"
    params = inspect.signature(model.forward).parameters
    if "attention_mask" not in params or "position_ids" not in params:
        return "its forward takes no attention mask or positions (its own code)"
    layers = DynamicCache(config=config).layers  # allocated lazily: it costs no memory
    kinds = {type(layer) for layer in layers} - {DynamicLayer}
    if any(issubclass(kind, LinearAttentionCacheLayerMixin) for kind in kinds):
        return ("its linear-attention layers keep one recurrent state, which can't hold the branches of a tree "
                "nor keep one path of it")
    if DynamicSlidingWindowLayer in kinds:
        windows = {layer.sliding_window for layer in layers if isinstance(layer, DynamicSlidingWindowLayer)}
        mixed = any(type(layer) is DynamicLayer for layer in layers)
        if len(windows) > 1:
            return "its sliding-window layers have windows of different sizes, which one tree mask can't serve"
        if mixed and not {"full_attention", "sliding_attention"} <= set(getattr(config, "layer_types", None) or ()):
            return "its sliding-window and full-attention layers take masks it does not name by layer type"
        kinds.discard(DynamicSlidingWindowLayer)
    if kinds:
        names = ", ".join(sorted(kind.__name__ for kind in kinds))
        return f"its cache has {names} layers, whose entries keeping a path can't gather"
    return None


@dataclass(slots=True)
class PendingTree:
    """A tree the cache holds after its pass, until keep_path: the chain fed before it and every node so far."""

    cache: object  # the cache the nodes are in (a reset drops the tree with it)
    base: int  # cached positions before the pass
    feed: list[int]
    ids: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    depths: list[int] = field(default_factory=list)
    hidden: list[torch.Tensor] = field(default_factory=list)  # last-layer states of feed + nodes (record_outputs)

    @property
    def start(self) -> int:
        """The first node's slot in the cache."""
        return self.base + len(self.feed)

    def key_positions(self, first: int, depths: list[int]) -> torch.Tensor:
        """The position of every cache slot from `first` on once nodes of these `depths` join the tree: the slot
        itself before the nodes, the start plus its depth for a node."""
        start = self.start
        nodes = [start + depth for depth in self.depths + depths]
        return torch.tensor(list(range(first, start)) + nodes[max(0, first - start):])


def attention_bias(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The additive mask (1, 1, queries, keys) of a bool `allowed` (queries, keys): 0 where a query may attend,
    the dtype's minimum elsewhere."""
    bias = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return bias.masked_fill_(~allowed, torch.finfo(dtype).min)[None, None]


def tree_allowed(base: int, n_feed: int, ancestors: torch.Tensor, device: torch.device) -> torch.Tensor:
    """(n_feed + n, base + n_feed + n) bool: the chain of n_feed ids causal over `base` cached positions, then the
    n nodes, each seeing the cache, the chain and its own ancestors (`ancestors`: (n, n) engine.core.tree)."""
    n = ancestors.shape[0]
    allowed = torch.zeros((n_feed + n, base + n_feed + n), dtype=torch.bool, device=device)
    allowed[:, :base] = True
    allowed[:n_feed, base:base + n_feed] = torch.ones((n_feed, n_feed), dtype=torch.bool, device=device).tril()
    allowed[n_feed:, base:base + n_feed] = True
    allowed[n_feed:, base + n_feed:] = ancestors.to(device)
    return allowed


def sliding_layers(cache) -> list[DynamicSlidingWindowLayer]:
    """A cache's sliding-window layers."""
    return [layer for layer in cache.layers if isinstance(layer, DynamicSlidingWindowLayer)]


def tree_attention(cache, tree: PendingTree, allowed: torch.Tensor, query_positions: torch.Tensor,
                   depths: list[int], dtype: torch.dtype):
    """The attention mask of a pass whose new nodes have `depths`: the additive mask of `allowed` over every slot;
    where some layers slide, their own over the slots they return (the window's, with the tree's nodes so far:
    see `widened`), keyed by layer type where both kinds are there."""
    full = attention_bias(allowed, dtype)
    sliding = sliding_layers(cache)
    if not sliding:
        return full
    layer = sliding[0]
    held = layer.keys.shape[-2] if layer.is_initialized and layer.keys.dim() == 4 else 0
    first = layer.cumulative_length - min(held, layer.sliding_window + len(tree.ids) - 1)  # the first slot returned
    keys = tree.key_positions(first, depths).to(allowed.device)
    in_window = keys[None, :] > query_positions[:, None] - layer.sliding_window
    window = attention_bias(allowed[:, first:] & in_window, dtype)
    if len(sliding) == len(cache.layers):
        return window
    return {"full_attention": full, "sliding_attention": window}


@contextlib.contextmanager
def widened(cache, n_nodes: int):
    """Sliding layers return the window's slots plus the `n_nodes` of the tree already cached for the pass inside
    (grow_tree): its nodes sit at slots past their positions, and the window is counted in positions."""
    layers = sliding_layers(cache)
    for layer in layers:
        layer.sliding_window += n_nodes
    try:
        yield
    finally:
        for layer in layers:
            layer.sliding_window -= n_nodes


def keep_slots(cache, start: int, slots: list[int]) -> None:
    """In every layer, move the keys and values of cache slots `slots` (increasing, each ≥ start) to the slots from
    `start` on, in order, and drop everything after them."""
    end = start + len(slots)
    moved = slots != list(range(start, end))
    for layer in cache.layers:
        if not layer.is_initialized or layer.keys.numel() == 0:
            continue  # a layer that shares another's keys and values (KV sharing) holds none
        sliding = isinstance(layer, DynamicSlidingWindowLayer)
        # a sliding layer holds the slots from (what it was fed) − (what it holds) on
        offset = layer.cumulative_length - layer.keys.shape[-2] if sliding else 0
        if moved:
            index = torch.tensor(slots, device=layer.keys.device) - offset
            # written in place (no copy of the whole cache): the cache's tensors are inference tensors where the
            # pass ran in inference mode, writable only inside it
            with torch.no_grad(), torch.inference_mode(layer.keys.is_inference()):
                layer.keys[..., start - offset:end - offset, :] = layer.keys.index_select(-2, index)
                layer.values[..., start - offset:end - offset, :] = layer.values.index_select(-2, index)
        layer.keys = layer.keys[..., :end - offset, :]
        layer.values = layer.values[..., :end - offset, :]
        if sliding:
            layer.cumulative_length = end
            if end >= layer.sliding_window:
                layer.crop(0)  # back to the window's last positions, as after any pass


class TreeVerification:
    """The Runner's tree abilities (engine.core.runner) for a TransformersRunner on a DynamicCache of full-attention
    layers: forward_tree, grow_tree, keep_path and tree_refusal."""

    _tree: PendingTree | None = None  # the tree the cache holds, between forward_tree and keep_path
    _model_refusal: tuple[str | None] | None = None  # model_tree_refusal, once asked

    def tree_refusal(self) -> str | None:
        if self._model_refusal is None:
            self._model_refusal = (model_tree_refusal(self.model, self.config),)
        if self._model_refusal[0] is not None:
            return self._model_refusal[0]
        if self._keep_shared_kv:
            return "a drafter reads its shared key/value states (a Gemma 4 assistant), which hold one chain"
        return None

    def forward_tree(self, feed: list[int], ids: list[int], parents) -> torch.Tensor:
        """Runner.forward_tree: one pass over `feed` (at least one id) and the tree's nodes; float32 logits
        (len(ids) + 1, vocab): row 0 after feed's last id, row i + 1 after node i."""
        self._check_tree()
        if not feed:
            raise ValueError("forward_tree feeds at least one id: row 0 is the logits after the last one")
        if self.cache is None:
            self._new_cache()
        elif self.cache.get_seq_length() != len(self.ids):
            self.cache.crop(len(self.ids) - self.cache.get_seq_length())  # an abandoned tree's nodes
        base = len(self.ids)
        depths = node_depths(parents)
        self._tree = PendingTree(self.cache, base, list(feed))
        allowed = tree_allowed(base, len(feed), ancestor_mask(parents), self.device)
        positions = list(range(base, base + len(feed))) + [base + len(feed) + depth for depth in depths]
        return self._tree_pass(list(feed) + list(ids), allowed, positions, ids, parents, depths)

    def grow_tree(self, ids: list[int], parents) -> torch.Tensor:
        """Runner.grow_tree: the new nodes (parents index every node so far, old first) in one pass, each seeing the
        cache, the fed chain and its ancestors, old or new; float32 logits (len(ids), vocab)."""
        tree = self._pending()
        n_old = len(tree.ids)
        all_parents = tree.parents + list(parents)
        depths = node_depths(all_parents)[n_old:]
        ancestors = ancestor_mask(all_parents)[n_old:]  # (new, all nodes)
        allowed = torch.ones((len(ids), tree.start + len(all_parents)), dtype=torch.bool, device=self.device)
        allowed[:, tree.start:] = ancestors.to(self.device)
        positions = [tree.start + depth for depth in depths]
        return self._tree_pass(list(ids), allowed, positions, ids, parents, depths)

    def keep_path(self, path: list[int]) -> None:
        """Runner.keep_path: the cache keeps the context, the fed chain and `path`'s nodes (root to tip), as if
        they had been fed as a chain (the kept hidden rows too); every other node is dropped."""
        tree = self._pending()
        if any(not 0 <= b < len(tree.ids) or tree.parents[b] != a for a, b in zip([-1] + list(path), path)):
            raise ValueError(f"{path} is no root-to-node path of the tree")
        keep_slots(self.cache, tree.start, [tree.start + node for node in path])
        self.ids.extend(tree.feed + [tree.ids[node] for node in path])
        if self.hidden is not None:
            rows = torch.cat(tree.hidden)
            kept = list(range(len(tree.feed))) + [len(tree.feed) + node for node in path]
            self.hidden.append(rows[torch.tensor(kept, device=rows.device)], len(self.ids))
        self._tree = None

    def _check_tree(self) -> None:
        self._check_read()
        refusal = self.tree_refusal()
        if refusal:
            raise ConfigError(f"{type(self).__name__} verifies no tree: {refusal}")

    def _pending(self) -> PendingTree:
        tree = self._tree
        if tree is None or tree.cache is not self.cache or \
                self.cache.get_seq_length() != tree.start + len(tree.ids):
            raise RuntimeError("no tree is pending: forward_tree() first (and nothing else in between)")
        return tree

    def _tree_pass(self, input_ids: list[int], allowed: torch.Tensor, positions: list[int], ids: list[int],
                   parents, depths: list[int]) -> torch.Tensor:
        """The pass over `input_ids` with the mask `allowed` (queries, keys) at `positions`; the new nodes (of
        `depths`) join the pending tree. float32 logits of the last len(ids) + 1 positions (of all for grow_tree's
        nodes alone)."""
        tree = self._tree
        n_logits = min(len(ids) + 1, len(input_ids))
        query_positions = torch.tensor(positions, device=self.device)
        mask = tree_attention(self.cache, tree, allowed, query_positions, depths, self.model.dtype)
        with widened(self.cache, len(tree.ids)):
            out = self._pass(device_ids(input_ids, self.device), n_logits, outputs=self.hidden is not None,
                             attention_mask=mask, position_ids=query_positions[None])
        tree.ids.extend(ids)
        tree.parents.extend(parents)
        tree.depths.extend(depths)
        if self.hidden is not None:
            tree.hidden.append(out.hidden_states[-1][0])
        return out.logits[0, -n_logits:].float()
