"""Comparison summary, first difference and the k sweep's choice, on canned figures."""

from types import SimpleNamespace

import pytest

from engine.measure.baselines import ComparisonPlan
from engine.measure.divergence import Divergence
from engine.measure.compare import (PLAN_INDEX, comparison_events, SweepPoint, best_k, first_difference, pooled_alpha_and_cost, summary_rows,
                            sweep_points, sweep_specs, sweep_summary, theoretical_curve, with_plain_first)
from engine.core.config import SpecConfig, parse_spec
from engine.core.events import GenerationFinished
from engine.core.stats import GenerationStats, speedup_from_acceptance


def stats(committed, elapsed, drafted=0, accepted=0, passes=None):
    return GenerationStats(k=4, committed_tokens=committed, target_passes=passes or committed, rounds=passes or committed,
                           drafting_rounds=(passes or committed) - 1 if drafted else 0, drafted_tokens=drafted,
                           accepted_tokens=accepted, ttft_seconds=0.0, elapsed_seconds=elapsed,
                           draft_seconds=0.0, verify_seconds=elapsed, per_position_acceptance=(),
                           accept_length_histogram=())


def finished(ids, text, s):
    return GenerationFinished(stop_reason="max-new-tokens", text=text, output_ids=tuple(ids), stats=s)


def test_first_difference():
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 9, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2
    assert first_difference([], [5]) == 0


def test_plain_is_always_first_and_never_twice():
    specs = [parse_spec("prompt-lookup:k=3"), SpecConfig(), parse_spec("early-exit:k=2"), parse_spec("none:k=7")]
    ordered = with_plain_first(specs)
    assert [s.label() for s in ordered] == ["none", "prompt-lookup:k=3", "early-exit:k=2"]
    assert ordered[0] == SpecConfig()  # a plain spec with another k is the same baseline: it does not run twice
    assert with_plain_first([]) == [SpecConfig()]


def test_summary_rows_speedup_identity_and_planted_difference():
    specs = [parse_spec("prompt-lookup:k=3"), parse_spec("early-exit:k=2")]
    runs = {
        0: finished([1, 2, 3, 4, 5], "a b c d e", stats(5, 1.0)),
        1: finished([1, 2, 3, 4, 5], "a b c d e", stats(5, 0.5, drafted=8, accepted=4, passes=3)),
        2: finished([1, 2, 7, 4, 5], "a b X d e", stats(5, 2.0, drafted=4, accepted=1, passes=4)),
    }
    rows = summary_rows(specs, runs, greedy=True)
    assert [r.label for r in rows] == ["none", "prompt-lookup:k=3", "early-exit:k=2"]
    assert rows[0].speedup == pytest.approx(1.0)
    assert rows[1].speedup == pytest.approx(2.0)
    assert rows[1].identical_to_plain is True and rows[1].first_difference is None and rows[1].diff == ""
    assert rows[2].identical_to_plain is False
    assert rows[2].first_difference == 2
    assert "-c" in rows[2].diff and "+X" in rows[2].diff
    assert rows[1].efficiency == pytest.approx(rows[1].speedup / rows[1].theoretical_speedup)
    assert rows[1].as_dict()["identical_to_plain"] is True


def test_sampling_runs_make_no_identity_claim():
    runs = {0: finished([1], "a", stats(1, 1.0)), 1: finished([2], "b", stats(1, 1.0))}
    rows = summary_rows([parse_spec("prompt-lookup:k=3")], runs, greedy=False)
    assert rows[1].identical_to_plain is None


def test_best_k_and_theoretical_curve():
    points = [SweepPoint(1, 1.10, 0.6, 0.05), SweepPoint(2, 1.30, 0.6, 0.05), SweepPoint(3, 1.30, 0.6, 0.05),
              SweepPoint(4, 1.20, 0.6, 0.05)]
    assert best_k(points).k == 2  # a tie goes to the smaller k
    alpha, cost = pooled_alpha_and_cost(points)
    assert alpha == pytest.approx(0.6) and cost == pytest.approx(0.05)
    curve = theoretical_curve(alpha, cost, [1, 2, 3, 4])
    assert curve == [pytest.approx(speedup_from_acceptance(0.6, k, 0.05)) for k in [1, 2, 3, 4]]
    assert curve[0] == pytest.approx((1 + 0.6) / (1 + 0.05))
    assert best_k([]) is None


def test_sweep_specs_and_summary_from_rows():
    specs = sweep_specs([SpecConfig(), parse_spec("prompt-lookup:k=9,ngram_max=4,ngram_min=2")], [1, 2, 3])
    assert [s.label() for s in specs] == [f"prompt-lookup:k={k},ngram_max=4,ngram_min=2" for k in (1, 2, 3)]
    runs = {0: finished([1, 2, 3, 4], "a b c d", stats(4, 1.0))}
    for index, (elapsed, accepted) in enumerate([(0.8, 2), (0.5, 5), (0.6, 6)], 1):
        runs[index] = finished([1, 2, 3, 4], "a b c d", stats(4, elapsed, drafted=8, accepted=accepted, passes=3))
    del runs[2]  # a run that did not finish has no point
    points = sweep_points(summary_rows(specs, runs, greedy=True))
    assert [p.k for p in points] == [1, 3]
    assert points[0].speedup == pytest.approx(1 / 0.8) and points[1].acceptance_rate == pytest.approx(6 / 8)
    summary = sweep_summary("prompt-lookup", reversed(points))
    assert [p.k for p in summary.points] == [1, 3] and summary.best.k == 3
    assert summary.alpha == pytest.approx((2 / 8 + 6 / 8) / 2)
    assert list(summary.theory) == theoretical_curve(summary.alpha, summary.cost_ratio, [1, 3])
    assert summary.as_dict()["best_k"] == 3 and len(summary.as_dict()["points"]) == 2
    assert sweep_summary("early-exit", []).best is None


MOVED = parse_spec("early-exit:k=3,layers=8,backend=transformers")  # what auto does to early exit on a GGUF


def test_the_plan_runs_plain_decoding_on_every_backend_used_and_only_there():
    plan = ComparisonPlan.of([parse_spec("prompt-lookup:k=5"), MOVED], "llama.cpp")
    assert [s.label() for s in plan.runs] == ["none", "none:backend=transformers", "prompt-lookup:k=5", MOVED.label()]
    assert [plan.baseline_index(i) for i in range(4)] == [0, 1, 0, 1]
    assert plan.run_label(1) == "plain decoding on transformers" and plan.run_label(2) == "prompt-lookup:k=5"
    only_moved = ComparisonPlan.of([MOVED], "llama.cpp")  # nothing runs on llama.cpp: no plain run there
    assert [s.label() for s in only_moved.runs] == ["none:backend=transformers", MOVED.label()]
    assert only_moved.run_label(0) == "plain decoding"
    # a backend named explicitly that is the loaded one is the same baseline
    same = ComparisonPlan.of([parse_spec("prompt-lookup:k=5,backend=llama.cpp")], "llama.cpp")
    assert [s.label() for s in same.runs] == ["none", "prompt-lookup:k=5,backend=llama.cpp"]


class _Canned:
    """An engine on one backend: every setting outputs `ids` at `tok_per_s`."""

    def __init__(self, backend, ids, speeds):
        self.target = SimpleNamespace(backend=backend)
        self.ids, self.speeds, self.calls = ids, speeds, []

    def release(self):
        pass

    def prompt_ids(self, prompt, system=None):
        raise AssertionError("identical outputs need no diagnosis")

    def generate(self, prompt, *, spec, **_options):
        self.calls.append(spec.label())
        speed = self.speeds[spec.method]
        yield finished(self.ids, "x", stats(20, 20 / speed))


def test_a_moved_row_is_judged_against_plain_on_its_own_backend_never_the_other():
    """Plain on llama.cpp (Q4_1) and on transformers (bf16) differ in their tokens and speed; early exit on
    transformers equals plain there: identical, no MISMATCH, its speed-up against transformers' plain."""
    from engine.runtime import BackendRouter
    llama = _Canned("llama.cpp", [1, 9, 9], {"none": 45.0, "prompt-lookup": 60.0})
    hf = _Canned("transformers", [1, 2, 3], {"none": 5.0, "early-exit": 5.6})
    router = BackendRouter(llama, lambda backend: hf)
    events = list(comparison_events(router, "hi", [parse_spec("prompt-lookup:k=5"), MOVED]))
    index, plan = events[0]
    assert index == PLAN_INDEX and plan.runs[1] == SpecConfig(backend="transformers")
    assert llama.calls == ["none", "prompt-lookup:k=5"] and hf.calls == ["none:backend=transformers", MOVED.label()]
    assert not any(isinstance(event, Divergence) for _, event in events)  # nothing differs from its own plain
    done = {i: e for i, e in events[1:] if isinstance(e, GenerationFinished)}
    started = {1: SimpleNamespace(device="cpu", dtype="bfloat16")}
    rows = {row.label: row for row in summary_rows([], done, greedy=True, plan=plan, started=started)}
    early = rows[MOVED.label()]
    assert early.equality == "identical" and early.speedup == pytest.approx(5.6 / 5.0)
    assert early.baseline == "plain on transformers · cpu · bfloat16"
    assert early.vs_fastest_plain == pytest.approx(5.6 / 45.0)  # the cross-backend picture, apart
    assert rows["prompt-lookup:k=5"].speedup == pytest.approx(60 / 45) and rows["none"].is_baseline
    assert rows["none:backend=transformers"].speedup == pytest.approx(1.0)


def test_a_row_whose_own_plain_run_did_not_finish_says_so_and_borrows_no_other():
    plan = ComparisonPlan.of([parse_spec("prompt-lookup:k=5"), MOVED], "llama.cpp")
    done = {0: finished([1, 9, 9], "a", stats(3, 0.1)), 2: finished([1, 9, 9], "a", stats(3, 0.05)),
            3: finished([1, 2, 3], "b", stats(3, 1.0))}  # plain on transformers (run 1) failed
    rows = {row.label: row for row in summary_rows([], done, greedy=True, plan=plan)}
    early = rows[MOVED.label()]
    assert early.speedup is None and early.identical_to_plain is None and early.divergence is None
    assert early.baseline == "plain on transformers (not measured: that run did not finish)"
    assert early.equality == "not compared (its plain decoding did not finish)"
    assert early.vs_fastest_plain == pytest.approx(0.1)  # the cross-backend figure still stands, apart
    assert rows["prompt-lookup:k=5"].equality == "identical"
