"""`specscope bench --compare-llama-server`: llama.cpp's own llama-server (engine.measure.llama_server) beside our
loop, for plain decoding and each config whose method has llama-server's equal (MethodSpec.llama_server_args:
ngram-mod, ngram-map, mtp, draft-model), on the same GGUF (and draft or MTP head file), prompt ids and threads:
its greedy `/completion` of every prompt, after our timed run, each on a fresh server (its pools start empty, as
ours do for each bench prompt). Reported per category and overall: its acceptance (drafted and accepted
tokens, as its timings count them) beside ours, how many of its outputs equal ours, and its decode tok/s.

Touches one llama-server process at a time (127.0.0.1, a free port, stopped before the next) and their logs in a
throwaway folder; no Qt.
"""

from __future__ import annotations

import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from engine.core.config import SpecConfig
from engine.core.errors import ConfigError
from engine.measure.bench_results import ConfigResult


def check_compare_server(engine, temperature: float) -> None:
    """--compare-llama-server needs a GGUF target on our llama.cpp backend, greedy decoding and the binary."""
    from engine.measure.llama_server import MISSING, find_llama_server
    if engine.target.backend != "llama.cpp":
        raise ConfigError(f"--compare-llama-server serves the same GGUF with llama-server; {engine.target.label} "
                          f"runs on {engine.target.backend} (use a .gguf model or --backend llama.cpp)")
    if temperature:
        raise ConfigError("--compare-llama-server compares greedy decoding; drop --temperature")
    if find_llama_server() is None:
        raise ConfigError(f"--compare-llama-server: {MISSING}")


def server_args(spec: SpecConfig, engine) -> tuple[str, ...] | None:
    """llama-server's options for the same setting on `engine`'s model (its files): () for plain decoding, None
    where it has no equal (the method has none; ConfigError, with the reason, where this setting of it has none)."""
    if not spec.speculative:
        return ()
    make = spec.info.llama_server_args
    if make is None:
        return None
    if spec.adaptive:
        raise ConfigError("llama-server drafts a fixed number of tokens a round; adaptive has no equal there")
    return tuple(make(spec, engine))


@dataclass
class ServerTally:
    """llama-server's figures for one config, per category and overall ('all')."""

    drafted: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    accepted: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    identical: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    prompts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    decode_tokens: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    decode_ms: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    def add(self, category: str, reply: dict, ours: tuple[int, ...]) -> None:
        timings = reply.get("timings", {})
        for key in ("all", category):
            self.drafted[key] += int(timings.get("draft_n", 0))
            self.accepted[key] += int(timings.get("draft_n_accepted", 0))
            self.identical[key] += int(tuple(reply.get("tokens", ())) == tuple(ours))
            self.prompts[key] += 1
            self.decode_tokens[key] += int(timings.get("predicted_n", 0))
            self.decode_ms[key] += float(timings.get("predicted_ms", 0.0))

    def row(self, key: str) -> dict:
        if not self.prompts.get(key):
            return {}
        drafted, ms = self.drafted[key], self.decode_ms[key]
        return {"llama_server_drafted": drafted, "llama_server_accepted": self.accepted[key],
                "llama_server_acceptance": self.accepted[key] / drafted if drafted else None,
                "llama_server_identical": self.identical[key],
                "llama_server_tok_per_s": 1000 * self.decode_tokens[key] / ms if ms > 0 else None}


def compare_with_server(engine, prompts, results, max_new_tokens: int, progress=None) -> tuple[dict, list[str]]:
    """Each comparable config's ServerTally (by label) and a note for each config left out, saying why.
    `results` are the bench's rows (engine.measure.bench_results): our configs' outputs are what each reply is
    held against; a server's row (ServerResult) runs as its server was started and has no llama-server equal."""
    from engine.measure.llama_server import LlamaServer, complete_ids
    progress = progress or (lambda done, total, label: None)
    tallies, notes, plan = {}, [], []
    for result in results:
        if not isinstance(result, ConfigResult):
            continue
        try:
            args = server_args(result.spec, engine)
        except ConfigError as exc:
            notes.append(f"{result.spec.label()}: {exc}")
            continue
        if args is not None:
            plan.append((result, args))
    ids = {prompt.id: engine.prompt_ids(prompt.text) for prompt in prompts}
    done, total = 0, len(plan) * len(prompts)
    with tempfile.TemporaryDirectory(prefix="specscope-llama-server-") as logs:
        for result, args in plan:
            tally = tallies[result.spec.label()] = ServerTally()
            for prompt in prompts:
                # a fresh server for every prompt: its n-gram pools start empty, as ours do in the bench
                with LlamaServer(Path(engine.target.source.file), args, log_dir=Path(logs),
                                 context=engine.target.context_length) as server:
                    reply = complete_ids(server, ids[prompt.id], max_new_tokens, timeout=600, ignore_eos=False)
                tally.add(prompt.category, reply, result.outputs[prompt.id])
                done += 1
                progress(done, total, f"llama-server {result.spec.label()}")
    return tallies, notes


def add_server_rows(summary: dict, tallies: dict) -> None:
    """Put llama-server's figures into the bench summary's rows, beside ours."""
    for label, tally in tallies.items():
        for key, row in summary.get(label, {}).items():
            row.update(tally.row(key))


def print_server_table(summary: dict, notes: list[str], console=None) -> None:
    """Per category and overall: our acceptance and llama-server's, equal outputs, both decode speeds."""
    from rich.markup import escape
    from rich.table import Table

    from engine.measure.report import table_console
    console = console or table_console()
    labels = [label for label, rows in summary.items() if "llama_server_identical" in rows.get("all", {})]
    if labels:
        table = Table(title="beside llama-server (the same GGUF, prompt ids and threads; greedy)",
                      title_justify="left")
        for column in ("config", "prompts", "ours accepted", "theirs accepted", "equal outputs", "ours tok/s",
                       "theirs tok/s"):
            table.add_column(column, justify="left" if column in ("config", "prompts") else "right")
        for label in labels:
            for key, row in summary[label].items():
                table.add_row(escape(label), escape("overall" if key == "all" else key), *_server_cells(row))
        console.print(table)
    for note in notes:
        console.print(escape(f"not compared with llama-server: {note}"))


def _server_cells(row: dict) -> list[str]:
    def share(accepted, drafted) -> str:
        return f"{accepted}/{drafted} ({accepted / drafted:.0%})" if drafted else f"{accepted}/0"
    theirs_tok_s = row.get("llama_server_tok_per_s")
    return [share(row["accepted_tokens"], row["drafted_tokens"]),
            share(row["llama_server_accepted"], row["llama_server_drafted"]),
            f"{row['llama_server_identical']}/{row['prompts']}", f"{row['tok_per_s']:.1f}",
            "–" if theirs_tok_s is None else f"{theirs_tok_s:.1f}"]
