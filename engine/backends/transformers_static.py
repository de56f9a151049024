"""The transformers backend's opt-in compiled runner (`--compile`): a static KV cache rolled back by position,
each pass of a fixed width run through one `torch.compile`d forward.

A `StaticRunner` keeps the target's keys and values in transformers' StaticCache: buffers of
`context_length` positions allocated once, written in place at the cache's length (a device tensor per
layer, from which the model takes its positions and its causal mask). Rolling back only sets that length:
the stale entries past it are masked by position and overwritten by the next pass, so a rejected draft costs
no copy and no crop, and the buffers keep the fixed addresses CUDA graphs replay on.

Passes of width 1…`widths` (1 for plain decoding; k+1 once the engine reserves a speculative rollback)
go through the compiled forward, one graph per width, compiled on its first pass (the engine's
`reserve_rollback` warms them up before the first round, each timed on `progress`); wider passes (the
prompt, a long catch-up) and a fresh cache's first pass run eager on the same buffers.

Models whose cache can't be a static one of full-attention layers (sliding windows, linear attention), or
whose code transformers doesn't mark compilable, keep the eager runner, with the reason on `progress`;
a runner asked for hidden states (`record_outputs`: MTP, EAGLE, assistant drafters) serves them eagerly.
Token trees are verified by the eager runner only (`tree_refusal` says so while the cache is static).

Touches torch and transformers only; imported by engine.backends.transformers_entry.load when compile is on.
"""

from __future__ import annotations

import inspect
import time
from typing import Callable

import torch
from transformers import StaticCache
from transformers.cache_utils import StaticLayer

from engine.backends import Note
from engine.backends.device import device_ids
from engine.backends.transformers import TransformersRunner
from engine.core.config import MAX_K
from engine.core.errors import PromptTooLongError

Progress = Callable[[str], None]

# Decision point (issue 22): compile by default on CUDA once the gain is measured on a GPU; off until then.
COMPILE_BY_DEFAULT = False
STATIC_CONTEXT_LIMIT = 8192  # positions a static cache holds (allocated whole), at most the model's context


def compile_mode(device: torch.device) -> str:
    """CUDA: "reduce-overhead" (inductor kernels replayed as CUDA graphs, no launch overhead per kernel). The
    CPU has no graphs to replay, so "reduce-overhead" there is "default" plus a warning: plain inductor."""
    return "reduce-overhead" if device.type == "cuda" else "default"


def static_refusal(model, device: torch.device) -> str:
    """Why `model` can't run compiled on a static cache of full-attention layers, in the user's words; ''
    where it can."""
    if device.type not in ("cpu", "cuda"):
        return f"torch.compile does not serve {device.type} here"
    if "cache" not in inspect.signature(model.forward).parameters:
        return "its forward takes no transformers cache (its own code)"
    if not getattr(model, "_can_compile_fullgraph", False):
        return "transformers does not mark its code as compilable in one graph"
    try:
        cache = StaticCache(config=model.config, max_cache_len=1)  # lazily allocated: costs nothing
    except (ValueError, TypeError, KeyError, AttributeError, NotImplementedError) as exc:
        return f"it has no static cache ({str(exc).strip()[:120] or type(exc).__name__})"
    kinds = sorted({type(layer).__name__ for layer in cache.layers if type(layer) is not StaticLayer})
    if kinds:
        return (f"its cache has {', '.join(kinds)} layers (a sliding window or a recurrent state), which a "
                "rollback by position can't restore")
    return ""


class CompiledForward:
    """A model's forward, compiled once for all its runners (static shapes: one graph per pass width); it
    says on `progress` when a width compiles and how long its first pass took."""

    def __init__(self, model, device: torch.device, progress: Progress) -> None:
        import torch._dynamo.config as dynamo_config
        # one graph per width 1…MAX_K + 1: more than dynamo's default recompile limit (8)
        dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, MAX_K + 2)
        self.mode = compile_mode(device)
        self.cuda_graphs = self.mode == "reduce-overhead"
        self.progress = progress
        self.seconds: dict[int, float] = {}  # first-pass (compile) time of each width compiled so far
        self.failed = ""  # why compiling failed, once it has: every pass runs eager after that
        self._call = torch.compile(model.forward, mode=self.mode, dynamic=False, fullgraph=True)

    def __call__(self, input_ids: torch.Tensor, cache) -> torch.Tensor | None:
        """The logits (width, vocab) of a pass through the compiled graph of its width; None where compiling
        failed (the caller runs it eager)."""
        if self.failed:
            return None
        width = input_ids.shape[1]
        if width in self.seconds:
            return self._run(input_ids, cache)
        self.progress(f"Compiling verify width {width} (its first pass)…")
        started = time.perf_counter()
        try:
            logits = self._run(input_ids, cache)
        except Exception as exc:  # dynamo/inductor errors are many classes: any means "run this eager"
            self.failed = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
            self.progress(f"--compile: compiling failed ({self.failed}); running eager")
            return None
        self.seconds[width] = time.perf_counter() - started
        self.progress(f"Compiled verify width {width} in {self.seconds[width]:.1f} s")
        return logits

    def _run(self, input_ids: torch.Tensor, cache) -> torch.Tensor:
        if self.cuda_graphs:
            torch.compiler.cudagraph_mark_step_begin()  # the previous replay's outputs may be overwritten now
        logits = self._call(input_ids=input_ids, cache=cache, use_cache=True).logits[0]
        return logits.clone() if self.cuda_graphs else logits  # a graph's output buffer is reused by its next replay


class StaticRunner(TransformersRunner):
    """A causal LM on a static KV cache rolled back by position, its narrow passes compiled
    (engine.backends.Runner). Once asked for hidden states (`record_outputs`) it is the eager runner it
    derives from, for good: `eager_reason` says why."""

    def __init__(self, model, compiled: CompiledForward | None, context_length: int, progress: Progress) -> None:
        super().__init__(model)
        self.compiled = compiled
        self.context_length = context_length
        self.progress = progress
        self.static_cache: StaticCache | None = None
        self.widths = 1  # passes up to this wide run compiled (reserve_rollback widens it)
        self._warm_up_to = 0  # widths 1… of it compile before the next pass (reserve_rollback asked)
        self.eager_reason = ""

    # ---- the eager runner takes over where hidden states are asked for

    def record_outputs(self, *, shared_kv: bool = False) -> None:
        if not self.eager_reason:
            self.eager_reason = "a drafter reads the target's hidden states (record_outputs)"
            self.progress(f"--compile: the target runs eager from now on ({self.eager_reason})")
            self.static_cache, self.ids = None, []
        super().record_outputs(shared_kv=shared_kv)

    def tree_refusal(self) -> str | None:
        if self.eager_reason:
            return super().tree_refusal()
        return ("--compile's static cache verifies chains only (its fixed pass shapes for a tree budget are not "
                "built yet)")

    # ---- the Runner

    def _feed(self, input_ids: torch.Tensor, n_logits: int) -> torch.Tensor:
        """A pass over `input_ids` (1, n) after the cached positions (forward, forward_unread); float32 logits of
        the last `n_logits` positions (on the device)."""
        if self.eager_reason:
            return super()._feed(input_ids, n_logits)
        n, length = input_ids.shape[1], len(self.ids) + self._unread
        if length + n > self.context_length:
            raise PromptTooLongError(f"{length + n} tokens do not fit in the {self.context_length:,}-token "
                                     "static cache of --compile; shorten the conversation")
        with torch.inference_mode():
            if self.static_cache is None:
                self.static_cache = StaticCache(config=self.config, max_cache_len=self.context_length)
            if self._warm_up_to and not self._unread:
                self._warm_up()
            try:
                logits = None
                if self.compiled is not None and n <= self.widths and self._allocated():
                    logits = self.compiled(input_ids, self.static_cache)
                if logits is None:
                    self._set_length(length)  # a failed compile may have run part of the pass
                    logits = self._eager(input_ids, n_logits, length)
            except BaseException:
                self._set_length(length)  # some layers may have moved on: back to what `ids` says
                raise
        return logits[-n_logits:].float()

    def rollback(self, length: int) -> None:
        """Keep the first `length` cached positions: only the cache's length moves."""
        if self.eager_reason:
            return super().rollback(length)
        self._check_read()
        if length < len(self.ids):
            del self.ids[length:]
            self._set_length(length)

    def reset(self) -> None:
        if self.eager_reason:
            return super().reset()
        self.ids, self._unread = [], 0
        self._set_length(0)

    def release(self) -> None:
        if self.eager_reason:
            return super().release()
        self.static_cache, self.ids, self._unread = None, [], 0

    def reserve_rollback(self, depth: int) -> None:
        """Before a speculative generation (engine.core.engine): verify passes are up to `depth` wide, so
        widths 1…`depth` run compiled; those not compiled yet compile before the next pass (not now: the
        drafter, built next, may ask for hidden states and so for the eager runner), each timed on `progress`."""
        if self.eager_reason:
            return
        self.widths = max(self.widths, depth)
        if self.compiled is not None and any(w not in self.compiled.seconds for w in range(1, depth + 1)):
            self._warm_up_to = depth

    # ---- the static cache

    def _warm_up(self) -> None:
        """A compiled pass of each width 1…`_warm_up_to` at the cache's end, then the length set back: what
        they write lies past the length, masked and overwritten later."""
        depth, self._warm_up_to = self._warm_up_to, 0
        self.progress(f"Compiling verify widths 1…{depth} (first pass of each)…")
        length = len(self.ids)
        if length >= self.context_length:
            return
        with torch.inference_mode():
            if not self._allocated():
                self.forward([0], 1)  # the buffers are allocated by an eager pass, at fixed addresses
                self.rollback(length)
            for width in range(1, min(depth, self.context_length - length) + 1):
                if self.compiled(device_ids([0] * width, self.device), self.static_cache) is None:
                    break
                self._set_length(length)

    def _allocated(self) -> bool:
        return self.static_cache is not None and self.static_cache.layers[0].is_initialized

    def _set_length(self, length: int) -> None:
        """Where the next pass writes (and the positions and mask it reads): a device write, no host sync."""
        if self.static_cache is None:
            return
        with torch.inference_mode():
            for layer in self.static_cache.layers:
                layer.cumulative_length.fill_(length)

    def _eager(self, input_ids: torch.Tensor, n_logits: int, length: int) -> torch.Tensor:
        """An uncompiled pass of n positions after `length` cached ones on the static cache."""
        kwargs = {"logits_to_keep": n_logits} if self._takes_logits_to_keep else {}
        if length and input_ids.shape[1] > 1 and self.config._attn_implementation == "sdpa":
            kwargs["attention_mask"] = self._causal_mask(length, input_ids.shape[1])
        return self.model(input_ids=input_ids, cache=self.static_cache, use_cache=True, **kwargs).logits[0]

    def _causal_mask(self, length: int, n: int) -> torch.Tensor:
        """The causal mask (1, 1, n, cache length) sdpa gets for n positions after `length` cached ones: position
        length + i sees the cache's positions ≤ length + i. Made from the host's length, it is the very mask
        transformers makes from the cache's length tensor after comparing that tensor on the host (a sync)."""
        keys = torch.arange(self.context_length, device=self.device)
        queries = torch.arange(length, length + n, device=self.device)
        return (keys[None, :] <= queries[:, None])[None, None]


def static_runner_factory(model, device: torch.device, context_length: int, label: str,
                          progress: Progress) -> tuple[Callable[[], TransformersRunner], int, str]:
    """What `load(..., compile=True)` gives its LoadedModel: (runner factory, context length, why not) —
    StaticRunners on one compiled forward and the static cache's length, or where the model can't run so
    the eager runner, its own context length and the reason (also said on `progress`)."""
    refusal = static_refusal(model, device)
    if refusal:
        progress(Note(f"--compile: {label} runs eager ({refusal})"))
        return (lambda: TransformersRunner(model)), context_length, refusal
    compiled = CompiledForward(model, device, progress)
    length = min(context_length, STATIC_CONTEXT_LIMIT)
    progress(f"Compiling {label} on {device.type} (torch.compile mode={compiled.mode}, static cache of "
             f"{length:,} positions): each verify width compiles on its first pass…")
    return (lambda: StaticRunner(model, compiled, length, progress)), length, ""
