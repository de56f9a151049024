"""The Runner contract: what the round loop, the measurements and the drafters see of one loaded model's KV
cache, including its optional abilities, declared here with defaults (a backend overrides the ones it has),
so that nobody finds an ability by probing for it. The backends (engine.backends) implement it and re-export
it; it lives in the core because the loop reads it and the core imports nothing from the backends.

Types only: torch is named, not imported. No Qt.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from engine.core.errors import ConfigError

if TYPE_CHECKING:
    import torch


class Runner(Protocol):
    """One loaded model's KV cache and the token ids it holds. Not thread-safe: one generation at a time.
    A runner subclasses this Protocol to inherit the defaults of the abilities it lacks."""

    ids: list[int]  # the ids the cache holds
    device: "torch.device"  # where the logits are computed

    def forward(self, new_ids: list[int], n_logits: int) -> "torch.Tensor":
        """Feed `new_ids` (n ids) after the cached ones; float32 logits (n_logits, vocab) of the LAST n_logits
        positions. They may be a view of the backend's own buffer (llama.cpp), valid until the runner's next
        call: clone what must be kept."""

    def rollback(self, length: int) -> None:
        """Keep the first `length` cached positions."""

    def sync(self, context_ids: list[int]) -> list[int]:
        """Roll back to the common prefix with `context_ids` (always leaving the last id out) and return the
        ids still to feed."""

    def reset(self) -> None:
        """Empty the cache."""

    def release(self) -> None:
        """Free the cache's memory between conversations."""

    # ---- optional abilities: these defaults say "none here"

    def network_seconds(self) -> float:
        """The network's share of the last pass (a target on a server: engine.remote.verify); 0 for a local one."""
        return 0.0

    def reserve_rollback(self, depth: int) -> None:
        """Be able to cut depth − 1 tokens off a pass of `depth` (a verification of k = depth − 1 drafts). A KV
        cache can always: nothing to do (a recurrent state keeps per-token snapshots, llama.cpp)."""

    def rollback_cost(self) -> dict | None:
        """What a rollback costs here (kind, snapshot_bytes, snapshots, mean_restore_ms, restores, refills);
        None where it is a KV cache's cut, with nothing to say."""
        return None

    def checkpoint(self) -> None:
        """Save the state as it stands, for the next rollback that reaches back before the last pass (a
        recurrent state without snapshots); nothing to do for a KV cache."""

    def record_outputs(self, *, shared_kv: bool = False) -> None:
        """From now on keep the last layer's hidden state of every cached position (and, with `shared_kv`, the
        last pass's shared key/value states), for a drafter that reads them. ConfigError where this runner
        keeps none."""
        raise ConfigError(f"{type(self).__name__} keeps no hidden states for a drafter to read")

    def hidden_rows(self, start: int) -> "torch.Tensor | None":
        """The kept hidden states (n, hidden) of cached positions start…len(ids)−1; None where they are not all
        kept (or record_outputs was never asked)."""
        return None

    def shared_kv_states(self, length: int) -> dict | None:
        """The last pass's shared key/value states cut to `length` positions; None where none are kept."""
        return None

    # ---- token trees (engine.core.tree): one pass over every node of a drafted tree

    def tree_refusal(self) -> str | None:
        """Why this runner can't verify a tree in one pass (said to the user, who then gets chains), or None
        where it can."""
        return f"{type(self).__name__} verifies chains only"

    def forward_tree(self, feed: list[int], ids: list[int], parents) -> "torch.Tensor":
        """Feed the chain `feed` after the cached ids and then every node of a tree (`ids`, `parents` as in
        engine.core.tree: node i at position len(cache) + len(feed) + its depth, seeing the context and its own
        ancestors only); float32 logits (n + 1, vocab): row 0 after the last id of `feed`, row i + 1 after node
        i (`ids` may be empty: the row after `feed` alone; `feed` never is: it holds at least the last committed
        id). The cache then holds the nodes until keep_path() says which to keep; nothing else may be called in
        between but grow_tree()."""
        raise ConfigError(self.tree_refusal() or f"{type(self).__name__} verifies chains only")

    def grow_tree(self, ids: list[int], parents) -> "torch.Tensor":
        """After forward_tree: add nodes to the tree the cache holds (a drafter growing a tree level by level,
        EAGLE-2's dynamic tree). `parents[i]` indexes every node so far, the earlier ones first and then these
        (−1: a child of the fed chain's last id); `parents` has one entry per new node. Float32 logits
        (len(ids), vocab), row i after new node i. Rows (here and forward_tree's) may be views of the runner's
        buffers, valid until its next pass. List each node's children best first: a runner may compute the
        first-child line exactly as a chain and other branches with slightly different rounding."""
        raise ConfigError(self.tree_refusal() or f"{type(self).__name__} verifies chains only")

    def keep_path(self, path: list[int]) -> None:
        """After forward_tree: keep the context, the fed chain and the nodes of `path` (root to tip, node
        indices), as if they had been fed as a chain; drop every other node. A runner may keep only the path's
        first nodes (llama.cpp keeps those whose cells lie in line: engine.backends.llama_cpp_tree): `ids` says
        what it holds, and the next sync() gives the rest to feed again."""
        raise ConfigError(self.tree_refusal() or f"{type(self).__name__} verifies chains only")


def take_in(runner: Runner, context_ids: list[int]) -> None:
    """Feed `runner` the ids of `context_ids` it lacks, but the last (a drafter's prefill: its first draft pass then
    feeds that one id)."""
    feed = runner.sync(context_ids)
    if len(feed) > 1:
        runner.forward(feed[:-1], 1)
