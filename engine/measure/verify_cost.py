"""What verifying n tokens in one target pass costs against one, on this machine: the curve cost(n), n = 1…N,
measured once per model file, backend, device and thread count (a few interleaved repeats, the median of
each), cached beside the model's other derived facts, and the theoretical speed-up that uses it instead of
assuming verification is free (on a CPU verifying a few tokens can cost several times one; on a GPU close to
one; README has the figures measured on our machines):

    theoretical speed-up = E[tokens per pass] × cost(1) / (cost(k+1) + k · draft cost per token)

A token tree's pass has a curve of its own (tree_verify_cost): seconds[n − 1] for one pass over the fed id and a
bushy tree of n − 1 nodes (Runner.forward_tree, then keep_path of its deepest path, as a tree round pays), where
the runner verifies trees, and seconds[0] plain decoding's one-token pass; its relative(N + 1) is "verifying N
nodes costs so many times one token".

Touches one runner (passes after a short context of its own, rolled back, then released) and the curves'
cache (engine.models.cost_cache). No Qt.
"""

from __future__ import annotations

import random
import statistics
import time

from engine.core.errors import ConfigError
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
    return _cached_or_measured(model, n_max, threads, refresh, tree=False)


def tree_verify_cost(model, n_max: int, *, threads: int, refresh: bool = False) -> VerifyCost:
    """The cost of tree passes over 0…n_max − 1 nodes of `model` (seconds[n − 1]: n − 1 nodes), from the cache
    or measured and cached; ConfigError with its runner's reason where it verifies chains only."""
    return _cached_or_measured(model, n_max, threads, refresh, tree=True)


def _cached_or_measured(model, n_max: int, threads: int, refresh: bool, tree: bool) -> VerifyCost:
    path = cache_file(model, threads, tree)
    cached = None if refresh else read_curve(path, n_max)
    if cached is not None:
        return cached
    runner = model.new_runner()
    try:
        refusal = runner.tree_refusal() if tree else None
        if refusal is not None:
            raise ConfigError(f"{model.label} can't verify a token tree in one pass: {refusal}")
        runner.reserve_rollback(n_max + 1)  # a recurrent state: as the verifying target keeps it
        cost = (measure_tree if tree else measure)(runner, model.vocab_size, n_max)
    finally:
        runner.release()
    store_curve(path, model, threads, cost)
    return cost


TREE_BRANCHING = 2  # the measured trees' children per node: wide, as a drafter's best-first tree is near its root


def bushy_parents(n_nodes: int, branching: int = TREE_BRANCHING) -> tuple[int, ...]:
    """The parents of a tree of n_nodes whose every node has `branching` children, filled level by level (any
    prefix of it is such a tree too)."""
    return tuple(-1 if i < branching else (i - branching) // branching for i in range(n_nodes))


def deepest_path(parents) -> list[int]:
    """The path from the root to the last node (in a tree filled level by level, a deepest one)."""
    path: list[int] = []
    node = len(parents) - 1
    while node >= 0:
        path.append(node)
        node = parents[node]
    return path[::-1]


def measure_tree(runner, vocab_size: int, n_max: int, repeats: int = REPEATS) -> VerifyCost:
    """Time tree passes over one fed id and 1…n_max − 1 nodes of a bushy tree (bushy_parents) after
    CONTEXT_TOKENS of context, each keeping its deepest path (keep_path, timed: a tree round pays it) and then
    rolled back, and at n = 1 plain decoding's one-token pass, the sizes interleaved across repeats as measure()
    does."""
    import torch
    with torch.inference_mode():
        return _measure_tree(runner, vocab_size, n_max, repeats)


def _measure_tree(runner, vocab_size: int, n_max: int, repeats: int) -> VerifyCost:
    rng = random.Random(0)
    ids = [rng.randrange(vocab_size) for _ in range(CONTEXT_TOKENS + n_max)]
    feed, nodes, parents = ids[CONTEXT_TOKENS:CONTEXT_TOKENS + 1], ids[CONTEXT_TOKENS + 1:], bushy_parents(n_max - 1)

    def tree_pass(n_nodes: int) -> float:
        started = time.perf_counter()
        if n_nodes:
            runner.forward_tree(feed, nodes[:n_nodes], parents[:n_nodes])
            runner.keep_path(deepest_path(parents[:n_nodes]))
        else:  # plain decoding's pass: what a tree's cost is judged against, timed among them
            runner.forward(feed, 1)
        synchronize(runner.device)
        seconds = time.perf_counter() - started
        runner.rollback(CONTEXT_TOKENS)
        return seconds

    runner.reset()
    runner.forward(ids[:CONTEXT_TOKENS], 1)
    tree_pass(n_max - 1)  # warm-up: buffers and masks sized for the largest pass
    times: list[list[float]] = [[] for _ in range(n_max)]
    for _ in range(repeats):
        for n in range(1, n_max + 1):
            times[n - 1].append(tree_pass(n - 1))
    runner.reset()
    return VerifyCost(tuple(statistics.median(t) for t in times))
