"""The llama.cpp Runner: one llama.cpp context on a GgufModel, its KV cache and the ids in it, fed through the
low-level API (`llama_decode` over a batch with a logits flag per position, logits read in place, only the
rows asked for), rolled back by the strategy its model's memory needs (engine.backends.llama_cpp_rollback),
verifying a drafted token tree in one pass (engine.backends.llama_cpp_tree), and, for a head that drafts from
the target's own states, handing every pass's hidden states to a listener.

Touches the llama.cpp context it creates (and frees), its batch, and llama.cpp's logits buffer. No Qt.
"""

from __future__ import annotations

import ctypes
from typing import Protocol

import numpy as np
import torch

from engine.backends import Runner, common_prefix_length
from engine.backends.llama_cpp_library import BufferViews, clear_errors, last_error, mtp_bindings
from engine.backends.llama_cpp_rollback import RecurrentRollback, RollbackCost, TailRollback
from engine.backends.llama_cpp_tree import LlamaCppTrees, make_tree_capable
from engine.core.errors import ConfigError, OutOfMemoryError, PromptTooLongError, SpecScopeError

N_BATCH = 512  # tokens per llama_decode call; more than the longest verification (MAX_K + 1)


class NextnListener(Protocol):
    """Who reads the target's hidden states as heads need them (engine.backends.llama_cpp_mtp, _assistant)."""

    def on_rows(self, start: int, ids: np.ndarray, rows: np.ndarray) -> None:
        """A pass fed `ids` at positions start…; `rows` (len(ids), n_embd) are their last hidden states
        (llama.cpp's nextn embeddings), valid only during the call: copy what must be kept."""

    def on_close(self) -> None:
        """The runner's context is about to be freed (a context linked to it must go first)."""


class LlamaCppRunner(Runner):
    """One llama.cpp context on a GgufModel: its KV cache and the ids in it (engine.backends' Runner).

    forward() returns a view of llama.cpp's logits buffer, valid until the next call on this runner: use
    it at once, or clone what must be kept. How a rollback is done (a KV cache's tail cut, a recurrent state's
    snapshots or checkpoint) is its rollback strategy's, chosen once here by the model's kind of memory."""

    def __init__(self, model, *, rollback_depth: int | None = None) -> None:
        self.model = model  # its GgufModel (engine.backends.llama_cpp)
        self.context_length = model.context_length
        self.device = torch.device("cpu")  # where the logits are, whatever device runs the layers
        self.ids: list[int] = []
        self._ctx = None
        # how a rollback is done, chosen once by the model's kind of memory
        self._rollback: TailRollback | RecurrentRollback = \
            RecurrentRollback(model, rollback_depth or 0) if model.recurrent else TailRollback()
        self._listener: NextnListener | None = None
        self._last_prompt = (0, 0)  # positions first…end − 1 of the last ids fed with a head before the rows asked for
        self._trees = LlamaCppTrees(self)  # a drafted tree's sequences (forward_tree … keep_path)
        self._open()

    def _open(self) -> None:
        lib, model = self.model.lib, self.model
        params = lib.llama_context_default_params()
        params.n_ctx = self.context_length
        params.n_batch = params.n_ubatch = min(N_BATCH, self.context_length)
        params.n_seq_max = 1
        params.n_threads = params.n_threads_batch = model.n_threads
        params.no_perf = True
        params.n_rs_seq = self._rollback.snapshots_wanted
        if self.tree_refusal() is None:
            make_tree_capable(params)
        clear_errors()
        ctx = lib.llama_init_from_model(model.handle, params)
        if not ctx:
            raise OutOfMemoryError(f"llama.cpp could not make a context of {self.context_length:,} tokens for "
                                   f"{model.label} ({last_error('out of memory')}); use a shorter context")
        self._ctx, self.memory = ctx, lib.llama_get_memory(ctx)
        self._n_batch = int(params.n_batch)
        self._batch = lib.llama_batch_init(self._n_batch, 0, 1)
        batch = self._batch
        self._tokens = np.ctypeslib.as_array(batch.token, shape=(self._n_batch,))
        self._positions = np.ctypeslib.as_array(batch.pos, shape=(self._n_batch,))
        self._flags = np.ctypeslib.as_array(batch.logits, shape=(self._n_batch,))
        self._steps = np.arange(self._n_batch, dtype=np.int32)  # a batch's positions after its first
        self._logits_address, self._logits_views, self._row_views = None, {}, BufferViews()
        np.ctypeslib.as_array(batch.n_seq_id, shape=(self._n_batch,))[:] = 1
        for i in range(self._n_batch):
            batch.seq_id[i][0] = 0  # one sequence
        self.ids = []
        if self._listener is not None:
            mtp_bindings().llama_set_embeddings_nextn(ctx, True, False)  # every fed position's row, not just logits'
        self._rollback.opened(self)

    @property
    def context(self):
        """The llama_context (opened if it was released): an MTP context links to it."""
        if self._ctx is None:
            self._open()
        return self._ctx

    @property
    def open_context(self):
        """The llama_context, None while released (nothing is opened to ask)."""
        return self._ctx

    @property
    def cost(self) -> RollbackCost | None:
        """What this runner's rollbacks cost (a recurrent state's); None for a KV cache."""
        return self._rollback.cost

    def record_nextn(self, listener: NextnListener | None) -> None:
        """Hand every pass's last hidden states to `listener` (None: stop). Empties the cache, so that every
        cached position's state was seen."""
        if listener is self._listener:
            return
        self.release()
        self._listener = listener

    def stop_recording_nextn(self, listener: NextnListener) -> None:
        """Stop handing states to `listener`, where it is the one they go to."""
        if self._listener is listener:
            self.record_nextn(None)

    def reserve_rollback(self, depth: int) -> None:
        """Be able to cut `depth` − 1 tokens off the last pass of `depth` (a verification of k = depth − 1
        drafts): a recurrent model's context is made again with that many snapshots if it has fewer."""
        self._rollback.reserve(self, depth)

    def rollback_cost(self) -> dict | None:
        """What a rollback costs here (RollbackCost as a dict); None for a KV cache (nothing to say)."""
        return None if self.cost is None else self.cost.as_dict()

    def forward(self, new_ids: list[int], n_logits: int) -> torch.Tensor:
        """Feed new_ids after the cached ones; float32 logits (n_logits, vocab) of the last n_logits
        positions, read in place from llama.cpp (only those rows are computed)."""
        n = len(new_ids)
        if not 1 <= n_logits <= min(n, self._n_batch if self._ctx else N_BATCH):
            raise ValueError(f"n_logits must be from 1 to {min(n, N_BATCH)}, got {n_logits} for {n} ids")
        if len(self.ids) + n > self.context_length:
            raise PromptTooLongError(f"{len(self.ids) + n} tokens do not fit in the {self.context_length:,}-token "
                                     f"context of {self.model.label}; shorten the conversation")
        if min(new_ids) < 0 or max(new_ids) >= self.model.vocab_size:
            raise ValueError(f"token ids must be from 0 to {self.model.vocab_size - 1}")
        if self._ctx is None:
            self._open()
        self.decode(np.asarray(new_ids, dtype=np.int32), n_logits)
        if n > n_logits:  # a prompt: fed again whole where a reply to it is made again (sync)
            self._last_prompt = (len(self.ids), len(self.ids) + n)
        self.ids.extend(map(int, new_ids))
        return self._logits(n_logits)

    def _logits(self, n_rows: int) -> torch.Tensor:
        """llama.cpp's logits buffer as an (n_rows, vocab) tensor. The view is made once per buffer and row count
        (llama.cpp moves the buffer only when it grows it), not on every pass."""
        pointer = self.model.lib.llama_get_logits(self._ctx)
        address = ctypes.addressof(pointer.contents)
        if address != self._logits_address:
            self._logits_address, self._logits_views = address, {}
        view = self._logits_views.get(n_rows)
        if view is None:
            with torch.inference_mode(False):  # a plain tensor, whichever mode the first caller was in
                view = torch.from_numpy(np.ctypeslib.as_array(pointer, shape=(n_rows, self.model.vocab_size)))
            self._logits_views[n_rows] = view
        return view

    @property
    def batch_size(self) -> int:
        """The most tokens one llama_decode takes here."""
        return self._n_batch if self._ctx is not None else min(N_BATCH, self.context_length)

    def decode(self, ids: np.ndarray, n_logits: int) -> None:
        """Decode `ids` after the cached positions, logits for the last `n_logits` (self.ids is not changed
        here; the rollback strategies recompute kept tokens with it)."""
        start, n = len(self.ids), len(ids)
        # Fed as llama-server feeds a prompt: batches of n_batch from the first id, the rows asked for computed in
        # the batch of the ids before them. llama.cpp's kernels round a row differently in batches of other sizes,
        # so this is what makes a greedy reply llama-server's own, token for token, near-ties included. Only
        # where the last batch would hold fewer ids than the rows asked for do those get a batch of their own.
        begins = list(range(0, n, self._n_batch))
        if n_logits > n - begins[-1]:
            begins = list(range(0, n - n_logits, self._n_batch)) + [n - n_logits]
        ends = begins[1:] + [n]
        try:
            for begin, end in zip(begins, ends):
                self._decode_batch(ids[begin:end], start + begin, n_logits if end == n else 0)
        except BaseException:
            self._forget_from(start)
            raise

    def _decode_batch(self, ids: np.ndarray, position: int, n_outputs: int) -> None:
        m = len(ids)
        if m == 1:  # a decoding step: item writes cost less than slices
            self._tokens[0], self._positions[0], self._flags[0] = ids[0], position, n_outputs
        else:
            self._tokens[:m] = ids
            np.add(self._steps[:m], position, out=self._positions[:m])
            self._flags[:m] = 0
            self._flags[m - n_outputs:m] = 1 if n_outputs else 0
        self._batch.n_tokens = m
        self.run_batch(self._batch, m)
        if self._listener is not None:
            rows = mtp_bindings().llama_get_embeddings_nextn(self._ctx)
            if not rows:
                raise SpecScopeError(f"llama.cpp gave no hidden states for {self.model.label}'s MTP head")
            self._listener.on_rows(position, ids, self._row_views.of(rows, (m, self.model.n_embd)))

    def run_batch(self, batch, n_tokens: int) -> None:
        """llama_decode of `batch` (this runner's own or a tree's) holding `n_tokens`; llama.cpp's failures raised."""
        clear_errors()
        status = self.model.lib.llama_decode(self._ctx, batch)
        if status == 1:
            raise OutOfMemoryError(f"llama.cpp found no room in the KV cache of {self.model.label} "
                                   f"({self.context_length:,} tokens); start a new chat")
        if status != 0:
            raise SpecScopeError(f"llama.cpp failed to decode a batch (status {status}: "
                                 f"{last_error('no reason given')})")
        self._rollback.passed(n_tokens)

    # ---- token trees (engine.backends.llama_cpp_tree): each leaf a sequence of the context's unified KV cache

    def tree_refusal(self) -> str | None:
        """Why this runner verifies chains only (a recurrent state; an MTP head's listener), or None."""
        if self.model.recurrent:
            return (f"{self.model.label} keeps a recurrent state, which llama.cpp can't share among the sequences "
                    "of a tree's branches")
        if self._listener is not None:
            return f"a head reading {self.model.label}'s hidden states follows one chain"
        return None

    def forward_tree(self, feed: list[int], ids: list[int], parents) -> torch.Tensor:
        """Feed `feed` and every node of a tree in one pass (engine.core.runner); logits (n + 1, vocab), a view
        of llama.cpp's buffer valid until this runner's next pass where the nodes are in depth-first order."""
        self._check_tree(feed + list(ids), len(feed) + len(ids))
        return self._rows(self._trees.forward(list(feed), list(ids), parents), len(ids) + 1)

    def grow_tree(self, ids: list[int], parents) -> torch.Tensor:
        """More nodes for the pending tree in one pass (engine.core.runner); logits (len(ids), vocab)."""
        pending = self._trees.pending
        self._check_tree(list(ids), len(ids) + (len(pending.feed) + len(pending.ids) if pending else 0))
        return self._rows(self._trees.grow(list(ids), parents), len(ids))

    def _rows(self, rows: list[int] | None, n_rows: int) -> torch.Tensor:
        """The last pass's logits in the order of `rows` (where llama.cpp holds each; None: in its order)."""
        return self._logits(n_rows) if rows is None else self._logits(n_rows)[rows]

    def keep_path(self, path: list[int]) -> None:
        """Keep the context, the fed chain and the nodes of `path` that lie in line (LlamaCppTrees.keep_path; the
        next sync feeds the rest again); drop the other nodes."""
        self.ids.extend(self._trees.keep_path(list(path)))

    def _check_tree(self, new_ids: list[int], n_cells: int) -> None:
        why = self.tree_refusal()
        if why:
            raise ConfigError(why)
        if len(self.ids) + n_cells > self.context_length:
            raise PromptTooLongError(f"a tree of {n_cells} tokens does not fit in the {self.context_length:,}-token "
                                     f"context of {self.model.label}; shorten the conversation")
        if new_ids and (min(new_ids) < 0 or max(new_ids) >= self.model.vocab_size):
            raise ValueError(f"token ids must be from 0 to {self.model.vocab_size - 1}")
        if self._ctx is None:
            self._open()

    def _forget_from(self, length: int) -> None:
        """After a failed pass: drop whatever part of it reached the cache."""
        if self._ctx is not None and not self._rollback.cut_failed_pass(self, length):
            self.reset()

    def rollback(self, length: int) -> None:
        """Keep the first `length` cached positions."""
        if length >= len(self.ids):
            return
        if length < 0:
            raise ValueError(f"cannot roll back to a negative length ({length})")
        if self._ctx is None:
            del self.ids[length:]
            return
        self._rollback.rollback(self, length)

    def checkpoint(self) -> None:
        """Save the recurrent state as it stands, for the next rollback that reaches back before the last pass
        (sync() does it for a runner without snapshots: after a sync the cache holds committed positions only);
        nothing to do for a KV cache."""
        self._rollback.checkpoint(self)

    def sync(self, context_ids: list[int]) -> list[int]:
        """Roll back to the common prefix with context_ids (always leaving the last id out); return the ids
        still to feed. A recurrent state without snapshots is checkpointed here for the next rollback."""
        common = common_prefix_length(self.ids, context_ids)
        keep = min(common, len(context_ids) - 1)
        first, end = self._last_prompt
        if first < keep and len(context_ids) == end <= common:
            # the context is the last prompt fed, again (a regenerated reply): fed again whole, as it was the first
            # time, rather than its last id alone, so that its next token is computed as it was (bit for bit)
            keep = first
        self.rollback(keep)
        self._rollback.synced(self)
        return context_ids[len(self.ids):]

    def reset(self) -> None:
        """Empty the cache (its memory stays allocated for the next generation)."""
        self._trees.pending = None
        if self._ctx is not None:
            self.model.lib.llama_memory_clear(self.memory, False)
        self.ids = []
        self._rollback.emptied()

    def release(self) -> None:
        """Free the context and its KV cache; the next forward() makes a new one."""
        ctx, self._ctx = self._ctx, None
        self.ids = []
        self._trees.close()
        self._rollback.emptied()
        self._logits_address, self._logits_views = None, {}
        self._row_views.clear()
        if ctx:
            if self._listener is not None:
                self._listener.on_close()
            self.model.lib.llama_batch_free(self._batch)
            self.model.lib.llama_free(ctx)

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:  # interpreter shutdown
            pass
