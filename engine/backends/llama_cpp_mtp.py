"""Multi-token-prediction (nextn) heads on llama.cpp: the MTP context that drafts from the target's own hidden
states, as llama.cpp's `common/speculative.cpp` (draft-mtp) runs it.

The head is one decoder block (Qwen 3.5/3.6, GLM-4.5, DeepSeek-V3: one; Step-3.5, MiMo-V2: several, chained)
stored inside the target's GGUF (`blk.N.nextn.*`, `<arch>.nextn_predict_layers`) or alone beside it in an
`mtp-*.gguf` sidecar. It runs in a context of its own (`LLAMA_CONTEXT_TYPE_MTP`, linked to the target's
through `ctx_other`) with a KV cache of its own: its entry at position p reads the token at p and the
target's last hidden state at p − 1, and its logits predict the token at p + 1. The target's context hands
over every pass's hidden states (llama.cpp's nextn embeddings, `LlamaCppRunner.record_nextn`); the head's
cache takes in the prompt's entries in the prefill round (`prefill`, as llama-server's draft-mtp does in its prompt
processing) and is caught up, when a draft is asked for, from what the target kept.

Drafting k tokens: one head re-applies itself (its own output state in place of the target's, as llama.cpp
does); chained heads run one each (k ≤ heads), each over the chain so far.

Touches the llama.cpp model(s), the MTP context it creates and the target runner's hidden states. No torch
here except the logits handed back, no Qt.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from engine.backends import common_prefix_length
from engine.backends.gguf_file import (MTP_ARCHITECTURES, ONE_HEAD_ARCHITECTURES, fitting_sidecar, mtp_mismatch,
                                       mtp_shape, read_header)
from engine.backends.llama_cpp_library import (BufferViews, HeldWeights, clear_errors, last_error, memory_check_on,
                                               mtp_bindings)
from engine.backends.llama_cpp_runner import N_BATCH, LlamaCppRunner
from engine.core.errors import ConfigError, ModelLoadError, OutOfMemoryError, SpecScopeError

ROW_MARGIN = 256  # hidden states kept behind the head's cache, for a rollback that reaches back into it


def find_sidecar(target) -> Path | None:
    """An MTP head file beside the target (a GgufModel) that fits it (same architecture, width and vocabulary)."""
    return fitting_sidecar(target.path, mtp_shape(target.header))


def _sidecar_mismatch(target, path: Path, header) -> str | None:
    """Why the MTP file at `path` is not for `target` (None: it fits)."""
    return mtp_mismatch(mtp_shape(header), mtp_shape(target.header), target.label)


class MtpHead(HeldWeights):
    """The MTP layers one target (a GgufModel) drafts with: its own (loaded with it) or a sidecar file's (loaded
    here)."""

    def __init__(self, target, sidecar: str | Path | None = None) -> None:
        self.ext = mtp_bindings()
        self.target = target
        self.lib = target.lib
        self.sidecar: Path | None = None
        arch = target.header.architecture
        if arch not in MTP_ARCHITECTURES:
            raise ConfigError(f"method mtp: llama.cpp has no MTP graph for {target.label}'s architecture ({arch!r})")
        if sidecar is None and not target.n_nextn:
            sidecar = find_sidecar(target)
            if sidecar is None:
                raise ConfigError(
                    f"method mtp needs multi-token-prediction layers: {target.label} has none inside "
                    f"({arch}.nextn_predict_layers) and no mtp-*.gguf head lies beside it; give one with "
                    "--draft FILE, or use another method")
        if sidecar is not None:
            self._load_sidecar(Path(sidecar).expanduser())
            self.n_heads = int(self.lib.llama_model_n_layer_nextn(self.handle))
        else:
            self.n_heads = target.n_nextn
        if arch in ONE_HEAD_ARCHITECTURES and self.n_heads != 1:
            self.release()
            raise ConfigError(f"method mtp: llama.cpp runs one MTP layer for {arch!r} models, and "
                              f"{self.label} declares {self.n_heads}")
        self.chained = self.n_heads > 1

    @property
    def weights(self):
        """The llama_model whose MTP layers draft: the sidecar's, else the target's own."""
        return self.handle or self.target.handle

    @property
    def label(self) -> str:
        return self.sidecar.name if self.sidecar else f"{self.target.label}'s own MTP layer" + \
            ("s" if self.n_heads > 1 else "")

    def _load_sidecar(self, path: Path) -> None:
        header = read_header(path)  # a missing, truncated or foreign file: ModelLoadError in its words
        if not header.mtp_only:
            raise ConfigError(f"method mtp: {path.name} is not an MTP head file (it declares no nextn layers, or "
                              "carries a whole model); give the mtp-*.gguf the converter wrote with --mtp")
        problem = _sidecar_mismatch(self.target, path, header)
        if problem:
            raise ConfigError(f"method mtp: {path.name} is not {self.target.label}'s MTP head: {problem}")
        if memory_check_on() and not self.target.n_gpu_layers:
            from engine.host import free_memory
            free = free_memory("cpu")
            if free is not None and header.file_size > free:
                raise OutOfMemoryError(f"{path.name} needs {header.file_size / 2**30:.1f} GB of memory, but only "
                                       f"{free / 2**30:.1f} GB is free")
        params = self.lib.llama_model_default_params()
        params.n_gpu_layers = self.target.n_gpu_layers
        params.load_mtp = True
        clear_errors()
        handle = self.lib.llama_model_load_from_file(str(path).encode(), params)
        if not handle:
            raise ModelLoadError(f"{path.name} could not be loaded by llama.cpp "
                                 f"({last_error('no reason given')})")
        self.handle, self.sidecar = handle, path

    def release(self) -> None:
        """Free a sidecar's weights (the target's own layers are the target's)."""
        self.release_weights()


class _Rows:
    """The target's last hidden states by position (a contiguous run), appended as passes hand them over."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.buffer = np.empty((0, width), np.float32)
        self.start = 0  # position of buffer row 0
        self.end = 0  # one past the last position held

    def put(self, position: int, rows: np.ndarray) -> None:
        n = rows.shape[0]
        if not self.start <= position <= self.end:  # a gap (or before what is kept): start over here
            self.start = self.end = position
        used = position - self.start
        if used + n > self.buffer.shape[0]:
            grown = np.empty((max(2 * (used + n), 64), self.width), np.float32)
            grown[:used] = self.buffer[:used]
            self.buffer = grown
        self.buffer[used:used + n] = rows
        self.end = position + n

    def has(self, first: int, last: int) -> bool:
        return self.start <= first and last < self.end

    def rows(self, first: int, end: int) -> np.ndarray:
        """The states of positions first…end − 1, a view."""
        return self.buffer[first - self.start:end - self.start]

    def trim(self, keep_from: int) -> None:
        """Forget positions before `keep_from` (memory stays bounded on a long chat)."""
        drop = min(keep_from, self.end) - self.start
        if drop > 4 * ROW_MARGIN:
            self.buffer = self.buffer[drop:self.end - self.start].copy()
            self.start += drop


class MtpContext:
    """The head's llama.cpp context, kept in step with the target runner (engine.backends.llama_cpp_runner's
    NextnListener), and the drafting loop over it."""

    def __init__(self, head: MtpHead, target_runner: LlamaCppRunner) -> None:
        self.head = head
        self.runner = target_runner
        self.lib, self.ext = head.lib, head.ext
        self.width = head.target.n_embd
        self.rows = _Rows(self.width)
        self._ctx = None
        self._seen: list[int] = []  # the tokens of the entries the head's cache holds (position = index)
        self._zero = np.zeros((1, self.width), np.float32)  # the state before position 0
        self._views = BufferViews()  # of llama.cpp's output buffers
        self.clears = 0  # cuts its cache could not make (emptied instead): 0 where llama.cpp cuts it
        target_runner.record_nextn(self)

    # ---- the target's side (NextnListener)

    def on_rows(self, start: int, ids: np.ndarray, rows: np.ndarray) -> None:
        self.rows.put(start, rows)

    def on_close(self) -> None:
        self._free()

    # ---- the head's context

    def _open(self) -> None:
        lib, target = self.lib, self.head.target
        params = lib.llama_context_default_params()
        params.n_ctx = self.runner.context_length
        params.n_batch = params.n_ubatch = min(N_BATCH, self.runner.context_length)
        params.n_seq_max = 1
        params.n_threads = params.n_threads_batch = target.n_threads
        params.no_perf = True
        params.ctx_type = lib.LLAMA_CONTEXT_TYPE_MTP
        params.ctx_other = self.runner.context
        clear_errors()
        ctx = lib.llama_init_from_model(self.head.weights, params)
        if not ctx:
            raise OutOfMemoryError(f"llama.cpp could not make the MTP context for {target.label} "
                                   f"({last_error('out of memory')})")
        self._ctx, self._memory = ctx, lib.llama_get_memory(ctx)
        # its output states, for the next step's input: every row's (a masked read gives the first row of a pass
        # of several, not the row with logits), read by batch index
        self.ext.llama_set_embeddings_nextn(ctx, True, False)
        self._n_batch = int(params.n_batch)
        self._batch = lib.llama_batch_init(self._n_batch, self.width, 1)
        self._tokens = (lib.llama_token * self._n_batch)()  # a batch carries the tokens and their states
        self._batch.token = self._tokens
        batch = self._batch
        self._token_view = np.ctypeslib.as_array(self._tokens, shape=(self._n_batch,))
        self._positions = np.ctypeslib.as_array(batch.pos, shape=(self._n_batch,))
        self._flags = np.ctypeslib.as_array(batch.logits, shape=(self._n_batch,))
        self._states = np.ctypeslib.as_array(batch.embd, shape=(self._n_batch, self.width))
        self._steps = np.arange(self._n_batch, dtype=np.int32)  # a batch's positions after its first
        np.ctypeslib.as_array(batch.n_seq_id, shape=(self._n_batch,))[:] = 1
        for i in range(self._n_batch):
            batch.seq_id[i][0] = 0
        self._seen = []
        self._views.clear()

    def _free(self) -> None:
        ctx, self._ctx = self._ctx, None
        self._seen = []
        if ctx:
            self._batch.token = ctypes.POINTER(self.lib.llama_token)()  # ours, not llama_batch_free's to free
            self.lib.llama_batch_free(self._batch)
            self.lib.llama_free(ctx)

    def _decode(self, tokens: list[int], first: int, states: np.ndarray, *, head: int = 0) -> None:
        """One pass of MTP layer `head` over (token, state) pairs at positions first… (`states`: (m, width)), logits
        for the last, written into the batch allocated once per context."""
        m = len(tokens)
        if m == 1:  # a drafting step: item writes cost less than slices
            self._token_view[0], self._positions[0], self._flags[0] = tokens[0], first, 1
        else:
            self._token_view[:m] = tokens
            np.add(self._steps[:m], first, out=self._positions[:m])
            self._flags[:m] = 0
            self._flags[m - 1] = 1
        self._states[:m] = states
        self._batch.n_tokens = m
        self._last_row = m - 1  # the batch index of the row with logits (and an output state)
        if self.head.chained:
            self.ext.llama_set_nextn_layer_offset(self._ctx, head)
        clear_errors()
        try:
            status = self.lib.llama_decode(self._ctx, self._batch)
        finally:
            if self.head.chained:
                self.ext.llama_set_nextn_layer_offset(self._ctx, 0)
        if status != 0:
            raise SpecScopeError(f"llama.cpp failed to run the MTP head (status {status}: "
                                 f"{last_error('no reason given')})")

    def _cut(self, length: int) -> None:
        if not self.lib.llama_memory_seq_rm(self._memory, 0, length, -1):
            self.lib.llama_memory_clear(self._memory, False)
            self.clears += 1
            length = 0
        del self._seen[length:]

    def _state_before(self, position: int) -> np.ndarray:
        """(1, width): the target's state before `position`."""
        return self._states_before(position, position + 1)

    def _states_before(self, begin: int, end: int) -> np.ndarray:
        """(end − begin, width): the target's states before positions begin…end − 1 (a view where it can be)."""
        if begin:
            return self.rows.rows(begin - 1, end - 1)
        return self._zero if end == 1 else np.concatenate([self._zero, self.rows.rows(0, end - 1)])

    def _catch_up(self, context_ids: list[int], upto: int) -> bool:
        """Entries 0…upto−1 in the head's cache, for `context_ids` (the target holds its ids but the last, so
        upto ≤ len(context_ids)). True when the last pass ran entry upto − 1 (its logits are there to read)."""
        valid = min(common_prefix_length(self._seen, context_ids[:upto]), upto)
        if valid < len(self._seen):
            self._cut(valid)
        n_cached = len(context_ids) - 1
        if valid < upto and not self.rows.has(max(valid - 1, 0), upto - 2):
            # the target was cut back behind the states kept (a chat edited far back): run it again
            self.runner.reset()
            self.runner.forward(context_ids[:n_cached], 1)
            self._cut(0)
            valid = 0
        for begin in range(valid, upto, self._n_batch):
            end = min(begin + self._n_batch, upto)
            tokens = context_ids[begin:end]
            states = self._states_before(begin, end)
            heads = range(self.head.n_heads) if self.head.chained else (0,)
            for head in heads:  # every chained head keeps its cache of the context
                if head:
                    self.lib.llama_memory_seq_rm(self._memory, 0, begin, -1)
                self._decode(tokens, begin, states, head=head)
            self._seen.extend(tokens)
        self.rows.trim(n_cached - ROW_MARGIN)
        return valid < upto

    def prefill(self, context_ids: list[int]) -> None:
        """The target has just taken in all but the last of `context_ids` (the prompt): their entries go into the
        head's cache now (the time to the first token), as llama.cpp's draft-mtp takes in every prompt batch,
        rather than in the first draft()."""
        n_cached = len(context_ids) - 1
        if n_cached < 1 or self.runner.ids != context_ids[:n_cached]:
            return  # not synced to it: the first draft() catches up
        if self._ctx is None:
            self._open()
        # its last entry's logits too, unused: a context's first pass with an output costs llama.cpp tens of ms
        # (measured 29 ms on the tiny fixture), better paid here than in the first drafting round
        self._catch_up(context_ids, n_cached)

    def draft(self, context_ids: list[int], k: int, pick: Callable[[torch.Tensor], int]
              ) -> tuple[list[int], list[torch.Tensor]]:
        """Up to k tokens after `context_ids` (the target holds all but the last), each chosen by `pick` from
        the head's float32 logits (which it may keep: they are copies)."""
        n_cached = len(context_ids) - 1
        if self.runner.ids != context_ids[:n_cached]:
            raise RuntimeError("the target runner is not synced to the context the MTP head drafts after")
        if self._ctx is None:
            self._open()
        if self.head.chained:
            self._catch_up(context_ids, n_cached)
            return self._draft_chained(context_ids, min(k, self.head.n_heads), pick)
        # one head: the entry at the last position (committed tokens only: it stays) drafts the first token,
        # run in the same pass as the entries the head's cache lacks
        if not self._catch_up(context_ids, n_cached + 1):
            self._cut(n_cached)
            self._decode([context_ids[-1]], n_cached, self._state_before(n_cached))
            self._seen.append(context_ids[-1])
        return self._draft_reapplied(context_ids, k, pick)

    def _logits(self) -> torch.Tensor:
        """The last pass's logits (its one row with logits), a copy: the caller may keep it."""
        pointer = self.lib.llama_get_logits_ith(self._ctx, -1)
        return torch.from_numpy(self._views.of(pointer, (self.head.target.vocab_size,)).copy())

    def _output_state(self, index: int) -> np.ndarray:
        """(1, width): the head's output state at batch row `index` of the last pass, a view valid until the next."""
        state = self.ext.llama_get_embeddings_nextn_ith(self._ctx, index)
        if not state:
            raise SpecScopeError("llama.cpp gave no output state for the MTP head")
        return self._views.of(state, (1, self.width))

    def _draft_reapplied(self, context_ids, k, pick):
        """One head: its entry at the last position has drafted; it runs again on its own guess and state."""
        n = len(context_ids) - 1
        ids, rows = [], []
        for step in range(k):
            if step:
                self._decode([ids[-1]], n + step, self._output_state(self._last_row))
            logits = self._logits()
            ids.append(pick(logits))
            rows.append(logits)
        self._cut(n + 1)
        return ids, rows

    def _draft_chained(self, context_ids, k, pick):
        """Chained heads (Step-3.5 style): head h runs over the chain so far and drafts token h + 1."""
        n = len(context_ids) - 1
        tokens, states = [context_ids[-1]], [self._state_before(n)]
        ids, rows = [], []
        for head in range(k):
            self.lib.llama_memory_seq_rm(self._memory, 0, n, -1)
            self._decode(tokens, n, np.concatenate(states), head=head)
            logits = self._logits()
            token = pick(logits)
            ids.append(token)
            rows.append(logits)
            if head + 1 < k:
                tokens.append(token)
                states.append(self._output_state(len(tokens) - 2).copy())  # kept past the next pass
        self._cut(n)
        return ids, rows

    def release(self) -> None:
        """Stop reading the target's states and free the head's context (the sidecar's weights too)."""
        self._free()
        self.runner.stop_recording_nextn(self)
        self.head.release()
