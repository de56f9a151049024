"""What `specscope bench` prints: the table of every config against plain decoding, where each row's figures
came from, the diagnosed divergences, and the k sweep's measured and theoretical speed-ups. Reads the
summary engine.measure.bench builds; writes to the terminal only (rich), escaping text that isn't ours."""

from __future__ import annotations

from collections import defaultdict

from engine.core.config import REMOTE_PREFIX, parse_spec
from engine.measure.compare import SweepPoint, SweepSummary, sweep_summary


def table_console():
    from rich.console import Console
    console = Console(highlight=False)
    if not console.is_terminal:  # piped or captured: never squeeze the columns
        console = Console(highlight=False, width=160)
    return console


def _fmt(value, pattern: str) -> str:
    return "–" if value is None else format(value, pattern)


OPTIONAL_COLUMNS = (("theory@cost", "theoretical_speedup_measured_cost", ".2f", "×"),
                    ("effic.@cost", "efficiency_measured_cost", ".2f", ""),
                    ("vs none", "plain_vs_none", ".2f", "×"),
                    ("vs fastest plain", "vs_fastest_plain", ".2f", "×"))
# the references beside our loop (bench --compare-llama), in a table of their own so that neither is squeezed
REFERENCE_COLUMNS = (("theirs tok/s", "llama_cpp_python_tok_per_s", ".1f", ""),  # llama-cpp-python's own loop
                     ("ours/theirs", "ours_over_llama_cpp_python", ".2f", ""),
                     ("bare tok/s", "bare_loop_tok_per_s", ".1f", ""),  # a bare low-level loop
                     ("ours/bare", "ours_over_bare_loop", ".2f", ""))


def _present(columns, summary: dict) -> list:
    return [c for c in columns if any(c[1] in row for rows in summary.values() for row in rows.values())]


def _cells(row: dict, columns) -> list[str]:
    return [_fmt(row.get(key), pattern) + (unit if row.get(key) is not None else "") for _, key, pattern, unit in columns]


def print_table(summary: dict, compare_hf: bool, console=None) -> None:
    from rich.markup import escape
    from rich.table import Table
    console = console or table_console()
    categories = sorted({key for rows in summary.values() for key in rows if key != "all"})
    for key in ["all"] + categories:
        table = Table(title=escape(f"{'overall' if key == 'all' else key}"), title_justify="left")
        for column in ("config", "tok/s", "speed-up", "accept", "mean len", "theory", "effic.", "identical"):
            table.add_column(column, justify="left" if column == "config" else "right")
        if compare_hf:
            table.add_column("ours/HF", justify="right")
        optional = _present(OPTIONAL_COLUMNS, summary)
        for heading, *_ in optional:
            table.add_column(heading, justify="right")
        for label, rows in summary.items():
            row = rows.get(key)
            if row is None:
                continue
            cells = [escape(label), f"{row['tok_per_s']:.1f}", _fmt(row["speedup"], ".2f") + "×",
                     f"{row['acceptance_rate']:.0%}", f"{row['mean_accepted_length']:.2f}",
                     _fmt(row["theoretical_speedup"], ".2f") + "×", _fmt(row["efficiency"], ".2f"),
                     _identical_cell(row)]
            if compare_hf:
                cells.append(_fmt(row.get("ours_over_hf"), ".2f"))
            table.add_row(*(cells + _cells(row, optional)))
        console.print(table)
    print_baselines(summary, console)
    references = _present(REFERENCE_COLUMNS, summary)
    if references:
        table = Table(title="overall, beside llama.cpp's own loops", title_justify="left")
        for column in ["config", "tok/s"] + [heading for heading, *_ in references]:
            table.add_column(column, justify="left" if column == "config" else "right")
        for label, rows in summary.items():
            row = rows.get("all")
            if row is not None and any(key in row for _, key, *_ in references):
                table.add_row(escape(label), f"{row['tok_per_s']:.1f}", *_cells(row, references))
        console.print(table)
    if any("llama_cpp_python_tok_per_s" in row for rows in summary.values() for row in rows.values()):
        console.print("theirs: llama-cpp-python's own Llama on the same GGUF, prompt ids and threads (prompt "
                      "lookup through its LlamaPromptLookupDecoding)")
    if any("bare_loop_tok_per_s" in row for rows in summary.values() for row in rows.values()):
        console.print("bare: a bare greedy loop on llama-cpp-python's low-level API (one llama_decode and a numpy "
                      "argmax a token), the same GGUF, prompt ids, threads and GPU layers: what llama.cpp alone costs")


def print_baselines(summary: dict, console) -> None:
    """What each row's speed-up and identical count are judged against: plain decoding on its own backend,
    dtype and device, in this run (a server's row: against none; "vs fastest plain" is the cross-backend
    figure)."""
    from rich.markup import escape
    groups: dict[str, list[str]] = defaultdict(list)
    for label, rows in summary.items():
        if "all" in rows and rows["all"].get("baseline") is not None:
            groups[rows["all"]["baseline"] or "no plain decoding of its own (the server's run)"].append(label)
    if len(groups) == 1:
        console.print(escape(f"speed-up and identical: against {next(iter(groups))}, measured in this run"))
        return
    for baseline, labels in groups.items():
        console.print(escape(f"speed-up and identical against {baseline}: {', '.join(labels)}"))
    console.print("vs fastest plain: tok/s against the fastest plain decoding of this run on any backend")


def _identical_cell(row: dict) -> str:
    """identical/prompts, with the near-ties (≈) and mismatches (✗) among the rest."""
    cell = f"{row['identical_to_none']}/{row['prompts']}"
    extra = [f"{row[key]} {mark}" for key, mark in (("near_ties", "≈"), ("mismatches", "✗MISMATCH"))
             if row.get(key)]
    return cell + (f" ({', '.join(extra)})" if extra else "")


def print_divergences(summary: dict, console=None) -> None:
    """Every mismatch, loudly, with what is needed to report it; near-ties in one line each."""
    from rich.markup import escape
    console = console or table_console()
    for label, rows in summary.items():
        for d in rows["all"].get("divergences", []):
            if d["kind"] == "mismatch":
                console.print(escape(f"MISMATCH {label}, prompt {d['prompt']}: token {d['position']}: plain "
                                     f"{d['plain_token']} ({d['plain_text']!r}), speculation {d['spec_token']} "
                                     f"({d['spec_text']!r}), margin {d['top2_margin']:.3g}, passes differ by "
                                     f"{d['pass_discrepancy']:.3g} ({d['backend']}, {d['dtype']}, round "
                                     f"{d['round_index']}): a real error, please report it"), style="bold red")
            else:
                console.print(escape(f"near-tie {label}, prompt {d['prompt']}: token {d['position']}, "
                                     f"{d['plain_text']!r} vs {d['spec_text']!r}, margin {d['top2_margin']:.3g} "
                                     f"≤ 2 × pass discrepancy {d['pass_discrepancy']:.3g} ({d['dtype']} rounding)"))


def print_sources(summary: dict, console=None) -> None:
    """Which figures came from where, one line per config that is not all measured here."""
    from rich.markup import escape
    console = console or table_console()
    for label, rows in summary.items():
        where = rows["all"].get("figures_from", "measured here")
        if where != "measured here":
            console.print(escape(f"{label}: {where}"))


def sweep_summaries(summary: dict, cost=None) -> list[SweepSummary]:
    """Per method, the sweep (engine.measure.compare.sweep_summary) of a bench summary's overall rows, its theory on
    the measured verify-cost curve `cost` where there is one."""
    points: dict[str, list[SweepPoint]] = defaultdict(list)
    for label, rows in summary.items():
        if label.startswith(REMOTE_PREFIX):
            continue
        spec = parse_spec(label)
        if not spec.speculative:
            continue
        row = rows["all"]
        points[spec.method].append(SweepPoint(spec.k, row["speedup"] or 0.0, row["acceptance_rate"],
                                              row["cost_ratio"]))
    return [sweep_summary(method, method_points, cost) for method, method_points in points.items()]


def print_sweep(summary: dict, cost=None) -> None:
    from rich.table import Table
    console = table_console()
    for sweep in sweep_summaries(summary, cost):
        table = Table(title=f"k sweep: {sweep.method} (pooled α = {sweep.alpha:.0%}, c = {sweep.cost_ratio:.3f})",
                      title_justify="left")
        for column in ("k", "speed-up", "theory", "accept"):
            table.add_column(column, justify="right")
        for point, predicted in zip(sweep.points, sweep.theory):
            table.add_row(str(point.k), f"{point.speedup:.2f}×", f"{predicted:.2f}×", f"{point.acceptance_rate:.0%}")
        console.print(table)
        if sweep.best is not None:
            console.print(f"best k for {sweep.method}: {sweep.best.k} ({sweep.best.speedup:.2f}× over plain decoding)")
