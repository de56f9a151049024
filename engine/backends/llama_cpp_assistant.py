"""Gemma 4 assistants on llama.cpp (`gemma4-assistant` GGUFs, converted from `google/gemma-4-…-it-assistant`):
the assistant's weights, loaded as a draft, and its context, which drafts from the target's own states as
llama.cpp's `common/speculative.cpp` (draft-mtp, shared memory) runs it.

An assistant has no KV cache of its own. Its context is an MTP context (`LLAMA_CONTEXT_TYPE_MTP`) linked to
the target's (`ctx_other`): its layers attend over the target's cache (its sliding layers over the target's
last sliding layer's keys and values, its full layers over the target's last full layer's), its cells are the
target's, and its passes write nothing there (llama.cpp's KV cache with `other` set: no cells taken, no cut).
So nothing is caught up or rolled back on its side: a draft after `context_ids` (the target holds all but the
last id) runs k passes, each at the position of that last id, each reading the embedding of a token beside a
hidden state: the last id with the target's last hidden state (post final norm, llama.cpp's nextn embedding of
the last cached position) first, then its own guess with its own output state.

A default llama.cpp context can't be made for an assistant (llama.cpp refuses one without `ctx_other`), so it
is not a GgufModel and gets no runner: `load` gives a LoadedModel whose `native` is the weights
(`AssistantWeights`) and whose runner factory refuses with what to do instead.

Touches the assistant's llama.cpp model, the context it links to the target runner's, and that runner's
hidden states (`LlamaCppRunner.record_nextn`). No torch here except the logits handed back, no Qt.
"""

from __future__ import annotations

import ctypes
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np
import torch

from engine.backends import LoadedModel, backend_named
from engine.backends.gguf_file import ASSISTANT_ARCHITECTURE, ASSISTANT_TARGETS, read_header
from engine.backends.llama_cpp_library import (BACKEND, HeldWeights, clear_errors, last_error, library, memory_check_on,
                                               mtp_bindings)
from engine.backends.llama_cpp_placement import accelerators, check_gpu_layers, check_threads, placement
from engine.backends.llama_cpp_runner import LlamaCppRunner
from engine.backends.llama_cpp_tokenizer import LlamaCppTokenizer
from engine.core.errors import ConfigError, ModelLoadError, OutOfMemoryError, SpecScopeError
from engine.host import free_memory

if TYPE_CHECKING:
    from engine.backends.source import ModelSource

TARGET_ARCHITECTURES = ASSISTANT_TARGETS  # the targets whose cache llama.cpp lets an assistant read
_N_BATCH = 8  # an assistant pass is one token


def is_assistant_file(path: str | Path) -> bool:
    """Whether the GGUF at `path` is a Gemma 4 assistant (from its header alone)."""
    return read_header(Path(path)).architecture == ASSISTANT_ARCHITECTURE


class AssistantWeights(HeldWeights):
    """A Gemma 4 assistant GGUF loaded by llama.cpp: its weights, tokenizer and facts. It has no context of its
    own: one is made for a target runner (AssistantContext)."""

    def __init__(self, path: Path, *, n_threads: int | None = None, n_gpu_layers: int = 0,
                 label: str | None = None) -> None:
        self.lib = lib = library()
        self.path = Path(path)
        self.label = label or self.path.stem
        self.header = header = read_header(self.path)
        if header.architecture != ASSISTANT_ARCHITECTURE:
            raise ModelLoadError(f"{self.path.name} is a {header.architecture!r} model, not a Gemma 4 assistant "
                                 f"({ASSISTANT_ARCHITECTURE})")
        self.n_threads = check_threads(n_threads)
        self.n_gpu_layers = n_gpu_layers
        if memory_check_on() and not n_gpu_layers:
            free = free_memory("cpu")
            if free is not None and header.file_size > free:
                raise OutOfMemoryError(f"{self.path.name} needs {header.file_size / 2**30:.1f} GB of memory, but "
                                       f"only {free / 2**30:.1f} GB is free")
        params = lib.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers
        clear_errors()
        self.handle = lib.llama_model_load_from_file(str(self.path).encode(), params)
        if not self.handle:
            raise ModelLoadError(f"{self.path.name} could not be loaded by llama.cpp "
                                 f"({last_error('no reason given')})")
        handle = self.handle
        self.n_embd = int(lib.llama_model_n_embd(handle))  # its own width
        self.backbone = int(lib.llama_model_n_embd_out(handle))  # the target's width it reads and writes
        self.n_layers = int(lib.llama_model_n_layer_nextn(handle))
        self.vocab_size = int(lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(handle)))
        self.n_parameters = int(lib.llama_model_n_params(handle))
        self.dtype_label = lib.llama_ftype_name(lib.llama_model_ftype(handle)).decode().removeprefix("all ")
        self.context_length = int(lib.llama_model_n_ctx_train(handle))
        self.tokenizer = LlamaCppTokenizer(lib, handle, header.metadata, owner=self)

    def new_runner(self):
        raise ConfigError(f"{self.label} is a Gemma 4 assistant: it has no KV cache of its own and runs only "
                          "beside its Gemma 4 target; load the target and draft with it (--method assistant "
                          f"--draft {self.path.name})")

    def mismatch(self, target) -> str | None:
        """Why this assistant can't read `target`'s cache (a GgufModel's; None: it can). The width first: it says
        which size the assistant was made for."""
        if self.backbone != target.n_embd:
            return (f"{self.label} was made for a Gemma 4 target of hidden size {self.backbone}; {target.label} "
                    f"has {target.n_embd}: use the assistant of this model size")
        for key, what in (("attention.key_length", "full-attention head size"),
                          ("attention.key_length_swa", "sliding-window head size"),
                          ("attention.sliding_window", "sliding window"),
                          ("attention.head_count_kv", "key/value head count")):
            mine, theirs = self.header.get(key), target.header.get(key)
            if isinstance(mine, int) and isinstance(theirs, int) and mine != theirs:
                return (f"{self.label} does not fit {target.label}: its {what} is {mine}, the target's {theirs} "
                        "(use the assistant of this model)")
        return None

    def release(self) -> None:
        """Free the weights."""
        self.release_weights()


def load(name: str, source: "ModelSource", *, device="auto", progress=None, n_threads: int | None = None,
         n_gpu_layers: int | None = None, **ignored) -> LoadedModel:
    """A Gemma 4 assistant GGUF as a LoadedModel (engine.backends.llama_cpp_entry.load sends these here): `native` is
    its AssistantWeights, and it makes no runner of its own (method assistant drafts with it). `device` as asked
    (engine.backends.llama_cpp_placement.placement)."""
    started = time.perf_counter()
    found = accelerators()
    layers, _main_gpu = placement(device, found)
    n_gpu_layers = layers if n_gpu_layers is None else n_gpu_layers
    if progress is not None:
        progress(f"Loading the assistant {source.label} on llama.cpp…")
    weights = AssistantWeights(source.file, n_threads=n_threads, n_gpu_layers=check_gpu_layers(n_gpu_layers, found),
                               label=source.label)
    where = found[0] if weights.n_gpu_layers and found else "CPU"
    return LoadedModel(
        name=name, label=source.label, source=source, backend=BACKEND, tokenizer=weights.tokenizer,
        device=torch.device("cpu"), dtype=None, dtype_label=weights.dtype_label,
        load_seconds=time.perf_counter() - started, converted_now=False, n_layers=weights.n_layers,
        context_length=weights.context_length, vocab_size=weights.vocab_size, n_parameters=weights.n_parameters,
        eos_ids=weights.tokenizer.eog_ids, runner_factory=weights.new_runner, model=None, native=weights,
        device_label=backend_named(BACKEND).device_label(where))


class AssistantContext:
    """The assistant's llama.cpp context, linked to the target runner's (its KV cache is the target's), and the
    drafting loop over it (`target`: the target's GgufModel). Keeps the hidden states of the target's last pass
    (engine.backends.llama_cpp_runner's NextnListener): the first draft step reads the one of the last cached
    position."""

    def __init__(self, weights: AssistantWeights, target, target_runner: LlamaCppRunner) -> None:
        self.weights, self.target, self.runner = weights, target, target_runner
        self.lib, self.ext = weights.lib, mtp_bindings()
        self.width = weights.backbone
        self._ctx = None
        self._rows = np.empty((0, self.width), np.float32)  # the target's last pass: positions start…
        self._rows_start = 0
        self.decode_seconds = 0.0
        self.refeeds = 0  # drafts whose hidden state was not in the target's last pass (its last id fed again)
        self.refills = 0  # the target's cache fed again after this context was made on a filled one
        target_runner.record_nextn(self)  # an empty target cache, so that making the context below costs nothing
        self._open()

    # ---- the target's side (NextnListener)

    def on_rows(self, start: int, ids: np.ndarray, rows: np.ndarray) -> None:
        self._rows_start, self._rows = start, rows.copy()

    def on_close(self) -> None:
        self._free()  # it reads the target's cache: it goes first
        self._rows = self._rows[:0]

    # ---- the assistant's context

    def _open(self) -> None:
        """Make the context. llama.cpp resets the cells it shares with the target when it makes it
        (llama_kv_cells::resize on the target's own cells): a target cache holding tokens is then empty, though
        its runner still lists them, so they are fed again."""
        lib = self.lib
        held = list(self.runner.ids)
        params = lib.llama_context_default_params()
        params.n_ctx = self.runner.context_length  # llama.cpp sizes it as the target's cache anyway
        params.n_batch = params.n_ubatch = _N_BATCH
        params.n_seq_max = 1
        params.n_threads = params.n_threads_batch = self.weights.n_threads
        params.no_perf = True
        params.ctx_type = lib.LLAMA_CONTEXT_TYPE_MTP
        params.ctx_other = self.runner.context
        clear_errors()
        ctx = lib.llama_init_from_model(self.weights.handle, params)
        if not ctx:
            raise OutOfMemoryError(f"llama.cpp could not make the assistant's context for {self.target.label} "
                                   f"({last_error('out of memory')})")
        self._ctx = ctx
        self.ext.llama_set_embeddings_nextn(ctx, True, True)  # its output state, for the next step's input
        self._batch = batch = lib.llama_batch_init(_N_BATCH, self.width, 1)
        self._tokens = (lib.llama_token * _N_BATCH)()  # a pass carries a token and a state
        batch.token = self._tokens
        self._state = np.ctypeslib.as_array(batch.embd, shape=(_N_BATCH, self.width))
        batch.n_seq_id[0], batch.seq_id[0][0], batch.logits[0], batch.n_tokens = 1, 0, 1, 1
        if held:
            self.refills += 1
            self.runner.reset()
            self.runner.forward(held, 1)

    def _free(self) -> None:
        ctx, self._ctx = self._ctx, None
        if ctx:
            self._batch.token = ctypes.POINTER(self.lib.llama_token)()  # ours, not llama_batch_free's to free
            self.lib.llama_batch_free(self._batch)
            self.lib.llama_free(ctx)

    def _decode(self, token: int, position: int, state: np.ndarray) -> None:
        self._tokens[0] = token
        self._batch.pos[0] = position
        self._state[0] = state
        started = time.perf_counter()
        clear_errors()
        status = self.lib.llama_decode(self._ctx, self._batch)
        self.decode_seconds += time.perf_counter() - started
        if status != 0:
            raise SpecScopeError(f"llama.cpp failed to run the assistant (status {status}: "
                                 f"{last_error('no reason given')})")

    def _last_state(self, context_ids: list[int]) -> np.ndarray:
        """The target's hidden state at its last cached position; where its last pass did not compute it (a
        cache cut back behind that pass), that position is fed again (the same keys and values)."""
        position = len(context_ids) - 2
        if not self._rows_start <= position < self._rows_start + len(self._rows):
            self.refeeds += 1
            self.runner.rollback(position)
            self.runner.forward([context_ids[position]], 1)
        return self._rows[position - self._rows_start]

    def prefill(self, context_ids: list[int]) -> None:
        pass  # it reads the target's own cache: nothing of its own to take in

    def draft(self, context_ids: list[int], k: int, pick: Callable[[torch.Tensor], int]
              ) -> tuple[list[int], list[torch.Tensor]]:
        """Up to k tokens after `context_ids` (the target holds all but the last), each chosen by `pick` from the
        assistant's float32 logits (which it may keep: they are copies)."""
        n_cached = len(context_ids) - 1
        if n_cached < 1 or self.runner.ids != context_ids[:n_cached]:
            raise RuntimeError("the target runner is not synced to the context the assistant drafts after")
        if self._ctx is None:  # the target's context was made again since
            self._open()
        state = self._last_state(context_ids)
        vocab = self.weights.vocab_size
        token, ids, rows = context_ids[-1], [], []
        for step in range(k):
            if step:
                out = self.ext.llama_get_embeddings_nextn_ith(self._ctx, 0)
                if not out:
                    raise SpecScopeError("llama.cpp gave no output state for the assistant")
                state = np.ctypeslib.as_array(out, shape=(self.width,))
            self._decode(token, n_cached, state)  # always at the last id's position: its cache is the target's
            logits = torch.from_numpy(np.ctypeslib.as_array(self.lib.llama_get_logits_ith(self._ctx, -1),
                                                            shape=(vocab,)).copy())
            token = pick(logits)
            ids.append(token)
            rows.append(logits)
        return ids, rows

    def release(self) -> None:
        """Free the context and stop reading the target's states (the weights stay: the draft model's)."""
        self._free()
        self.runner.stop_recording_nextn(self)
