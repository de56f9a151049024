"""`specscope bench`: every config against plain decoding on the same prompts, in the same run.

Configs run interleaved, prompt by prompt, so that drift in machine speed hits them all alike; a server's model
(`remote:url=…`, or the run's model itself) after them, as its server was started. Figures are pooled per row,
overall and per category, with the definitions of engine.core.stats (engine.measure.bench_results: our configs'
rows and a server's); plain decoding first and the k sweep come from engine.measure.compare, the prompt files
from engine.measure.prompts, the engine from engine.runtime.
A greedy output that differs from plain decoding is diagnosed (engine.measure.divergence) and counted as a near-tie
or a mismatch beside the identical ones; --strict reruns everything in float32 on the CPU with transformers.
--concurrency measures a server's concurrent streams instead (engine.measure.concurrency).

Touches the terminal (the tables of engine.measure.report on stdout, progress on stderr), the --json file and,
for configs that learn from past replies, a throwaway data folder of the run's own; no Qt.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

from engine.backends import is_local_backend
from engine.core.config import BACKENDS, SamplingConfig, SpecConfig, parse_remote, parse_spec
from engine.core.errors import ConfigError
from engine.core.validation import (MAX_COUNT, check_int, check_max_new_tokens, check_output_path, parse_float,
                                    parse_int, write_text_atomic)
from engine.host import data_root_set_to
from engine.measure.baselines import add_vs_fastest_plain, target_baseline
from engine.measure.bench_llama import check_compare_llama, close_comparisons, cost_curve_line, make_comparisons
from engine.measure.bench_results import ConfigResult, ServerResult, summarise
from engine.measure.bench_server import (add_server_rows, check_compare_server, compare_with_server,
                                         print_server_table)
from engine.measure.compare import parse_sweep, strict_engine, sweep_specs, with_plain_first
from engine.measure.concurrency import add_concurrency_args, check_args, run_concurrency
from engine.measure.divergence import diagnose
from engine.measure.fastest import sweep_methods
from engine.measure.hf_reference import hf_generate
from engine.measure.prompts import Prompt, load_prompts
from engine.measure.report import print_divergences, print_sources, print_sweep, print_table, table_console
from engine.measure.tree_sweep import measure_tree_cost, parse_budgets, print_tree_sweep, sweep_rows, tree_specs
from engine.measure.verify_cost import verify_cost

__all__ = ["add_bench_args", "check_bench_args", "ConfigResult", "ServerResult", "run_benchmark", "summarise",
           "learning_pass", "own_learning_store", "WARM_UP", "run", "auto_method"]

def add_bench_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prompts", default=None,
                        help="JSON lines: Spec-Bench format or {\"prompt\": …} (required; under --concurrency "
                             "assets/presets.json when not given)")
    parser.add_argument("--category", action="append", help="only this category (repeatable)")
    parser.add_argument("--limit", type=parse_int, default=None, help="at most N prompts per category")
    parser.add_argument("--max-new-tokens", type=parse_int, default=128)
    parser.add_argument("--config", action="append", default=[],
                        help="SPEC such as prompt-lookup:k=5, early-exit:k=4,layers=10, "
                             "draft-model:k=4,draft=default (repeatable; none always runs)")
    parser.add_argument("--sweep-k", default=None, metavar="A-B",
                        help="run every config's method for k = A…B (e.g. 1-8) and print the sweep")
    parser.add_argument("--sweep-tree", default=None, metavar="N,…",
                        help="run every config (a method that drafts trees) at these tree budgets, 0 its chain of k "
                             "(e.g. 0,4,8,16), and print per budget the tokens and nodes per pass, what a tree pass "
                             "of N nodes costs against one token, the theory on it and the measured speed-up")
    parser.add_argument("--compare-hf", action="store_true",
                        help="also time transformers' own generate() with the equivalent setting")
    parser.add_argument("--remeasure-cost", action="store_true",
                        help="measure the verify-cost curve again instead of reading it from the cache (after "
                             "the machine's load or settings changed)")
    parser.add_argument("--compare-llama", action="store_true",
                        help="also time llama-cpp-python's own Llama (plain, and prompt lookup through its "
                             "LlamaPromptLookupDecoding) on the same GGUF: ours ÷ theirs")
    parser.add_argument("--compare-llama-server", action="store_true",
                        help="also run llama.cpp's own llama-server (built by install.sh) on the same GGUF and "
                             "prompt ids, for plain decoding and the configs it has an equal of (ngram-mod, "
                             "ngram-map, mtp, draft-model with a GGUF draft of the same vocabulary): its "
                             "acceptance and equal outputs beside ours")
    parser.add_argument("--temperature", type=parse_float, default=0.0)
    parser.add_argument("--seed", type=parse_int, default=0)
    parser.add_argument("--strict", action="store_true",
                        help="rerun every config in float32 on the CPU with the transformers backend, where "
                             "greedy outputs must be identical to plain decoding (the algorithm, not the numerics)")
    parser.add_argument("--learn-pass", action="store_true",
                        help="configs that learn from past replies (suffix:learn=true) first run once over the "
                             "prompts untimed, then the timed run: the repeat-chat case. Without it they learn "
                             "as the run goes. Either way they learn into a store of the run's own, never yours")
    parser.add_argument("--json", dest="json_out", default=None, metavar="OUT", help="write all figures here")
    add_concurrency_args(parser)


def check_bench_args(args) -> None:
    """What bench refuses of its options before it reads a file or loads a model: --prompts missing, and
    --concurrency's own checks (engine.measure.concurrency.check_args)."""
    if args.concurrency is not None or args.serve is not None:
        check_args(args)
    elif args.prompts is None:
        raise ConfigError("the following arguments are required: --prompts (or --concurrency N,… with --model "
                          "http://HOST:PORT, which measures a server's concurrent streams)")


def _run_one(engine, prompt: Prompt, spec: SpecConfig, sampling, max_new_tokens: int,
             rounds: list | None = None):
    """The run's finished event; its round events are appended to `rounds` when given."""
    from engine.core.events import GenerationFinished, RoundVerified
    engine.release()  # every run starts from an empty cache: no config profits from another's prefill
    finished = None
    for event in engine.generate(prompt.text, spec=spec, sampling=sampling, max_new_tokens=max_new_tokens):
        if isinstance(event, GenerationFinished):
            finished = event
        elif rounds is not None and isinstance(event, RoundVerified):
            rounds.append(event)
    return finished


Progress = Callable[[int, int, str], None]  # (done, total, what is running)


@dataclass
class _Pass:
    """One timed pass over the prompts: what every run of it shares, and how far it has come."""

    engine: object  # the run's EngineLike
    sampling: SamplingConfig
    max_new_tokens: int
    compare_hf: bool
    comparisons: dict  # engine.measure.bench_llama's, by config label
    progress: Progress
    total: int
    done: int = 0

    def tick(self, label: str) -> None:
        self.done += 1
        self.progress(self.done, self.total, label)


def run_benchmark(engine, prompts: list[Prompt], specs: list[SpecConfig], max_new_tokens: int,
                  sampling: SamplingConfig, compare_hf: bool = False, progress: Progress | None = None,
                  comparisons: dict | None = None, remotes: tuple = (), learn_pass: bool = False
                  ) -> list[ConfigResult | ServerResult]:
    """Run plain decoding plus every spec on every prompt (engine.measure.compare.with_plain_first: plain first,
    once). Every spec is validated before the first run. `comparisons` (engine.measure.bench_llama, by config label)
    run llama-cpp-python's own loop after ours on the same prompt ids. `remotes` (RemoteEngines) run each
    prompt on their server after the local configs, as their servers were started. With `learn_pass`, the specs
    that learn from finished replies first run once over every prompt, untimed (learning_pass)."""
    comparisons = comparisons or {}
    specs = with_plain_first(specs)
    for spec in specs:
        engine.validate(spec)  # fail before the long run, not in its middle
    if is_local_backend(engine.target.backend):
        local = [ConfigResult(spec, diagnosed=sampling.greedy) for spec in specs]
        servers = [ServerResult(SpecConfig(), server=remote) for remote in remotes]
    else:  # --model is a server: its figures are the server's
        local, servers = [], [ServerResult(spec, server=engine) for spec in specs]
    progress = progress or (lambda done, total, label: None)
    _warm_up(engine, specs, sampling, comparisons, remotes)
    if learn_pass:
        learning_pass(engine, prompts, specs, sampling, max_new_tokens, progress)
    total = len(prompts) * (len(specs) * (2 if compare_hf else 1) + len(comparisons) + len(remotes))
    timed = _Pass(engine, sampling, max_new_tokens, compare_hf, comparisons, progress, total)
    baseline = (local + servers)[0]
    for prompt in prompts:
        ids = engine.prompt_ids(prompt.text) if compare_hf or comparisons else None  # a server's: never ours
        for result in local:
            _run_config(timed, result, prompt, ids, baseline)
        for result in servers:
            finished = _run_one(result.server, prompt, result.spec, sampling, max_new_tokens)
            timed.tick(result.label)
            result.record(prompt, finished, baseline)
    return local + servers


def _run_config(timed: _Pass, result: ConfigResult, prompt: Prompt, ids: list[int] | None,
                baseline: ConfigResult) -> None:
    """One of our configs on one prompt, then the references beside it: transformers' generate() (--compare-hf),
    llama-cpp-python's loop (--compare-llama). A greedy output that differs from plain decoding's is diagnosed
    (engine.measure.divergence); only a differing output costs anything (its diagnosis)."""
    engine = timed.engine
    rounds: list = []
    finished = _run_one(engine, prompt, result.spec, timed.sampling, timed.max_new_tokens, rounds)
    timed.tick(result.label)
    result.record(prompt, finished, baseline)
    plain_ids = baseline.outputs[prompt.id]
    if result.diagnosed and finished.output_ids != plain_ids:
        result.add_divergence(prompt, diagnose(engine.target, engine.prompt_ids(prompt.text), plain_ids,
                                               finished.output_ids, rounds))
    if timed.compare_hf:
        new_ids, seconds = hf_generate(engine, ids, result.spec, timed.max_new_tokens)
        timed.tick(f"transformers {result.label}")
        result.record_hf(prompt, finished, new_ids, seconds)
    comparison = timed.comparisons.get(result.label)
    if comparison is not None:
        comparison.run(prompt, ids, finished.output_ids, timed.max_new_tokens, engine.eos_ids)
        timed.tick(f"llama-cpp-python {result.label}")


WARM_UP = Prompt("warm-up", "warm-up", "Hello!")


def learning_pass(engine, prompts: list[Prompt], specs: list[SpecConfig], sampling, max_new_tokens: int,
                  progress) -> None:
    """Every spec that learns from finished replies runs once over the prompts, untimed: the timed run then
    measures a chat that was had before (the repeat-chat case of suffix decoding)."""
    learning = [spec for spec in specs if spec.learns]
    for done, (spec, prompt) in enumerate(((s, p) for s in learning for p in prompts), 1):
        _run_one(engine, prompt, spec, sampling, max_new_tokens)
        progress(done, len(learning) * len(prompts), f"learning pass {spec.label()}")


@contextmanager
def own_learning_store(specs: list[SpecConfig]) -> Iterator[str | None]:
    """A run whose configs learn from past replies keeps what they learn in a throwaway data folder (its path,
    else None): a benchmark starts from nothing and never reads or writes the user's own store. Within the
    block engine.host.data_root is that folder, for this run alone (engine.host.data_root_set_to)."""
    if not any(spec.learns for spec in specs):
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="specscope-bench-") as folder, data_root_set_to(folder):
        yield folder


def _warm_up(engine, specs: list[SpecConfig], sampling, comparisons: dict, remotes: tuple) -> None:
    """Every config once, untimed, and every reference and server: what a config pays the first time it runs (a
    drafter built, a draft model's context, buffers sized) is paid here, not by its first timed prompt."""
    for spec in specs:
        _run_one(engine, WARM_UP, spec, sampling, 8)
    for remote in remotes:
        _run_one(remote, WARM_UP, specs[0], sampling, 8)
    if comparisons:
        ids = engine.prompt_ids(WARM_UP.text)
        for comparison in comparisons.values():
            comparison.warm_up(ids, 8, engine.eos_ids)


def _specs(args) -> tuple[list[SpecConfig], list[int] | None]:
    """The configs to run after plain decoding, and the sweep's ks (None without --sweep-k); under --sweep-tree,
    every config at every budget (engine.measure.tree_sweep)."""
    specs = [parse_spec(text) for text in args.config if parse_remote(text) is None]
    sweep = parse_sweep(args.sweep_k) if args.sweep_k else None
    if args.sweep_tree:
        if sweep:
            raise ConfigError("--sweep-k and --sweep-tree sweep one thing each: run them apart")
        specs = tree_specs(specs, parse_budgets(args.sweep_tree))
    if sweep:
        specs = sweep_specs([s for s in specs if s.speculative] or [SpecConfig(method=sweep_methods()[0].name)], sweep)
    for spec in specs:
        for note in spec.warnings:
            print(f"specscope: warning: {note}", file=sys.stderr)
    return specs, sweep


def _write_json(path: str, engine, args, prompts: list[Prompt], summary: dict, seconds: float,
                cost=None, strict: dict | None = None, tree_sweep: dict | None = None) -> None:
    document = {
        "model": engine.target.label, "device": str(engine.target.device),
        "dtype": engine.target.dtype_label, "max_new_tokens": args.max_new_tokens,
        "prompts": len(prompts), "categories": sorted({p.category for p in prompts}),
        "temperature": args.temperature, "compile": args.compile, "seconds": seconds,
        "learn_pass": args.learn_pass,
        "platform": platform.platform(), "configs": summary, "backend": engine.target.backend,
        "verify_cost": None if cost is None else cost.as_dict(),
    }
    if strict is not None:
        document["strict"] = strict
    if tree_sweep is not None:
        document["tree_sweep"] = tree_sweep
    write_text_atomic(path, json.dumps(document, indent=2))


def run(args) -> int:
    """The `specscope bench` command."""
    check_bench_args(args)
    if args.concurrency is not None:  # a server's concurrent streams: engine.measure.concurrency
        return run_concurrency(args)
    from rich.console import Console
    from rich.markup import escape
    from engine.models.consent import ConsentAnswers, require
    from engine.runtime import load_engine, terminal_progress
    check_max_new_tokens(args.max_new_tokens)
    if args.limit is not None:
        check_int("--limit", args.limit, 1, MAX_COUNT)
    if args.json_out is not None:
        check_output_path(args.json_out, "--json")
    specs, sweep = _specs(args)
    prompts = load_prompts(args.prompts, args.category, args.limit)
    if args.compare_hf and args.temperature:
        raise ConfigError("--compare-hf compares greedy decoding; drop --temperature")
    if args.strict and args.temperature:
        raise ConfigError("--strict checks that greedy outputs are identical; drop --temperature")
    sampling = SamplingConfig(temperature=args.temperature, seed=args.seed)
    flags = {"trust_remote_code": args.trust_remote_code, "allow_pickle": args.allow_pickle}
    names = (args.model, *(spec.draft for spec in specs))
    require(names, **flags)
    err = Console(stderr=True, highlight=False)
    answers = ConsentAnswers.from_flags(names, **flags)
    engine = load_engine(args.model, terminal_progress(), device=args.device, dtype=args.dtype,
                         backend=args.backend, method=auto_method(specs), consent=lambda: answers,
                         compile=args.compile, **flags)
    if args.compare_llama:
        check_compare_llama(engine, specs, args.temperature)
    if args.compare_llama_server:
        check_compare_server(engine, args.temperature)
    if args.compare_hf and engine.target.backend != "transformers":
        raise ConfigError(f"--compare-hf compares with transformers' own generate(); {engine.target.label} runs "
                          f"on {engine.target.backend} (add --backend transformers, or use --compare-llama)")
    remotes = _remotes(args)
    err.print(escape(f"{len(prompts)} prompts × {len(with_plain_first(specs))} configs, "
                     f"{args.max_new_tokens} new tokens max, {engine.target.label} on "
                     f"{engine.target.device_label or engine.target.device} ({engine.target.dtype_label})"))
    started = time.perf_counter()
    with own_learning_store(specs) as store:
        if store is not None:
            err.print(escape(f"configs that learn from past replies learn into a store of this run's own ({store}), "
                             + ("after one untimed pass over the prompts" if args.learn_pass else
                                "starting empty and learning as the run goes")))
        summary, cost, server_notes, tree_cost = _measure(engine, args, prompts, specs, sampling, err, remotes)
        print_table(summary, args.compare_hf)
        if args.compare_llama_server:
            print_server_table(summary, server_notes)
        print_sources(summary)
        print_divergences(summary)
        if sweep:
            print_sweep(summary, cost)
        tree_sweep = _tree_sweep(summary, specs, cost, tree_cost, args.sweep_tree)
        strict = _strict(engine, prompts, specs, args, sampling) if args.strict else None
    if args.json_out:
        _write_json(args.json_out, engine, args, prompts, summary, time.perf_counter() - started, cost, strict,
                    tree_sweep)
        err.print(escape(f"figures written to {args.json_out}"))
    return 0


def _tree_sweep(summary: dict, specs: list[SpecConfig], cost, tree_cost, budgets_text: str | None) -> dict | None:
    """--sweep-tree: its table printed, its figures for the JSON (None without it)."""
    if tree_cost is None:
        return None
    rows = sweep_rows(summary, specs, cost, tree_cost)
    print_tree_sweep(rows, table_console())
    return {"budgets": parse_budgets(budgets_text), "tree_cost": tree_cost.as_dict(), "rows": rows}


def auto_method(specs: list[SpecConfig]) -> str | None:
    """The method "auto" loads the model for (engine.backends.resolve_backend): of the configs that name no
    backend, the one the fewest backends serve (early exit: transformers only), so that each runs where the
    model loads; None: the model alone decides."""
    from engine.core.methods import method_spec
    local = [spec.method for spec in specs if spec.backend is None]
    return min(local, key=lambda name: len(method_spec(name).backends), default=None)


def _strict(engine, prompts: list[Prompt], specs: list[SpecConfig], args, sampling) -> dict:
    """--strict: every local config again in float32 on the CPU with transformers (engine.measure.compare's
    strict_engine), where greedy outputs must equal plain decoding's exactly; its tables, and its figures."""
    from rich.console import Console
    from engine.runtime import terminal_progress
    strict = strict_engine(engine, terminal_progress())
    specs = [s for s in specs if s.backend in (None, "transformers")]
    Console(highlight=False).print("strict check: float32 on the CPU, transformers backend "
                                   "(greedy outputs must be identical to plain decoding)", style="bold")
    summary = summarise(run_benchmark(strict, prompts, specs, args.max_new_tokens, sampling), False,
                        against=target_baseline(strict))
    print_table(summary, False)
    print_divergences(summary)
    if strict is not engine:
        strict.release()
    return {"model": strict.target.label, "device": str(strict.target.device), "dtype": strict.target.dtype_label,
            "backend": strict.target.backend, "configs": summary}


def _remotes(args) -> tuple:
    """The servers of the `remote:url=…` configs, connected (engine.remote.engine; ServerError when one can't be)."""
    from engine.remote.engine import load_remote
    from engine.runtime import terminal_progress
    urls = [url for url in (parse_remote(text) for text in args.config) if url]
    return tuple(load_remote(url, terminal_progress()) for url in dict.fromkeys(urls))


def _measure(engine, args, prompts: list[Prompt], specs: list[SpecConfig], sampling, err, remotes=()):
    """The verify-cost curve (printed first), then every run, llama-cpp-python's beside ours under
    --compare-llama, llama-server's after ours under --compare-llama-server. Returns the summary, the curve
    (None for a remote target), why configs were left out of the llama-server comparison and, under --sweep-tree,
    the tree passes' cost curve (printed with the chain's, before the runs)."""
    from rich.markup import escape
    backend = engine.target.backend
    others = {b: [s for s in specs if s.backend == b] for b in BACKENDS if b != backend}
    specs = [s for s in specs if s.backend in (None, backend)]
    cost = _verify_cost(engine, specs, args.remeasure_cost)
    tree_cost = measure_tree_cost(engine, specs, cost, parse_budgets(args.sweep_tree), args.remeasure_cost) \
        if args.sweep_tree else None
    comparisons = make_comparisons(engine, with_plain_first(specs)) if args.compare_llama else {}

    def progress(done, total, label):
        if err.is_terminal:
            err.print(escape(f"  [{done}/{total}] {label}".ljust(60)), end="\r")

    try:
        results = run_benchmark(engine, prompts, specs, args.max_new_tokens, sampling, args.compare_hf, progress,
                                comparisons, remotes, args.learn_pass)
    finally:
        close_comparisons(comparisons)
    tallies, server_notes = compare_with_server(engine, prompts, results, args.max_new_tokens, progress) \
        if args.compare_llama_server else ({}, [])
    summary = summarise(results, args.compare_hf, comparisons, cost, against=target_baseline(engine))
    add_server_rows(summary, tallies)
    for other, group in others.items():
        if group:
            summary.update(_measure_on(other, group, args, prompts, sampling, progress, summary))
    add_vs_fastest_plain(summary)
    if err.is_terminal:
        err.print(" " * 60, end="\r")
    return summary, cost, server_notes, tree_cost


def _measure_on(backend: str, specs: list[SpecConfig], args, prompts: list[Prompt], sampling, progress,
                main_summary: dict) -> dict:
    """The configs that ask for another backend (`backend=` in their SPEC), on the same model loaded there,
    after plain decoding on it (`none:backend=…`, their speed-up's baseline); that plain row also gets its
    tok/s against the first backend's plain decoding (`plain_vs_none`)."""
    from engine.runtime import load_engine, terminal_progress
    engine = load_engine(args.model, terminal_progress(), device=args.device, dtype=args.dtype, backend=backend,
                         trust_remote_code=args.trust_remote_code, allow_pickle=args.allow_pickle,
                         compile=args.compile)
    cost = _verify_cost(engine, specs, args.remeasure_cost)
    results = run_benchmark(engine, prompts, specs, args.max_new_tokens, sampling, False, progress,
                            learn_pass=args.learn_pass)
    results[0].spec = SpecConfig(backend=backend)
    summary = summarise(results, False, None, cost, against=target_baseline(engine))
    for key, row in summary[results[0].spec.label()].items():
        base = main_summary[SpecConfig().label()].get(key, {}).get("tok_per_s")
        row["plain_vs_none"] = row["tok_per_s"] / base if base else None
    engine.release()
    return summary


def _verify_cost(engine, specs: list[SpecConfig], refresh: bool = False):
    """The target's measured cost of verifying n = 1…max(k)+1 tokens in one pass (at least 1…8), from the
    cache or measured now, printed as one line; None for a target whose passes are not ours (a server)."""
    from engine.host import engine_threads
    if not is_local_backend(engine.target.backend):
        return None
    n_max = max([spec.k for spec in specs if spec.speculative] + [7]) + 1
    cost = verify_cost(engine.target, n_max, threads=engine_threads(), refresh=refresh)
    table_console().print(cost_curve_line(cost, engine.target.backend))
    return cost


