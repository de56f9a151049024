"""The yardsticks of `specscope bench --compare-llama`, on the same GGUF, fed the same prompt ids with the same
threads, context and GPU layers as our llama.cpp backend, timed the way engine/core/stats.py times ours (time
to first token apart; tok/s over the tokens after the first):

- llama-cpp-python's own high-level `Llama`: plain greedy generation, and its prompt lookup
  (`LlamaPromptLookupDecoding`), with flash attention (llama.cpp's "auto", which our runner keeps, turns it on
  wherever it can; `Llama` only offers on/off, off by default);
- `BareLoop`: the least Python a greedy loop on llama-cpp-python's low-level API can have (one llama_decode per
  token, a numpy argmax over the last row of logits), with our runner's context settings: what our loop's
  Python costs on top of llama.cpp is ours ÷ its.

Touches llama.cpp through llama-cpp-python (its `Llama` class, or a model and context of the bare loop's own;
the backend's logger stays in place); nothing of the engine's runners.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.backends.llama_cpp import N_BATCH, library

LABEL = "llama-cpp-python"
BARE_LABEL = "bare llama.cpp loop"


@dataclass(frozen=True, slots=True)
class ReferenceRun:
    """One generation by llama-cpp-python's `Llama`."""

    output_ids: tuple[int, ...]
    ttft_seconds: float
    elapsed_seconds: float

    @property
    def tok_per_s(self) -> float:
        """As engine.core.stats: committed tokens after the first over the time after the first."""
        decode_seconds = self.elapsed_seconds - self.ttft_seconds
        return (len(self.output_ids) - 1) / decode_seconds if len(self.output_ids) > 1 and decode_seconds > 0 else 0.0


class LlamaCppPython:
    """A `Llama` on `path`; with `k`, it drafts by prompt lookup (num_pred_tokens=k, max_ngram_size=ngram_max)."""

    def __init__(self, path: str | Path, *, n_threads: int, n_ctx: int, n_gpu_layers: int = 0,
                 k: int | None = None, ngram_max: int = 3, main_gpu: int | None = None) -> None:
        lib = library()  # our logger and backend initialisation first
        from llama_cpp import Llama
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
        draft = LlamaPromptLookupDecoding(max_ngram_size=ngram_max, num_pred_tokens=k) if k else None
        self.label = LABEL if not k else f"{LABEL} prompt lookup k={k}"
        self.version = lib.__version__
        one_gpu = {} if main_gpu is None else {"main_gpu": main_gpu, "split_mode": lib.LLAMA_SPLIT_MODE_NONE}
        self.llm = Llama(model_path=str(path), n_ctx=n_ctx, n_batch=N_BATCH, n_ubatch=N_BATCH, **one_gpu,
                         n_threads=n_threads, n_threads_batch=n_threads, n_gpu_layers=n_gpu_layers,
                         flash_attn=True, draft_model=draft, verbose=False,
                         # with a draft it keeps every position's logits, but sizes that buffer by this flag:
                         # without it a prompt longer than n_batch overflows it (llama-cpp-python 0.3.36)
                         logits_all=bool(k))

    def generate(self, prompt_ids: list[int], max_new_tokens: int, eos_ids: frozenset[int]) -> ReferenceRun:
        """Greedy (temperature 0, no penalties) from a fresh cache, stopping at an end id or the budget."""
        output: list[int] = []
        started = time.perf_counter()
        ttft = 0.0
        tokens = self.llm.generate(list(prompt_ids), temp=0.0, top_k=1, top_p=1.0, min_p=0.0,
                                   repeat_penalty=1.0, reset=True)
        for token in tokens:
            if not output:
                ttft = time.perf_counter() - started
            output.append(int(token))
            if token in eos_ids or len(output) >= max_new_tokens:
                break
        tokens.close()
        elapsed = time.perf_counter() - started
        self.llm.reset()
        return ReferenceRun(tuple(output), ttft, elapsed)

    def close(self) -> None:
        self.llm.close()


class BareLoop:
    """Greedy decoding in a bare low-level loop: a model and context of its own on `path` (the context made as
    engine.backends.llama_cpp makes ours: default parameters, batches of N_BATCH, no perf counters)."""

    label = BARE_LABEL

    def __init__(self, path: str | Path, *, n_threads: int, n_ctx: int, n_gpu_layers: int = 0,
                 main_gpu: int | None = None) -> None:
        self.lib = lib = library()
        params = lib.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers
        if main_gpu is not None:  # the GPU our model is on, alone
            params.main_gpu, params.split_mode = main_gpu, lib.LLAMA_SPLIT_MODE_NONE
        self.model = lib.llama_model_load_from_file(str(path).encode(), params)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {path}")
        context = lib.llama_context_default_params()
        self.n_batch = min(N_BATCH, n_ctx)
        context.n_ctx, context.n_batch, context.n_ubatch = n_ctx, self.n_batch, self.n_batch
        context.n_seq_max, context.n_threads, context.n_threads_batch, context.no_perf = 1, n_threads, n_threads, True
        self.ctx = lib.llama_init_from_model(self.model, context)
        if not self.ctx:
            lib.llama_model_free(self.model)
            raise RuntimeError(f"llama.cpp could not make a context of {n_ctx} tokens")
        self.n_vocab = int(lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(self.model)))
        self.batch = lib.llama_batch_init(self.n_batch, 0, 1)

    def _decode(self, ids: list[int], position: int, logits: bool) -> None:
        batch, n = self.batch, len(ids)
        for i, token in enumerate(ids):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.seq_id[i][0], batch.logits[i] = \
                token, position + i, 1, 0, logits and i == n - 1
        batch.n_tokens = n
        if self.lib.llama_decode(self.ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")

    def generate(self, prompt_ids: list[int], max_new_tokens: int, eos_ids: frozenset[int]) -> ReferenceRun:
        """Greedy from an empty cache, stopping at an end id or the budget."""
        lib = self.lib
        lib.llama_memory_clear(lib.llama_get_memory(self.ctx), True)
        output: list[int] = []
        started = time.perf_counter()
        ttft = 0.0
        head = len(prompt_ids) - 1  # as our runner feeds it: the ids before the last without logits, then the last
        for begin in range(0, head, self.n_batch):
            self._decode(prompt_ids[begin:min(begin + self.n_batch, head)], begin, False)
        self._decode(prompt_ids[head:], head, True)
        position = len(prompt_ids)
        while True:
            row = np.ctypeslib.as_array(lib.llama_get_logits_ith(self.ctx, -1), shape=(self.n_vocab,))
            token = int(row.argmax())
            if not output:
                ttft = time.perf_counter() - started
            output.append(token)
            if token in eos_ids or len(output) >= max_new_tokens:
                break
            self._decode([token], position, True)
            position += 1
        return ReferenceRun(tuple(output), ttft, time.perf_counter() - started)

    def close(self) -> None:
        if self.ctx:
            self.lib.llama_batch_free(self.batch)
            self.lib.llama_free(self.ctx)
            self.lib.llama_model_free(self.model)
            self.ctx = self.model = None
