"""What verifying n tokens in one target pass costs against one, on this machine: the curve cost(n), n = 1…N,
measured once per model file, backend, device and thread count (a few interleaved repeats, the median of
each), cached beside the model's other derived facts, and the theoretical speed-up that uses it instead of
assuming verification is free (on a CPU verifying a few tokens can cost several times one; on a GPU close to
one; README has the figures measured on our machines):

    theoretical speed-up = E[tokens per pass] × cost(1) / (cost(k+1) + k · draft cost per token)

Touches one runner (passes after a short context of its own, rolled back, then released) and the curve's
cache (engine.models.cost_cache). No Qt.
"""

from __future__ import annotations

import random
import statistics
import time

from engine.models.cost_cache import cache_file, read_curve, store_curve
from engine.core.stats import VerifyCost, speedup_on_curve

CONTEXT_TOKENS = 64  # the passes are timed after this much context, as a verification would be
REPEATS = 5


def theoretical_from_stats(stats, cost: VerifyCost) -> float | None:
    """The theoretical speed-up of a generation's (or pooled) engine.core.stats figures on this cost curve: decode
    passes only (the prefill pass drafts nothing), k the mean drafted tokens per pass. None without a pass."""
    if not stats.decode_rounds:
        return None
    drafted_per_pass = stats.drafted_tokens / stats.decode_rounds
    draft_per_token = stats.draft_seconds / stats.drafted_tokens if stats.drafted_tokens else 0.0
    tokens_per_pass = stats.decode_tokens / stats.decode_rounds
    return speedup_on_curve(tokens_per_pass, drafted_per_pass, cost, draft_per_token)


def synchronize(device) -> None:
    """Wait for the work queued on `device` (CUDA, MPS); nothing to wait for on the CPU, or for llama.cpp,
    whose logits are read after its own synchronisation."""
    import torch
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def measure(runner, vocab_size: int, n_max: int, repeats: int = REPEATS) -> VerifyCost:
    """Time passes over 1…n_max tokens after CONTEXT_TOKENS of context, each rolled back, the sizes
    interleaved across repeats so that the machine's load drifts over all of them alike."""
    import torch  # the passes build no autograd graph (transformers runners would)
    with torch.inference_mode():
        return _measure(runner, vocab_size, n_max, repeats)


def _measure(runner, vocab_size: int, n_max: int, repeats: int) -> VerifyCost:
    rng = random.Random(0)
    ids = [rng.randrange(vocab_size) for _ in range(CONTEXT_TOKENS + n_max)]
    runner.reset()
    runner.forward(ids[:CONTEXT_TOKENS], 1)
    runner.checkpoint()  # a recurrent state: each rollback restores this (a KV cache: nothing to do)
    runner.forward(ids[CONTEXT_TOKENS:], n_max)  # warm-up: buffers sized for the largest pass
    runner.rollback(CONTEXT_TOKENS)
    times: list[list[float]] = [[] for _ in range(n_max)]
    for _ in range(repeats):
        for n in range(1, n_max + 1):
            started = time.perf_counter()
            runner.forward(ids[CONTEXT_TOKENS:CONTEXT_TOKENS + n], n)
            synchronize(runner.device)  # a GPU's pass is done when its kernels are, not when they are queued
            times[n - 1].append(time.perf_counter() - started)
            runner.rollback(CONTEXT_TOKENS)
    runner.reset()
    return VerifyCost(tuple(statistics.median(t) for t in times))


def verify_cost(model, n_max: int, *, threads: int, refresh: bool = False) -> VerifyCost:
    """The cost curve of `model` up to n_max tokens: from the cache when it covers n_max, else measured
    on a runner of its own (released afterwards) and cached."""
    path = cache_file(model, threads)
    cached = None if refresh else read_curve(path, n_max)
    if cached is not None:
        return cached
    runner = model.new_runner()
    runner.reserve_rollback(n_max + 1)  # a recurrent state: as the verifying target keeps it
    try:
        cost = measure(runner, model.vocab_size, n_max)
    finally:
        runner.release()
    store_curve(path, model, threads, cost)
    return cost
