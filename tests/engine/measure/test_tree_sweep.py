"""`bench --sweep-tree` (engine/measure/tree_sweep.py) and the cost of tree passes (engine/measure/verify_cost.py):
the budgets parsed, a method that drafts chains only refused with its reason, one row per budget with its
columns on a runner with no model (tree_testkit's TableRunner), the theory and the ceiling on known figures (a
tree of 60 never pays where 4 tokens cost 2.5× one), the tree-pass curve measured on the tiny model, cached and
read back by the engine's DraftProvider, and the whole command on the tiny model."""

from __future__ import annotations

import functools
import json

import pytest
import torch
from rich.console import Console
from tree_testkit import FixedSource, TableRunner, TableTarget

from engine.core.config import SamplingConfig, SpecConfig
from engine.core.drafting import Drafter, Proposal
from engine.core.engine import Engine
from engine.core.errors import ConfigError
from engine.core.methods import methods
from engine.core.stats import VerifyCost, speedup_on_curve, tree_ceiling
from engine.measure import tree_sweep, verify_cost
from engine.measure.bench import run_benchmark, summarise
from engine.measure.prompts import Prompt
from engine.models import cost_cache

BUDGETS = [0, 4, 8]
STEEP = VerifyCost((1.0, 1.5, 2.0, 2.5))  # 4 tokens cost 2.5× one (a CPU), and so on along its last step
FLAT = VerifyCost((1.0,) * 4)  # a GPU: as many tokens as you like for the price of one


def branching_method() -> str:
    """A registered method that drafts trees and needs no draft model."""
    return next(m.name for m in methods() if m.speculative and m.branches and not m.needs_draft)


def test_budgets_are_parsed_sorted_and_checked():
    assert tree_sweep.parse_budgets("16,0,4,8,4") == [0, 4, 8, 16]
    for bad in ("four", "", "0,200", "-1"):
        with pytest.raises(ConfigError):
            tree_sweep.parse_budgets(bad)


def test_a_method_that_drafts_chains_only_is_refused_with_the_reason():
    chains_only = next(m.name for m in methods() if m.speculative and not m.branches and not m.needs_draft)
    with pytest.raises(ConfigError, match=f"method {chains_only} drafts one chain a round, it does not branch"):
        tree_sweep.tree_specs([SpecConfig(method=chains_only, k=3)], BUDGETS)
    with pytest.raises(ConfigError, match="needs a --config of a method that drafts trees"):
        tree_sweep.tree_specs([SpecConfig()], BUDGETS)
    specs = tree_sweep.tree_specs([SpecConfig(method=branching_method(), k=3)], BUDGETS)
    assert [spec.tree for spec in specs] == BUDGETS and len({spec.label() for spec in specs}) == 3


def test_the_theory_and_the_ceiling_on_known_figures():
    # 2.5 tokens a pass over 8 nodes on the steep curve (cost(9) = 2.5 + 5 × 0.5 = 5), drafting 1 % of a pass
    # a node: 2.5 / (5 + 0.08)
    assert speedup_on_curve(2.5, 8, STEEP, 0.01) == pytest.approx(2.5 / 5.08)
    assert speedup_on_curve(2.5, 8, FLAT, 0.0) == pytest.approx(2.5)
    # a 4-deep path kept whole every round: 5 tokens a pass at best
    assert tree_ceiling(4, 60, STEEP) == pytest.approx(5 / (2.5 + 0.5 * 57))
    assert tree_ceiling(4, 60, STEEP) < 1
    assert tree_ceiling(4, 60, FLAT) == pytest.approx(5.0)
    assert tree_ceiling(4, 2, FLAT) == pytest.approx(3.0)  # 2 nodes keep at most 2
    line = tree_sweep.tree_cost_line(STEEP, STEEP, [0, 4, 60], depth=4)
    chain, four, sixty = line.split(" · ")
    assert "never pays" in sixty and "never pays" not in four and "never pays" not in chain
    assert "60 nodes 31.00× one token" in sixty


class NoisyTopTwo(Drafter):
    """Drafts from a noisy copy of the target's table: each node's two likeliest children, level by level, up to
    the budget and k deep (so its first guess is sometimes wrong and the sibling is kept)."""

    name = "noisy-top-two"
    free_to_propose = False

    def __init__(self, runner: TableRunner) -> None:
        self.runner = runner
        self.table = runner.table + torch.randn(runner.table.shape, generator=torch.Generator().manual_seed(9)) * 2

    def _row(self, context: list[int]) -> torch.Tensor:
        return self.table[context[-2] * self.runner.vocab + context[-1]]

    def propose(self, context_ids, k):
        context, ids = list(context_ids), []
        for _ in range(k):
            ids.append(int(self._row(context).argmax()))
            context.append(ids[-1])
        return Proposal(ids)

    def propose_tree(self, context_ids, k, budget):
        ids, parents, frontier = [], [], [(-1, list(context_ids))]
        for _ in range(k):
            level = []
            for parent, context in frontier:
                for token in self._row(context).argsort(descending=True)[:2].tolist():
                    if len(ids) < budget:
                        ids.append(token)
                        parents.append(parent)
                        level.append((len(ids) - 1, context + [token]))
            frontier = level
        return Proposal(ids, None, parents=tuple(parents))


class LetterEngine(Engine):
    """An Engine whose prompt's ids are its letters (the table target has no chat template)."""

    def prompt_ids(self, conversation, system=None):
        return [ord(c) % self.target.runner.vocab for c in conversation]


class LocalTable(TableTarget):
    backend = "transformers"  # judged as a local target's rows are (its plain decoding, its diagnosis)


def table_engine() -> LetterEngine:
    runner = TableRunner(vocab=12, seed=3)
    drafter = NoisyTopTwo(runner)

    return LetterEngine(LocalTable(runner), FixedSource(drafter))


def test_the_sweep_prints_one_row_per_budget_with_its_columns():
    specs = tree_sweep.tree_specs([SpecConfig(method=branching_method(), k=3)], BUDGETS)
    prompts = [Prompt("a", "x", "abcab"), Prompt("b", "y", "hello")]
    results = run_benchmark(table_engine(), prompts, specs, 24, SamplingConfig())
    summary = summarise(results, False, None, STEEP)
    for spec in specs:  # greedy trees commit exactly plain decoding's tokens
        assert summary[spec.label()]["all"]["identical_to_none"] == len(prompts)
    rows = tree_sweep.sweep_rows(summary, specs, STEEP, FLAT)
    assert [row["tree"] for row in rows] == BUDGETS
    chain, four, eight = rows
    assert chain["nodes_per_pass"] <= 3 and 3 < eight["nodes_per_pass"] <= 8 and four["nodes_per_pass"] <= 4
    assert chain["cost_relative"] == pytest.approx(STEEP.relative(4)) and eight["cost_relative"] == 1.0
    assert eight["ceiling"] == pytest.approx(4.0) and chain["ceiling"] == pytest.approx(4 / 2.5)
    figures = summary[specs[2].label()]["all"]
    expected = speedup_on_curve(figures["decode_tokens"] / figures["decode_rounds"], eight["nodes_per_pass"], FLAT,
                                figures["draft_seconds"] / figures["drafted_tokens"])
    assert eight["theoretical_speedup"] == pytest.approx(expected)
    assert all(row["speedup"] is not None and row["tokens_per_pass"] > 1 for row in rows)
    console = Console(record=True, width=200)
    tree_sweep.print_tree_sweep(rows, console)
    text = console.export_text()
    for column in ("tree N", "tok/pass", "nodes/pass", "cost(N)", "ceiling", "theory", "speed-up", "tok/s"):
        assert column in text
    body = [line for line in text.splitlines() if line.startswith("│")]  # the rows (the header is ┃)
    assert [line.split("│")[1].strip() for line in body] == ["chain", "4", "8"]


def test_the_tree_pass_curve_is_measured_cached_and_read_by_the_engine(tiny_model, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    runner = tiny_model.new_runner()
    measured = verify_cost.measure_tree(runner, tiny_model.vocab_size, 3, repeats=1)
    assert measured.n_max == 3 and all(s > 0 for s in measured.seconds) and runner.ids == []
    monkeypatch.setattr(verify_cost, "measure_tree", lambda *args: measured)  # measured once is enough
    cost = verify_cost.tree_verify_cost(tiny_model, 3, threads=1)
    assert cost == measured
    path = cost_cache.cache_file(tiny_model, 1, tree=True)
    assert path.is_file() and path.name.endswith("-1t-tree.json") and path != cost_cache.cache_file(tiny_model, 1)
    assert cost_cache.cached_verify_cost(tiny_model, 3, threads=1, tree=True) == cost
    assert cost_cache.cached_verify_cost(tiny_model, 3, threads=1) is None  # the chain's curve is another
    from engine.runtime import DraftProvider
    monkeypatch.setattr("engine.runtime.engine_threads", lambda: 1)
    provider = DraftProvider(tiny_model)
    assert provider.tree_curve(2) == cost and provider.tree_curve(8) is None  # never measured that far


def test_the_tree_pass_of_a_chains_only_target_is_refused(monkeypatch):
    class ChainsOnly(TableRunner):
        def tree_refusal(self):
            return "it keeps a recurrent state"

    class Model:
        label, vocab_size = "chains", 12

        def new_runner(self):
            return ChainsOnly()

    monkeypatch.setattr(verify_cost, "cache_file", lambda *args: None)  # a model with no file: nothing cached
    monkeypatch.setattr(verify_cost, "read_curve", lambda *args: None)
    with pytest.raises(ConfigError, match="can't verify a token tree in one pass: it keeps a recurrent state"):
        verify_cost.tree_verify_cost(Model(), 5, threads=1)


def test_bench_sweep_tree_on_the_tiny_model(tiny_dir, tmp_path, monkeypatch, capsys):
    from engine.cli.main import main
    monkeypatch.setenv("SPECSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    for name in ("measure", "measure_tree"):  # one repeat of each size is enough here
        monkeypatch.setattr(verify_cost, name, functools.partial(getattr(verify_cost, name), repeats=1))
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "Count: one two three, one two three, one two"}))
    out_json = tmp_path / "out.json"
    assert main(["bench", "--model", str(tiny_dir), "--backend", "transformers", "--prompts", str(prompts),
                 "--max-new-tokens", "8", "--config", f"{branching_method()}:k=2", "--sweep-tree", "0,3",
                 "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert "tree pass cost on this machine (k = 2)" in out and "tree sweep:" in out
    sweep = json.loads(out_json.read_text())["tree_sweep"]
    assert sweep["budgets"] == [0, 3] and [row["tree"] for row in sweep["rows"]] == [0, 3]
    assert len(sweep["tree_cost"]["seconds"]) == 4
