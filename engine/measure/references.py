"""llama-cpp-python's own high-level `Llama` on the same GGUF, as the yardstick of `specscope bench
--compare-llama`: plain greedy generation, and its prompt lookup (`LlamaPromptLookupDecoding`), fed the same
prompt ids with the same threads, context, GPU layers and flash attention (llama.cpp's "auto", which our
runner keeps, turns it on wherever it can; `Llama` only offers on/off, off by default), timed the way
engine/core/stats.py times ours (time to first token apart; tok/s over the tokens after the first).

Touches llama.cpp through llama-cpp-python's `Llama` class only (the backend's logger stays in place);
nothing of the engine's runners.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from engine.backends.llama_cpp import N_BATCH, library

LABEL = "llama-cpp-python"


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
                 k: int | None = None, ngram_max: int = 3) -> None:
        lib = library()  # our logger and backend initialisation first
        from llama_cpp import Llama
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
        draft = LlamaPromptLookupDecoding(max_ngram_size=ngram_max, num_pred_tokens=k) if k else None
        self.label = LABEL if not k else f"{LABEL} prompt lookup k={k}"
        self.version = lib.__version__
        self.llm = Llama(model_path=str(path), n_ctx=n_ctx, n_batch=N_BATCH, n_ubatch=N_BATCH,
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
