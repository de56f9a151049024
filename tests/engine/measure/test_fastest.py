"""The fastest-setting sweep (engine.measure.fastest): medians over repeats, the noise range, the winner, on canned
timings; and find_fastest driving a scripted engine repeat after repeat."""

from types import SimpleNamespace

import pytest

from engine.core.config import SpecConfig, parse_spec
from engine.core.errors import ConfigError
from engine.core.events import GenerationFinished, GenerationStarted
from engine.measure.fastest import FastestSweep, candidate_specs, find_fastest
from engine.core.stats import GenerationStats


def stats(tok_per_s, drafted=0, accepted=0):
    committed = 101  # 100 decode tokens after the first
    return GenerationStats(k=4, committed_tokens=committed, target_passes=committed, rounds=committed,
                           drafting_rounds=committed - 1 if drafted else 0, drafted_tokens=drafted,
                           accepted_tokens=accepted, ttft_seconds=0.0, elapsed_seconds=100 / tok_per_s,
                           draft_seconds=0.0, verify_seconds=0.0, per_position_acceptance=(),
                           accept_length_histogram=())


def done(tok_per_s, **kw):
    return GenerationFinished(stop_reason="max-new-tokens", text="x", output_ids=(1,), stats=stats(tok_per_s, **kw))


SPECS = [parse_spec("prompt-lookup:k=2"), parse_spec("prompt-lookup:k=4")]


def test_median_of_repeats_range_and_winner():
    sweep = FastestSweep(SPECS, repeats=3)
    assert [s.label() for s in sweep.runs] == ["none", "prompt-lookup:k=2", "prompt-lookup:k=4"]
    # plain 10 tok/s each repeat; k=2: 12, 30 (an outlier), 13; k=4: 14, 15, 9
    for repeat, (k2, k4) in enumerate([(12, 14), (30, 15), (13, 9)]):
        sweep.add(repeat, 0, done(10))
        sweep.add(repeat, 1, done(k2, drafted=40, accepted=20))
        sweep.add(repeat, 2, done(k4, drafted=80, accepted=20))
    result = sweep.result()
    assert result.repeats == 3
    k2 = next(r for r in result.results if r.spec.k == 2 and r.spec.speculative)
    assert k2.median == pytest.approx(1.3)  # the outlier does not win it
    assert (k2.low, k2.high) == (pytest.approx(1.2), pytest.approx(3.0))
    k4 = next(r for r in result.results if r.spec.k == 4 and r.spec.speculative)
    assert k4.median == pytest.approx(1.4)
    assert result.winner.spec.label() == "prompt-lookup:k=4"
    assert result.clear_win is False  # its slowest repeat (0.9×) is below plain
    assert "may be noise" in result.verdict() and "1.40×" in result.verdict()
    assert result.plain.median == 1.0
    assert [r.spec.label() for r in result.results][0] == "prompt-lookup:k=4"


def test_plain_wins_when_nothing_beats_it_and_a_clear_win_is_said_so():
    sweep = FastestSweep(SPECS[:1], repeats=3)
    for repeat in range(3):
        sweep.add(repeat, 0, done(10))
        sweep.add(repeat, 1, done(8))
    result = sweep.result()
    assert not result.winner.spec.speculative
    assert result.verdict().startswith("Plain decoding is fastest here")
    sweep = FastestSweep(SPECS[:1], repeats=3)
    for repeat in range(3):
        sweep.add(repeat, 0, done(10))
        sweep.add(repeat, 1, done(20 + repeat))
    result = sweep.result()
    assert result.clear_win and result.winner.median == pytest.approx(2.1)


def test_incomplete_and_cancelled_repeats_do_not_count():
    sweep = FastestSweep(SPECS, repeats=3)
    assert sweep.result() is None
    sweep.add(0, 0, done(10))
    sweep.add(0, 1, done(12))
    cancelled = GenerationFinished(stop_reason="cancelled", text="", output_ids=(), stats=stats(50))
    sweep.add(0, 2, cancelled)
    assert sweep.result() is None and sweep.runs_done == 2
    sweep.add(1, 0, done(10))
    sweep.add(1, 1, done(11))
    sweep.add(1, 2, done(12))
    assert sweep.result().repeats == 1 and sweep.total_runs == 9


def test_refusals():
    with pytest.raises(ConfigError, match="repeats must be an integer ≥ 3"):
        FastestSweep(SPECS, repeats=1)
    with pytest.raises(ConfigError, match="nothing to compare"):
        FastestSweep([SpecConfig()])
    with pytest.raises(ConfigError, match="k must be"):
        candidate_specs(["prompt-lookup"], [0])


def test_candidates_leave_out_what_cannot_run():
    specs = candidate_specs(["none", "draft-model", "prompt-lookup", "early-exit"], [2, 4], backend="llama.cpp")
    assert [s.label() for s in specs] == ["prompt-lookup:k=2", "prompt-lookup:k=4"]  # no draft, no early exit
    specs = candidate_specs(["draft-model", "early-exit"], [3], draft="small", layers=2)
    assert [s.label() for s in specs] == ["draft-model:k=3,draft=small", "early-exit:k=3,layers=2"]


def test_methods_that_branch_also_run_trees_beside_their_chains():
    specs = candidate_specs(["prompt-lookup", "ngram-mod"], [2, 4], trees=[0, 8])
    assert [s.label() for s in specs] == ["prompt-lookup:k=2", "prompt-lookup:k=4", "prompt-lookup:k=2,tree=8",
                                          "prompt-lookup:k=4,tree=8", "ngram-mod:k=2", "ngram-mod:k=4"]
    with pytest.raises(ConfigError, match="tree must be a whole number"):
        candidate_specs(["prompt-lookup"], [2], trees=[500])


class CannedEngine:
    """Plain decoding at 10 tok/s; prompt lookup at 10·k/2 tok/s, whatever the repeat."""

    target = SimpleNamespace(backend="llama.cpp")

    def __init__(self):
        self.calls = []

    def release(self):
        pass

    def generate(self, prompt, *, spec, sampling, max_new_tokens, cancel, system):
        self.calls.append(spec.label())
        yield GenerationStarted(spec_label=spec.label(), method=spec.method, k=spec.k, model="m", draft=None,
                                device="cpu", dtype="float32", greedy=True, prompt_tokens=3,
                                reused_prefix_tokens=0, max_new_tokens=max_new_tokens, warnings=())
        yield done(10 if not spec.speculative else 5 * spec.k)


def test_find_fastest_runs_every_repeat_plain_first():
    engine = CannedEngine()
    seen = []
    result = find_fastest(engine, "hi", SPECS, repeats=3, on_run=lambda r, i, _f: seen.append((r, i)))
    assert engine.calls == ["none", "prompt-lookup:k=2", "prompt-lookup:k=4"] * 3
    assert seen == [(r, i) for r in range(3) for i in range(3)]
    assert result.winner.spec.label() == "prompt-lookup:k=4" and result.winner.median == pytest.approx(2.0)
    assert result.as_dict()["winner"] == "prompt-lookup:k=4"


def test_a_setting_moved_to_another_backend_is_judged_against_plain_there_and_ranked_against_the_fastest():
    """Early exit moved to transformers (5 tok/s plain there) at 6 tok/s: 1.2× plain on transformers, but
    0.12× plain on llama.cpp (50 tok/s); prompt lookup on llama.cpp at 60 wins, and the verdict says both."""
    moved = parse_spec("early-exit:k=3,layers=8,backend=transformers")
    sweep = FastestSweep([SPECS[0], moved], repeats=3)
    from engine.measure.baselines import ComparisonPlan
    sweep.replan(ComparisonPlan.of(sweep.specs, "llama.cpp"))
    assert [s.label() for s in sweep.runs] == ["none", "none:backend=transformers", "prompt-lookup:k=2",
                                                moved.label()]
    for repeat in range(3):
        for index, tok_per_s in enumerate((50, 5, 60, 6)):
            sweep.add(repeat, index, done(tok_per_s))
    result = sweep.result()
    early = next(r for r in result.results if r.spec == moved)
    assert early.median == pytest.approx(1.2) and early.baseline == "plain on transformers"
    assert early.median_vs_fastest_plain == pytest.approx(0.12)
    assert result.winner.spec == SPECS[0] and result.several_backends
    assert result.plain.spec == SpecConfig()  # the fastest plain decoding is the one to beat
    verdict = result.verdict()
    assert "prompt-lookup:k=2 at 1.20× plain decoding on llama.cpp" in verdict
    assert "1.20× the fastest plain decoding here (plain on llama.cpp)" in verdict
