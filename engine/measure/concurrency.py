"""`specscope bench --concurrency N,…`: a server's throughput with N chats at once, and where concurrent users stop
its speculation paying.

For each N (ascending), after one untimed warm-up request: N chats sent at once (threads, each with an
engine.remote.engine RemoteEngine of its own, connected before the clock starts), and one row: the server's tokens
(its usage counts), the wall time of the batch, the aggregate tok/s (those tokens over that wall time), each
stream's tok/s (engine.core.stats: tokens after the first over the time after the first; the median and the
slowest stream) and the server's own speculation for the batch where it reports it: drafted and accepted tokens
summed over the streams' own figures (vLLM's per-request metrics, llama-server's timings), else the difference of
its /metrics counters around the batch. Stream i asks prompt i of the set, the set's categories taken in turn
(engine.measure.prompts; assets/presets.json unless --prompts names another file).

With --serve, SpecScope starts the server itself on the built-in model, plain and then with n-gram speculation
(vLLM: engine.measure.vllm_server, at most max(N) requests at once; llama-server: engine.measure.llama_server, one
slot per stream), runs the sweep against each, and prints speculation ÷ plain at each N (aggregate and a stream's
median) and the N from which speculation stops paying, all measured in the same run.

Touches the network (the server's address), under --serve the processes it starts and their logs (a temporary
folder), the terminal (tables on stdout, progress on stderr) and the --json file; no Qt.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from engine.core.config import SamplingConfig
from engine.core.errors import ConfigError, ServerError
from engine.core.validation import check_max_new_tokens, check_output_path, write_text_atomic
from engine.measure.prompts import Prompt, load_prompts

SERVE_CHOICES = ("vllm", "llama-server")
DEFAULT_PROMPTS = Path(__file__).resolve().parents[2] / "assets" / "presets.json"
MAX_STREAMS = 256
NGRAM_K = 3  # drafted tokens per step of the n-gram speculation --serve starts
WARM_UP = Prompt("warm-up", "warm-up", "Hello!")
WARM_UP_TOKENS = 8
# bench options that measure SpecScope's own decoding, not a server's streams (dest → option)
NOT_HERE = {"config": "--config", "sweep_k": "--sweep-k", "sweep_tree": "--sweep-tree", "compare_hf": "--compare-hf",
            "remeasure_cost": "--remeasure-cost", "compare_llama": "--compare-llama",
            "compare_llama_server": "--compare-llama-server", "strict": "--strict", "learn_pass": "--learn-pass"}


def add_concurrency_args(parser: argparse.ArgumentParser) -> None:
    """bench's --concurrency and --serve."""
    parser.add_argument("--concurrency", default=None, metavar="N,…",
                        help="measure a server's concurrent streams instead: for each N, N chats at once to --model "
                             "http://HOST:PORT[/v1] (after one untimed warm-up request), one row per N: the server's "
                             "tokens, the wall seconds, the aggregate tok/s, a stream's tok/s (median, slowest) and "
                             "the server's acceptance where it reports it (prompts: --prompts, else "
                             "assets/presets.json)")
    parser.add_argument("--serve", default=None, choices=SERVE_CHOICES,
                        help="with --concurrency: start this server on the built-in model twice, plain and with "
                             f"n-gram speculation (k={NGRAM_K}), run the sweep against each, and print speculation ÷ "
                             "plain at each N and the N from which speculation stops paying")


def parse_levels(text: str) -> list[int]:
    """--concurrency's "1,2,4,8" → [1, 2, 4, 8] (ascending, once each); ConfigError for anything but N from 1 to
    MAX_STREAMS."""
    levels = set()
    for part in text.split(","):
        try:
            n = int(part.strip())
        except ValueError:
            raise ConfigError(f"--concurrency takes whole numbers of streams separated by commas (e.g. 1,2,4,8), "
                              f"got {text!r}") from None
        if not 1 <= n <= MAX_STREAMS:
            raise ConfigError(f"--concurrency: a number of streams is from 1 to {MAX_STREAMS}, got {n}")
        levels.add(n)
    return sorted(levels)


def check_args(args) -> list[int]:
    """What --concurrency and --serve refuse before anything starts (no server asked, no model read): the levels."""
    from engine.models.sources import is_server_url
    if args.concurrency is None:
        raise ConfigError(f"--serve {args.serve} measures concurrent streams: give --concurrency N,… (e.g. 1,4)")
    levels = parse_levels(args.concurrency)
    on_server = is_server_url(args.model)
    if args.serve and args.model != "default":
        raise ConfigError(f"--serve {args.serve} starts its own servers on the built-in model; drop --model "
                          f"{args.model}")
    if not args.serve and not on_server:
        raise ConfigError("--concurrency measures a server's concurrent streams and needs --model "
                          "http://HOST:PORT[/v1] (a running OpenAI-compatible server), or --serve vllm to start "
                          f"one; {args.model} is not a server address")
    given = [flag for dest, flag in NOT_HERE.items() if getattr(args, dest, None)]
    if given:
        raise ConfigError(f"--concurrency measures a server's streams as it was started; drop {', '.join(given)} "
                          "(SpecScope's own decoding: run it apart)")
    return levels


@dataclass(frozen=True)
class BatchRow:
    """N chats at once: the server's tokens, the batch's wall time, each stream's tok/s and, where the server
    reported them, the drafted and accepted tokens of the batch (None: it reported none)."""

    n: int
    tokens: int
    wall_seconds: float
    stream_tok_per_s: tuple[float, ...]
    drafted: int | None = None
    accepted: int | None = None
    figures_from: str = ""  # request | timings | metrics (the batch's) | "" (none reported)

    @property
    def aggregate_tok_per_s(self) -> float:
        return self.tokens / self.wall_seconds if self.wall_seconds > 0 else 0.0

    @property
    def median_stream_tok_per_s(self) -> float:
        return statistics.median(self.stream_tok_per_s)

    @property
    def min_stream_tok_per_s(self) -> float:
        return min(self.stream_tok_per_s)

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    def as_dict(self) -> dict:
        return {"n": self.n, "tokens": self.tokens, "wall_seconds": self.wall_seconds,
                "aggregate_tok_per_s": self.aggregate_tok_per_s, "median_stream_tok_per_s":
                self.median_stream_tok_per_s, "min_stream_tok_per_s": self.min_stream_tok_per_s,
                "stream_tok_per_s": list(self.stream_tok_per_s), "drafted": self.drafted, "accepted": self.accepted,
                "acceptance": self.acceptance, "figures_from": self.figures_from}


@dataclass(frozen=True)
class Sweep:
    """One server's rows: `label` says what was measured (its model and address, or the setting --serve started)."""

    label: str
    url: str
    rows: tuple[BatchRow, ...]

    def as_dict(self) -> dict:
        return {"label": self.label, "url": self.url, "rows": [row.as_dict() for row in self.rows]}


def in_turn(prompts: list[Prompt]) -> list[Prompt]:
    """The prompts with their categories taken in turn (the first of each, then the second of each, …), so that a
    few streams already ask different kinds of prompt."""
    by_category: dict[str, list[Prompt]] = {}
    for prompt in prompts:
        by_category.setdefault(prompt.category, []).append(prompt)
    rounds = max(len(group) for group in by_category.values())
    return [group[i] for i in range(rounds) for group in by_category.values() if i < len(group)]


def _reply(engine, prompt: Prompt, max_new_tokens: int, sampling: SamplingConfig):
    """One chat's GenerationFinished."""
    from engine.core.events import GenerationFinished
    finished = None
    for event in engine.generate(prompt.text, sampling=sampling, max_new_tokens=max_new_tokens):
        if isinstance(event, GenerationFinished):
            finished = event
    return finished


def _server_counters(engine):
    """The server's /metrics speculation counters now (engine.remote.metrics), None where it has none."""
    from engine.remote.client import metrics
    from engine.remote.metrics import PREFIXES, counters_from_metrics
    prefix = PREFIXES.get(engine.server.kind)
    text = metrics(engine.client) if prefix and engine.server.metrics else None
    return counters_from_metrics(text, prefix) if text else None


def one_batch(url: str, n: int, prompts: list[Prompt], max_new_tokens: int, sampling: SamplingConfig) -> BatchRow:
    """N chats at once to the server at `url`, stream i asking prompts[i mod len]; ServerError naming the first
    stream that failed."""
    from engine.remote.engine import load_remote
    engines = [load_remote(url) for _ in range(n)]  # connected (and the server asked what it is) off the clock
    before = _server_counters(engines[0])
    outcomes: list = [None] * n
    start = threading.Barrier(n + 1)

    def chat(i: int) -> None:
        start.wait()
        try:
            outcomes[i] = _reply(engines[i], prompts[i % len(prompts)], max_new_tokens, sampling)
        except Exception as exc:  # noqa: BLE001 (said below, with the stream it happened in)
            outcomes[i] = exc

    threads = [threading.Thread(target=chat, args=(i,), daemon=True) for i in range(n)]
    for thread in threads:
        thread.start()
    start.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    for i, outcome in enumerate(outcomes):
        error = outcome if isinstance(outcome, Exception) else getattr(outcome, "error", "no reply")
        if error:
            raise ServerError(f"stream {i + 1} of {n} failed: {error}")
    after = _server_counters(engines[0]) if before is not None else None
    return batch_row(n, wall, outcomes, after.minus(before) if after is not None else None)


def batch_row(n: int, wall: float, replies: list, counters=None) -> BatchRow:
    """The row of one batch from its replies (GenerationFinished); `counters`: the server's /metrics difference
    around the batch, used where a reply has no figures of its own (server-wide counters overlap across streams)."""
    own = [counts for counts in (_own_counts(reply.server) for reply in replies) if counts is not None]
    drafted = accepted = None
    where = ""
    if own:  # a stream that reported nothing (llama-server: it drafted nothing) is said, not counted as 0
        drafted, accepted = sum(c[0] for c in own), sum(c[1] for c in own)
        where = "/".join(sorted({c[2] for c in own}))
        where += f" ({len(own)} of {len(replies)} streams)" if len(own) < len(replies) else ""
    elif counters is not None and (counters.drafts or counters.draft_tokens):
        drafted, accepted, where = counters.draft_tokens, counters.accepted_tokens, "metrics (the batch's)"
    return BatchRow(n, sum(reply.stats.committed_tokens for reply in replies), wall,
                    tuple(reply.stats.tok_per_s for reply in replies), drafted, accepted, where)


def _own_counts(server) -> tuple[int, int, str] | None:
    """A reply's own (drafted, accepted, where from): vLLM's per-request metrics, llama-server's timings (also where
    its figures came from /metrics); None where the server gave only server-wide counters or nothing."""
    if server is None or not server.source:
        return None
    if server.source in ("request", "timings"):
        return server.draft_tokens, server.accepted_tokens, server.source
    if server.request_draft_tokens is not None and server.request_accepted_tokens is not None:
        return server.request_draft_tokens, server.request_accepted_tokens, "timings"
    return None


Progress = Callable[[str], None]


def sweep(url: str, levels: list[int], prompts: list[Prompt], max_new_tokens: int, sampling: SamplingConfig,
          progress: Progress = lambda line: None, label: str | None = None) -> Sweep:
    """One untimed warm-up request, then one batch per N."""
    from engine.remote.engine import load_remote
    warm = load_remote(url)
    _reply(warm, WARM_UP, WARM_UP_TOKENS, sampling)
    rows = []
    for n in levels:
        progress(f"{label or warm.target.label}: {n} stream{'s' if n > 1 else ''} at once…")
        rows.append(one_batch(url, n, prompts, max_new_tokens, sampling))
    return Sweep(label or warm.target.label, url, tuple(rows))


def print_sweep(result: Sweep, console) -> None:
    from rich.markup import escape
    from rich.table import Table
    table = Table(title=escape(result.label), title_justify="left")
    for column in ("N", "tokens", "wall s", "tok/s in all", "stream tok/s (median)", "(slowest)", "accepted/drafted",
                   "accept"):
        table.add_column(column, justify="right")
    for row in result.rows:
        spec = "–" if row.drafted is None else f"{row.accepted}/{row.drafted}"
        accept = "–" if row.acceptance is None else f"{row.acceptance:.0%}"
        table.add_row(str(row.n), str(row.tokens), f"{row.wall_seconds:.2f}", f"{row.aggregate_tok_per_s:.1f}",
                      f"{row.median_stream_tok_per_s:.1f}", f"{row.min_stream_tok_per_s:.1f}", spec, accept)
    console.print(table)
    sources = sorted({row.figures_from for row in result.rows if row.figures_from})
    console.print(escape("speculation figures from: " + (", ".join(sources) if sources else
                                                          "nowhere (the server reported no speculation)")))


def ratios(plain: Sweep, speculating: Sweep) -> list[dict]:
    """Speculation ÷ plain at each N: the aggregate tok/s and a stream's median tok/s."""
    return [{"n": p.n, "aggregate": s.aggregate_tok_per_s / p.aggregate_tok_per_s if p.aggregate_tok_per_s else None,
             "per_stream": s.median_stream_tok_per_s / p.median_stream_tok_per_s if p.median_stream_tok_per_s
             else None} for p, s in zip(plain.rows, speculating.rows)]


def _listed(ns: list[int]) -> str:
    return ", ".join(map(str, ns))


def verdict(rows: list[dict]) -> str:
    """Where speculation stops paying (its aggregate tok/s below plain's), that it pays at every N measured or at
    none, or, where the Ns do not split so, at which it does and at which not."""
    measured = [row for row in rows if row["aggregate"] is not None]
    paying = [row["n"] for row in measured if row["aggregate"] >= 1.0]
    losing = [row["n"] for row in measured if row["aggregate"] < 1.0]
    if not losing:
        return f"speculation pays at every N measured ({_listed(paying)})"
    if not paying:
        return f"speculation pays at no N measured ({_listed(losing)}): its aggregate tok/s is below plain's"
    if max(paying) < min(losing):
        return (f"speculation stops paying at N={losing[0]}: its aggregate tok/s is below plain's at "
                f"N={_listed(losing)}")
    return (f"speculation pays at N={_listed(paying)} and not at N={_listed(losing)} (its aggregate tok/s against "
            "plain's)")


def print_ratios(rows: list[dict], console) -> None:
    for row in rows:
        aggregate = "–" if row["aggregate"] is None else f"{row['aggregate']:.2f}×"
        per_stream = "–" if row["per_stream"] is None else f"{row['per_stream']:.2f}×"
        console.print(f"N={row['n']}: speculation / plain = {aggregate} in all, {per_stream} a stream (median)")
    console.print(verdict(rows))


@dataclass(frozen=True)
class Served:
    """A server --serve starts: its label and how to start it (a log folder → a LlamaServer, not yet started)."""

    label: str
    server: Callable[[Path], object]


def served_pair(kind: str, streams: int) -> tuple[Served, Served]:
    """(plain, n-gram speculation) on the built-in model, each serving `streams` requests at once; ConfigError
    where the server is not installed."""
    if kind == "vllm":
        from engine.measure.vllm_server import (MISSING_VLLM, VllmServer, built_in_model_folder, find_vllm_python,
                                                ngram_config)
        if find_vllm_python() is None:
            raise ConfigError(MISSING_VLLM)
        folder, parallel = built_in_model_folder(), max(streams, 8)
        return (Served("vLLM plain", lambda logs: VllmServer(folder, None, log_dir=logs, name="smollm2",
                                                              parallel=parallel)),
                Served(f"vLLM n-gram k={NGRAM_K}", lambda logs: VllmServer(
                    folder, ngram_config(k=NGRAM_K), log_dir=logs, name="smollm2", parallel=parallel)))
    from engine.measure.llama_server import MISSING, LlamaServer, find_llama_server
    from engine.models.sources import default_model_gguf
    if find_llama_server() is None:
        raise ConfigError(MISSING)
    gguf = default_model_gguf()
    ngram = ("--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "2",
             "--spec-ngram-simple-size-m", str(NGRAM_K))
    return (Served("llama-server plain", lambda logs: LlamaServer(gguf, (), log_dir=logs, parallel=streams)),
            Served(f"llama-server ngram-simple m={NGRAM_K}",
                   lambda logs: LlamaServer(gguf, ngram, log_dir=logs, parallel=streams)))


def serve_and_sweep(kind: str, levels: list[int], prompts: list[Prompt], max_new_tokens: int,
                    sampling: SamplingConfig, progress: Progress) -> list[Sweep]:
    """--serve: the built-in model served plain, then speculating, the sweep run against each in turn."""
    sweeps = []
    with tempfile.TemporaryDirectory(prefix="specscope-concurrency-") as logs:
        for served in served_pair(kind, max(levels)):
            progress(f"starting {served.label} on the built-in model…")
            with served.server(Path(logs)) as server:
                sweeps.append(sweep(server.url, levels, prompts, max_new_tokens, sampling, progress, served.label))
    return sweeps


def run_concurrency(args) -> int:
    """`specscope bench --concurrency N,… [--serve KIND]`: the tables (stdout), under --serve the ratios and the
    verdict, and the --json file."""
    from rich.console import Console
    from rich.markup import escape
    from engine.measure.report import table_console
    levels = check_args(args)
    check_max_new_tokens(args.max_new_tokens)
    if args.json_out is not None:
        check_output_path(args.json_out, "--json")
    prompts = in_turn(load_prompts(args.prompts or DEFAULT_PROMPTS, args.category, args.limit))
    sampling = SamplingConfig(temperature=args.temperature, seed=args.seed)
    err, out = Console(stderr=True, highlight=False), table_console()

    def progress(line: str) -> None:
        err.print(escape(line))

    progress(f"{len(prompts)} prompts (stream i asks prompt i), {args.max_new_tokens} new tokens max, "
             f"N = {', '.join(map(str, levels))}")
    if args.serve:
        sweeps = serve_and_sweep(args.serve, levels, prompts, args.max_new_tokens, sampling, progress)
    else:
        sweeps = [sweep(args.model, levels, prompts, args.max_new_tokens, sampling, progress)]
    for result in sweeps:
        print_sweep(result, out)
    compared = ratios(*sweeps) if len(sweeps) == 2 else None
    if compared is not None:
        print_ratios(compared, out)
    if args.json_out:
        document = {"mode": "concurrency", "levels": levels, "max_new_tokens": args.max_new_tokens,
                    "prompts": len(prompts), "temperature": args.temperature, "serve": args.serve,
                    "platform": platform.platform(), "servers": [result.as_dict() for result in sweeps],
                    "ratios": compared, "verdict": verdict(compared) if compared is not None else None}
        write_text_atomic(args.json_out, json.dumps(document, indent=2))
        err.print(escape(f"figures written to {args.json_out}"))
    return 0
