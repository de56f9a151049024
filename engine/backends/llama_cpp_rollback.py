"""How a llama.cpp runner cuts a rejected draft off its cache, one strategy object per kind of memory, chosen
once when the runner is made: a KV cache cuts its tail (`TailRollback`); a recurrent or hybrid model's state
(Mamba, Qwen 3.5, Nemotron-H, …) keeps no per-position history, so it is cut back through llama.cpp's per-token
snapshots where the verifying target reserved them, else by restoring a checkpoint saved at the last sync and
recomputing the kept tokens after it (`RecurrentRollback`), and says what that costs (`RollbackCost`).

Touches the runner's llama.cpp context and memory (through the runner it is given) only. No torch, no Qt.
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass
import numpy as np

from engine.core.errors import SpecScopeError

STATE_PARTIAL = 1  # LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY: a sequence's recurrent state without its KV cache


@dataclass(slots=True)
class RollbackCost:
    """What rolling back a recurrent state costs on one runner (the Speculation panel shows it)."""

    kind: str  # how it is done
    snapshot_bytes: int  # one copy of the recurrent state
    snapshots: int  # kept per token by llama.cpp (n_rs_seq), 0 where a checkpoint is restored instead
    restores: int = 0  # rollbacks that restored a checkpoint and recomputed the kept tokens
    restore_seconds: float = 0.0
    refills: int = 0  # rollbacks past every checkpoint: the context recomputed from its start

    @staticmethod
    def kind_for(depth: int) -> str:
        """How a runner keeping `depth` snapshots per token rolls back."""
        return (f"per-token snapshots of the recurrent state (llama.cpp n_rs_seq = {depth})" if depth else
                "a checkpoint of the recurrent state, then the kept tokens recomputed")

    @property
    def mean_restore_ms(self) -> float | None:
        return 1000 * self.restore_seconds / self.restores if self.restores else None

    def as_dict(self) -> dict:
        return {"kind": self.kind, "snapshot_bytes": self.snapshot_bytes, "snapshots": self.snapshots,
                "mean_restore_ms": self.mean_restore_ms, "restores": self.restores, "refills": self.refills}


def recurrent_state_bytes(lib, ctx) -> int:
    """The size of one sequence's recurrent state in `ctx`, once a token has made it exist."""
    batch = lib.llama_batch_get_one((lib.llama_token * 1)(0), 1)
    if lib.llama_decode(ctx, batch) != 0:
        return 0
    size = int(lib.llama_state_seq_get_size_ext(ctx, 0, STATE_PARTIAL))
    lib.llama_memory_clear(lib.llama_get_memory(ctx), False)
    return size


class TailRollback:
    """A KV cache: every position has its own entry, so a rollback cuts the tail (llama_memory_seq_rm). Each
    method is given the LlamaCppRunner it serves (engine.backends.llama_cpp_runner, which chose it)."""

    snapshots_wanted = 0  # per-token snapshots to ask of a new context (llama.cpp's n_rs_seq): none
    cost: RollbackCost | None = None  # nothing to say

    def opened(self, runner) -> None:
        """A context was made for `runner`."""

    def passed(self, n_tokens: int) -> None:
        """A llama_decode of `n_tokens` ran."""

    def emptied(self) -> None:
        """The cache was emptied (or its context freed)."""

    def reserve(self, runner, depth: int) -> None:
        """Be able to cut depth − 1 tokens off a pass: a KV cache always can."""

    def rollback(self, runner, length: int) -> None:
        """Keep the first `length` cached positions of a runner with a context (length < len(runner.ids))."""
        if not runner.model.lib.llama_memory_seq_rm(runner.memory, 0, length, -1):
            raise SpecScopeError(f"llama.cpp could not roll back the KV cache of {runner.model.label}")
        del runner.ids[length:]

    def cut_failed_pass(self, runner, length: int) -> bool:
        """After a failed pass: drop what of it reached the cache; False where that can't be done (then empty it)."""
        return bool(runner.model.lib.llama_memory_seq_rm(runner.memory, 0, length, -1))

    def synced(self, runner) -> None:
        """`runner` was synced: its cache holds committed positions only."""

    def checkpoint(self, runner) -> None:
        """Save the state for a later rollback: a KV cache needs none."""


class RecurrentRollback:
    """A recurrent state, rolled back two ways. The verifying target reserves per-token snapshots
    (`reserve(k + 1)`, llama.cpp's n_rs_seq): cutting a rejected draft off the last pass is then as cheap as for a
    KV cache. Anything else (a draft model that fed its guesses one by one) restores the state saved at the last
    sync (a checkpoint) and recomputes the kept tokens after it; a rollback past the checkpoint recomputes from
    the start."""

    def __init__(self, model, snapshots_wanted: int) -> None:
        self.snapshots_wanted = snapshots_wanted if model.supports_rollback else 0
        self.depth = 0  # the snapshots llama.cpp keeps for the current context
        self.cost = RollbackCost(RollbackCost.kind_for(0), model.state_bytes, 0)
        self._last_pass = 0  # tokens in the last llama_decode: snapshots cover only those
        self._snapshot_pending = False  # a snapshot rollback is consumed by the next decode
        self._checkpoint: tuple[int, ctypes.Array, int] | None = None  # (length, state bytes, size)
        # a checkpoint at every sync, for rollbacks of tokens fed one pass each (a draft model's); off while the
        # runner's owner said its passes are cut by nothing (plain decoding: reserve(1))
        self._checkpoints = True

    def _describe(self, depth: int) -> None:
        self.cost.kind, self.cost.snapshots = RollbackCost.kind_for(depth), depth

    def opened(self, runner) -> None:
        self.depth = int(runner.model.lib.llama_n_rs_seq(runner.context))
        self.emptied()
        self._describe(self.depth)

    def passed(self, n_tokens: int) -> None:
        self._last_pass, self._snapshot_pending = n_tokens, False

    def emptied(self) -> None:
        self._last_pass, self._snapshot_pending, self._checkpoint = 0, False, None

    def reserve(self, runner, depth: int) -> None:
        """A context with `depth` snapshots if it has fewer: made again (on the next forward), the cache refilled
        by the next sync."""
        self._checkpoints = depth > 1
        if not self._checkpoints:
            self._checkpoint = None  # none kept from now on: an older one must not outlive the ids it was saved for
        if not runner.model.supports_rollback or depth <= self.snapshots_wanted:
            return
        runner.release()
        self.snapshots_wanted = depth
        self._describe(depth)  # what the next context keeps

    def cut_failed_pass(self, runner, length: int) -> bool:
        return False  # the state holds the failed pass: start again

    def rollback(self, runner, length: int) -> None:
        lib, drop = runner.model.lib, len(runner.ids) - length
        # a snapshot llama.cpp kept during the last pass (one rollback per pass; not to before the pass)
        if (not self._snapshot_pending and drop <= min(self.depth, self._last_pass - 1)
                and lib.llama_memory_seq_rm(runner.memory, 0, length, -1)):
            self._snapshot_pending = True
            del runner.ids[length:]
            return
        started = time.perf_counter()
        kept = runner.ids[:length]
        if self._checkpoint is not None and self._checkpoint[0] <= length and self._restore(runner):
            base = self._checkpoint[0]
            self.cost.restores += 1
        else:
            lib.llama_memory_clear(runner.memory, False)
            base = 0
            self.cost.refills += 1
        runner.ids = kept[:base]
        self._last_pass, self._snapshot_pending = 0, False
        if length > base:
            runner.decode(np.asarray(kept[base:], dtype=np.int32), 0)
            runner.ids = kept
        self.cost.restore_seconds += time.perf_counter() - started

    def synced(self, runner) -> None:
        """Without snapshots, the state after a sync is what the next rollback restores (a draft model's)."""
        if not self.depth and self._checkpoints and runner.ids:
            self.checkpoint(runner)

    def checkpoint(self, runner) -> None:
        """Save the recurrent state as it stands, for the next rollback that reaches back before the last pass."""
        lib, ctx = runner.model.lib, runner.open_context
        if ctx is None or self._snapshot_pending:
            return
        size = int(lib.llama_state_seq_get_size_ext(ctx, 0, STATE_PARTIAL))
        buffer = self._checkpoint[1] if self._checkpoint and len(self._checkpoint[1]) >= size else \
            (ctypes.c_uint8 * size)()
        written = int(lib.llama_state_seq_get_data_ext(ctx, buffer, size, 0, STATE_PARTIAL))
        self._checkpoint = (len(runner.ids), buffer, written) if written else None

    def _restore(self, runner) -> bool:
        """The recurrent state back as the checkpoint saved it, the attention cache cut to its length."""
        lib = runner.model.lib
        length, buffer, size = self._checkpoint
        if not lib.llama_state_seq_set_data_ext(runner.open_context, buffer, size, 0, STATE_PARTIAL):
            self._checkpoint = None
            return False
        return bool(lib.llama_memory_seq_rm(runner.memory, 0, length, -1))
