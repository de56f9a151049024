"""`specscope bench --sweep-tree 0,4,8,16`: a branching method's setting run at each tree budget (0: its chain of k),
against plain decoding in the same run, with what a pass over N nodes costs here and what that lets it gain.

Per budget: tokens per target pass (mean accepted length), nodes verified per pass, the measured cost of a tree
pass over N nodes against one token (engine.measure.verify_cost.tree_verify_cost; the chain's own curve for
budget 0), the best a pass of that size can gain (engine.core.stats.tree_ceiling: every round's k-deep path
kept, drafting free), the theoretical speed-up on the measured cost (engine.core.stats.speedup_on_curve) and the
measured speed-up. The ceiling is known before a single prompt runs: a budget whose ceiling is below 1× never
pays on this machine, however well it is drafted.

Reads the bench's summary rows (engine.measure.bench_results); prints with rich; touches nothing else.
"""

from __future__ import annotations

from engine.core.config import SpecConfig, check_tree
from engine.core.errors import ConfigError
from engine.core.methods import methods
from engine.core.stats import VerifyCost, speedup_on_curve, tree_ceiling

__all__ = ["measure_tree_cost", "parse_budgets", "print_tree_sweep", "sweep_rows", "tree_cost_line", "tree_specs"]


def parse_budgets(text: str) -> list[int]:
    """"0,4,8,16" → [0, 4, 8, 16] (sorted, each once; 0 is the chain); ConfigError for anything else."""
    try:
        budgets = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise ConfigError(f"--sweep-tree wants node budgets like 0,4,8,16 (0: the chain), got {text!r}") from None
    if not budgets:
        raise ConfigError(f"--sweep-tree wants node budgets like 0,4,8,16 (0: the chain), got {text!r}")
    for budget in budgets:
        check_tree(budget)
    return budgets


def branching_methods() -> list[str]:
    return [m.name for m in methods() if m.speculative and m.branches]


def tree_specs(specs: list[SpecConfig], budgets: list[int]) -> list[SpecConfig]:
    """Every speculative config at every budget (its chain for 0). ConfigError for a config whose method drafts
    chains only, or for none at all: the sweep would measure nothing."""
    speculative = [spec for spec in specs if spec.speculative]
    branching = ", ".join(branching_methods()) or "none yet"
    if not speculative:
        raise ConfigError(f"--sweep-tree needs a --config of a method that drafts trees (methods: {branching})")
    for spec in speculative:
        if not spec.info.branches:
            raise ConfigError(f"--sweep-tree: method {spec.method} drafts one chain a round, it does not branch, so "
                              f"every budget would run the same chain; methods that branch: {branching}")
    return [spec.with_tree(budget) for spec in speculative for budget in budgets]


def measure_tree_cost(engine, specs: list[SpecConfig], chain_cost: VerifyCost | None, budgets: list[int],
                      refresh: bool = False) -> VerifyCost:
    """The target's tree-pass cost up to the largest budget (cached, or measured now), said in one line with the
    chain's before the runs. ConfigError for a target whose passes are not ours (a server) or that verifies chains
    only (its runner's reason)."""
    from engine.host import engine_threads
    from engine.measure.report import table_console
    from engine.measure.verify_cost import tree_verify_cost
    if chain_cost is None:
        raise ConfigError(f"--sweep-tree times our own target passes; {engine.target.label} runs on a server")
    tree_cost = tree_verify_cost(engine.target, max(budgets) + 1, threads=engine_threads(), refresh=refresh)
    depth = max(spec.k for spec in specs if spec.speculative)
    table_console().print(tree_cost_line(tree_cost, chain_cost, budgets, depth))
    return tree_cost


def tree_cost_line(tree_cost: VerifyCost, chain_cost: VerifyCost, budgets: list[int], depth: int) -> str:
    """One line said before the runs: what a pass over N nodes costs against one token here, and the most it can
    gain with a path of `depth` kept each round ("never pays" where that is below 1×)."""
    cells = []
    for budget in budgets:
        curve, nodes = (chain_cost, depth) if budget == 0 else (tree_cost, budget)
        ceiling = tree_ceiling(depth, nodes, curve)
        what = "chain" if budget == 0 else f"{budget} nodes"
        cells.append(f"{what} {curve.relative(nodes + 1):.2f}× one token, at best {ceiling:.2f}×"
                     + (" (never pays)" if ceiling < 1.0 else ""))
    return f"tree pass cost on this machine (k = {depth}): " + " · ".join(cells)


def sweep_rows(summary: dict, specs: list[SpecConfig], chain_cost: VerifyCost, tree_cost: VerifyCost) -> list[dict]:
    """One row per swept setting (tree_specs' order), from its overall figures in the bench's `summary`."""
    rows = []
    for spec in specs:
        if spec.label() not in summary:  # a config that ran on another backend, without the sweep
            continue
        figures = summary[spec.label()]["all"]
        curve, budget_nodes = (chain_cost, spec.k) if spec.tree == 0 else (tree_cost, spec.tree)
        rows.append({"config": spec.label(), "chain_config": spec.with_tree(0).label(), "tree": spec.tree,
                     **_pass_figures(figures, curve, spec.k, budget_nodes),
                     "speedup": figures["speedup"], "tok_per_s": figures["tok_per_s"]})
    return rows


def _pass_figures(figures: dict, curve: VerifyCost, depth: int, budget_nodes: int) -> dict:
    """Tokens and nodes per pass, the cost of `budget_nodes` against one token, the ceiling and the theory."""
    rounds = figures["decode_rounds"]
    nodes_per_pass = figures["drafted_tokens"] / rounds if rounds else 0.0
    draft_per_node = figures["draft_seconds"] / figures["drafted_tokens"] if figures["drafted_tokens"] else 0.0
    theory = speedup_on_curve(figures["decode_tokens"] / rounds, nodes_per_pass, curve, draft_per_node) \
        if rounds else None
    return {"tokens_per_pass": figures["mean_accepted_length"], "nodes_per_pass": nodes_per_pass,
            "cost_relative": curve.relative(budget_nodes + 1), "ceiling": tree_ceiling(depth, budget_nodes, curve),
            "theoretical_speedup": theory}


def print_tree_sweep(rows: list[dict], console) -> None:
    """The sweep's table, one per swept config, one row per budget."""
    from rich.markup import escape
    from rich.table import Table
    by_config: dict[str, list[dict]] = {}
    for row in rows:
        by_config.setdefault(row["chain_config"], []).append(row)
    for label, group in by_config.items():
        table = Table(title=escape(f"tree sweep: {label} (tree 0: its chain of k; cost and ceiling at N nodes)"),
                      title_justify="left")
        for column in ("tree N", "tok/pass", "nodes/pass", "cost(N)", "ceiling", "theory", "speed-up", "tok/s"):
            table.add_column(column, justify="right")
        for row in group:
            table.add_row("chain" if row["tree"] == 0 else str(row["tree"]), f"{row['tokens_per_pass']:.2f}",
                          f"{row['nodes_per_pass']:.1f}", f"{row['cost_relative']:.2f}×", f"{row['ceiling']:.2f}×",
                          _times(row["theoretical_speedup"]), _times(row["speedup"]), f"{row['tok_per_s']:.1f}")
        console.print(table)
    console.print("tok/pass: committed tokens per target pass; cost(N): a tree pass over N nodes (the chain: k "
                  "tokens) against one token, measured here; ceiling: the most that pass can gain (a k-deep path "
                  "kept every round, drafting free); theory: tok/pass over the measured pass and draft costs; "
                  "speed-up: measured against plain decoding in this run")


def _times(value) -> str:
    return "–" if value is None else f"{value:.2f}×"
