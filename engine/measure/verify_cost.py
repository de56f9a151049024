"""What verifying n tokens in one target pass costs against one, on this machine: the curve cost(n), n = 1…N,
measured once per model file, backend, device and thread count (a few interleaved repeats, the median of
each), cached beside the model's other derived facts, and the theoretical speed-up that uses it instead of
assuming verification is free (on a CPU verifying 4 tokens can cost 3× one; on a GPU nearly 1×):

    theoretical speed-up = E[tokens per pass] × cost(1) / (cost(k+1) + k · draft cost per token)

Touches one runner (passes after a short context of its own, rolled back, then released) and the cache
folder (engine.models.sources.cache_root()/verify-cost). No Qt.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from pathlib import Path

from engine.models.sources import cache_root, file_stamp
from engine.core.stats import VerifyCost, expected_tokens_per_pass, speedup_on_curve  # noqa: F401 (re-exported)

CACHE_VERSION = 1
CONTEXT_TOKENS = 64  # the passes are timed after this much context, as a verification would be
REPEATS = 5


def theoretical_speedup(tokens_per_pass: float, k: int, cost: VerifyCost, draft_seconds_per_token: float) -> float:
    """Speed-up over plain decoding predicted from the measured cost curve: tokens_per_pass × cost(1) /
    (cost(k+1) + k × draft seconds per drafted token). k = 0 is plain decoding (1.0 for one token a pass).
    The formula itself is engine.core.stats.speedup_on_curve (theory in one place)."""
    return speedup_on_curve(tokens_per_pass, k, cost, draft_seconds_per_token)


def theoretical_from_stats(stats, cost: VerifyCost) -> float | None:
    """The theoretical speed-up of a generation's (or pooled) engine.core.stats figures on this cost curve: decode
    passes only (the prefill pass drafts nothing), k the mean drafted tokens per pass. None without a pass."""
    if not stats.decode_rounds:
        return None
    drafted_per_pass = stats.drafted_tokens / stats.decode_rounds
    draft_per_token = stats.draft_seconds / stats.drafted_tokens if stats.drafted_tokens else 0.0
    tokens_per_pass = stats.decode_tokens / stats.decode_rounds
    return speedup_on_curve(tokens_per_pass, drafted_per_pass, cost, draft_per_token)


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
    runner.forward(ids[CONTEXT_TOKENS:], n_max)  # warm-up: buffers sized for the largest pass
    runner.rollback(CONTEXT_TOKENS)
    times: list[list[float]] = [[] for _ in range(n_max)]
    for _ in range(repeats):
        for n in range(1, n_max + 1):
            started = time.perf_counter()
            runner.forward(ids[CONTEXT_TOKENS:CONTEXT_TOKENS + n], n)
            times[n - 1].append(time.perf_counter() - started)
            runner.rollback(CONTEXT_TOKENS)
    runner.reset()
    return VerifyCost(tuple(statistics.median(t) for t in times))


def cache_file(model, threads: int) -> Path:
    """Where the curve of `model` (a LoadedModel) on this backend, device, dtype and thread count is kept."""
    stamp = file_stamp(model.source.file)
    name = (f"{model.source.file.stem}-{stamp}-{model.backend}-{model.device.type}-{model.dtype_label}-"
            f"{threads}t.json")
    return cache_root() / "verify-cost" / name


def _read_cache(path: Path, n_max: int) -> VerifyCost | None:
    try:
        data = json.loads(path.read_text())
        if data.get("version") == CACHE_VERSION and len(data["seconds"]) >= n_max:
            return VerifyCost(tuple(float(s) for s in data["seconds"]))
    except (OSError, ValueError, KeyError, TypeError):
        pass  # no cache yet, or an unreadable one
    return None


def cached_verify_cost(model, n_max: int, *, threads: int) -> VerifyCost | None:
    """The curve of `model` from the cache only (one small file read, never a measurement): None where it
    has not been measured up to n_max tokens (`specscope bench` measures and caches it), or where the model
    has no file of its own to key the cache on."""
    try:
        path = cache_file(model, threads)
    except (AttributeError, OSError, TypeError, ValueError):
        return None
    return _read_cache(path, n_max)


def verify_cost(model, n_max: int, *, threads: int, refresh: bool = False) -> VerifyCost:
    """The cost curve of `model` up to n_max tokens: from the cache when it covers n_max, else measured
    on a runner of its own (released afterwards) and cached."""
    path = cache_file(model, threads)
    cached = None if refresh else _read_cache(path, n_max)
    if cached is not None:
        return cached
    runner = model.new_runner()
    try:
        cost = measure(runner, model.vocab_size, n_max)
    finally:
        runner.release()
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_suffix(".tmp")
    staging.write_text(json.dumps({"version": CACHE_VERSION, "model": model.label, "threads": threads,
                                   "seconds": list(cost.seconds)}))
    staging.replace(path)
    return cost
