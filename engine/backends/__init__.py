"""Inference backends, one file each, each giving a `Runner`: one loaded model's KV cache and the ids in it.

The round loop (engine/core/engine.py) and the drafters see only this Protocol, so a method written once
runs on every backend that supports it (engine/core/config.py's method table says which). A backend module
provides `load(name, source, *, device, dtype, progress, trust_remote_code) -> LoadedModel` and is
imported lazily by engine/models/load.py, so the engine works where a backend's library isn't installed.

    transformers.py   torch + transformers: HF folders, hub ids, GGUF dequantized; early exit
    llama_cpp.py      llama-cpp-python: GGUF natively quantized (issue 10)

This module holds the Protocol, `LoadedModel` (what every backend's `load` returns) and the prefix
arithmetic every runner's `sync` shares; it imports nothing heavy (torch only for type names).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Protocol

if TYPE_CHECKING:
    import torch

    from engine.models.sources import ModelSource

__all__ = ["Runner", "LoadedModel", "common_prefix_length", "sync_by_prefix"]


class Runner(Protocol):
    """One loaded model's KV cache and the token ids it holds. Not thread-safe: one generation at a time."""

    ids: list[int]  # the ids the cache holds
    device: "torch.device"  # where the logits are computed

    def forward(self, new_ids: list[int], n_logits: int) -> "torch.Tensor":
        """Feed `new_ids` after the cached ones; float32 logits (n_logits, vocab) of the LAST n_logits
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


@dataclass(eq=False)
class LoadedModel:
    """A loaded target or draft, whatever its backend: its facts, its tokenizer, and runners on demand.
    Re-exported by engine.models.load (its home for callers). Only transformers-only methods (early exit) may
    touch `model`, the torch module, which is None on other backends."""

    name: str  # what the user asked for ("default", a path, a hub id)
    label: str  # what the user reads
    source: "ModelSource"
    backend: str  # "transformers" | "llama.cpp"
    tokenizer: object  # the subset of the HF tokenizer API named in engine/core/compat.py and chat.py
    device: "torch.device"
    dtype: "torch.dtype | None"  # the compute dtype on transformers; None where weights stay quantized
    dtype_label: str  # "float32", "bfloat16", "Q4_1", …
    load_seconds: float
    converted_now: bool  # a GGUF was converted during this load (slow, once)
    n_layers: int
    context_length: int
    vocab_size: int  # rows of the logits
    n_parameters: int
    eos_ids: frozenset[int]
    runner_factory: Callable[[], Runner] = field(repr=False)
    model: object = field(default=None, repr=False)
    supports_rollback: bool = True  # False for a recurrent state (llama.cpp's Mamba/RWKV): plain decoding only
    device_label: str = ""  # what runs the layers when `device` (where the logits are) does not say it

    def new_runner(self) -> Runner:
        """A fresh runner (an empty KV cache) on this model's weights."""
        return self.runner_factory()


def common_prefix_length(a: list[int], b: list[int]) -> int:
    """How many leading ids `a` and `b` share (a bisection on slices: fast for long equal prefixes)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] holds, a[:hi] == b[:hi] does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def sync_by_prefix(runner: Runner, context_ids: list[int]) -> list[int]:
    """`Runner.sync` from `ids` and `rollback`: keep the common prefix but never the last id of the context
    (its logits are what the next forward pass must produce), return what is still to feed."""
    keep = min(common_prefix_length(runner.ids, context_ids), len(context_ids) - 1)
    runner.rollback(keep)
    return context_ids[len(runner.ids):]
