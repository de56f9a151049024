"""Rolling back a hybrid model's cache on the transformers backend: linear-attention layers (Gated DeltaNet,
Mamba-style: transformers.cache_utils' LinearAttention* layers) beside attention layers (Qwen 3.5 / 3.6,
Qwen3-Next).

transformers crops an attention layer's keys and values, and (past recording on) a linear layer's convolution
inputs, but not its recurrent state: one fixed-size matrix per head that every pass overwrites in place
(`LinearAttentionLayer.update_recurrent_state` copies into it; `is_croppable` turns False once it exists), and
the chunked kernel of a multi-token pass gives only the state after its last token. So `HybridRollback` clones
every linear layer's states before each pass (a `Snapshot`: small and fixed in size, whatever the context),
and a rollback into a pass restores the snapshot taken before it and crops the attention layers back to the
same position; the runner then feeds the kept tokens after it again (engine.backends.transformers).

Touches torch and the layers of a transformers cache; imported by the transformers runner only.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

import torch
from transformers.cache_utils import CacheLayerMixin, LinearAttentionCacheLayerMixin

KIND = "recurrent-state snapshot"
MAX_SNAPSHOTS = 32  # passes since the last rollback worth going back to (a draft model's k one-token passes)


def linear_layers(cache) -> list[int]:
    """The indices of a cache's layers that keep a linear-attention (conv / recurrent) state."""
    return [i for i, layer in enumerate(getattr(cache, "layers", ()))
            if isinstance(layer, LinearAttentionCacheLayerMixin)]


@dataclass(slots=True)
class Snapshot:
    """The linear-attention states of a cache holding `length` positions: per (layer, state index), the last
    kernel-size convolution inputs (all the next pass reads) and the recurrent state, both cloned."""

    length: int
    states: list[tuple[int, int, torch.Tensor | None, torch.Tensor | None]]
    nbytes: int


def take(cache, layers: list[int], length: int) -> Snapshot:
    states, nbytes = [], 0
    for index in layers:
        layer = cache.layers[index]
        for i in range(layer.number_of_states):
            conv = layer.conv_states[i] if layer.is_conv_states_initialized[i] else None
            if conv is not None:
                conv = conv[..., -layer.conv_kernel_size[i]:].clone()
            recurrent = layer.recurrent_states[i].clone() if layer.is_recurrent_states_initialized[i] else None
            nbytes += sum(t.numel() * t.element_size() for t in (conv, recurrent) if t is not None)
            states.append((index, i, conv, recurrent))
    return Snapshot(length, states, nbytes)


def restore(cache, snapshot: Snapshot, length: int) -> None:
    """Put a cache holding `length` positions back to `snapshot`: the attention layers (a hybrid layer's too)
    cropped to its length, the linear-attention states put back."""
    n_remove = length - snapshot.length
    for layer in cache.layers:
        if isinstance(layer, CacheLayerMixin) and n_remove:
            layer.crop(-n_remove)  # a hybrid layer crops its conv inputs too: overwritten below
    for index, i, conv, recurrent in snapshot.states:
        # copies of their own (the snapshot stays reusable), assigned rather than copied into the layer's: a
        # state made in inference mode can't be written in place outside it (the engine syncs outside it)
        layer = cache.layers[index]
        if conv is not None:
            layer.conv_states[i] = conv.clone()
        if recurrent is not None:
            layer.recurrent_states[i] = recurrent.clone()
        layer.has_previous_state[i] = conv is not None or recurrent is not None


class HybridRollback:
    """The snapshots of one runner's cache and what rolling back has cost (`cost()`, the Speculation panel's)."""

    def __init__(self, layers: list[int], max_snapshots: int = MAX_SNAPSHOTS) -> None:
        self.layers = layers
        self.max_snapshots = max_snapshots
        self.snapshots: list[Snapshot] = []  # by length, oldest first
        self.snapshot_bytes = 0  # one snapshot's size
        self.restores = 0  # rollbacks that restored a snapshot (and recomputed the kept tokens after it)
        self.restore_seconds = 0.0
        self.refills = 0  # rollbacks past every snapshot: the kept context recomputed from its start
        self._timed: deque = deque()  # on a GPU: (start, end) CUDA events of restores not added to the time yet

    def clear(self) -> None:
        self.snapshots.clear()

    def before_pass(self, cache, length: int) -> None:
        """Snapshot a cache holding `length` positions before a pass that may be rolled back (nothing to keep
        for an empty cache, nor twice for the same state)."""
        if length == 0 or (self.snapshots and self.snapshots[-1].length == length):
            return
        snapshot = take(cache, self.layers, length)
        self.snapshot_bytes = snapshot.nbytes
        self.snapshots.append(snapshot)
        del self.snapshots[:-self.max_snapshots]

    def restore_point(self, length: int) -> Snapshot | None:
        """The latest snapshot at or before `length`; later ones (of rolled-back positions) and earlier ones
        (past the next rollback's reach) are dropped."""
        while self.snapshots and self.snapshots[-1].length > length:
            self.snapshots.pop()
        del self.snapshots[:-1]
        return self.snapshots[-1] if self.snapshots else None

    def start(self, device: torch.device):
        """A rollback starts: what `count` times it from. On a GPU a CUDA event in the stream, so that timing the
        recompute's kernels (not only their launch) makes nothing wait: `cost()` reads the time later."""
        if device.type != "cuda":
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def count(self, started, refill: bool) -> None:
        """A rollback that began at `started` (from `start`) is done: a refill, or a restore and its recompute."""
        if refill:
            self.refills += 1
            return
        self.restores += 1
        if isinstance(started, float):
            self.restore_seconds += time.perf_counter() - started
            return
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        self._timed.append((started, end))
        self._add_times(wait=False)

    def _add_times(self, wait: bool) -> None:
        """Add the GPU time of the timed restores whose kernels are done (with `wait`: of all, waiting for them)."""
        while self._timed and (wait or self._timed[0][1].query()):
            begun, end = self._timed.popleft()
            end.synchronize()
            self.restore_seconds += begun.elapsed_time(end) / 1000

    def cost(self) -> dict:
        """kind, snapshot_bytes (one snapshot), mean_restore_ms (a restore and the recompute of the kept
        tokens; None before the first), restores; and, as llama.cpp's runner says them, snapshots (held now)
        and refills."""
        self._add_times(wait=True)
        return {"kind": KIND, "snapshot_bytes": self.snapshot_bytes,
                "mean_restore_ms": 1000 * self.restore_seconds / self.restores if self.restores else None,
                "restores": self.restores, "snapshots": len(self.snapshots), "refills": self.refills}
