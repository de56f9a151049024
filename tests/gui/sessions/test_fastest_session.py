"""FastestState without Qt: its request ids never meet the compare window's, repeats follow one another, a
refused method is left out with its reason, a stop before a repeat finished gives no answer."""

from types import SimpleNamespace

import pytest

from engine.core.config import SamplingConfig
from engine.core.errors import ConfigError
from engine.core.events import GenerationFinished
from engine.core.stats import GenerationStats
from engine.measure.fastest import sweep_methods
from gui.sessions.fastest import REQUEST_ID_BASE, FastestState, Plan

PLAN = Plan(model="default", prompt="Write a haiku", sampling=SamplingConfig(), max_new_tokens=16)


def finished(tok_per_s, stop_reason="max-new-tokens"):
    stats = GenerationStats(k=2, committed_tokens=11, target_passes=11, rounds=11, drafting_rounds=0,
                            drafted_tokens=0, accepted_tokens=0, ttft_seconds=0.0, elapsed_seconds=10 / tok_per_s,
                            draft_seconds=0.0, verify_seconds=0.0, per_position_acceptance=(),
                            accept_length_histogram=())
    return GenerationFinished(stop_reason=stop_reason, text="x", output_ids=(1,), stats=stats)


def feed(state, request, speeds):
    for index, speed in enumerate(speeds):
        assert state.advanced(request.request_id, index, finished(speed))
    return state.finished(request.request_id)


def test_repeats_follow_one_another_and_give_the_answer():
    state = FastestState(make_request=SimpleNamespace)
    request = state.start(PLAN, "2, 4", 3, draft=None)
    swept = [m.name for m in sweep_methods() if not m.needs_draft]  # no draft given: the draft-free ones
    assert swept[:2] == ["prompt-lookup", "early-exit"] and request.request_id >= REQUEST_ID_BASE
    assert [s.label() for s in request.specs] == [f"{name}:k={k}" for name in swept for k in (2, 4)]
    assert not state.advanced(1, 0, finished(10))  # the compare window's request 1: not ours
    speeds = [10, 15, 12, 9, 8] + [7] * (len(request.specs) - 4)  # plain first; prompt-lookup:k=2 fastest
    for repeat in range(3):
        assert state.running and state.repeat == repeat
        nxt = feed(state, request, speeds)
        assert (nxt is None) == (repeat == 2)
        request = nxt or request
    assert state.winner().label() == "prompt-lookup:k=2" and state.status() == "Done · 3 of 3 repeats"
    with pytest.raises(ConfigError, match="busy"):
        state.start(PLAN, "2", 3, draft=None, busy="busy")


def test_tree_budgets_add_trees_of_the_methods_that_branch():
    state = FastestState(make_request=SimpleNamespace)
    request = state.start(PLAN, "4", 3, draft=None, trees_text="8, 0, 8")
    labels = [s.label() for s in request.specs]
    assert "prompt-lookup:k=4,tree=8" in labels and "prompt-lookup:k=4" in labels
    assert not any("tree" in label for label in labels if label.startswith("ngram-mod"))
    with pytest.raises(ConfigError, match="tree budgets must be whole numbers"):
        FastestState(make_request=SimpleNamespace).start(PLAN, "4", 3, draft=None, trees_text="eight")


def test_a_refused_method_is_left_out_and_a_stop_gives_no_answer():
    state = FastestState(make_request=SimpleNamespace)
    request = state.start(PLAN, "2", 3, draft=None)
    retry = state.failed(request.request_id, "early-exit:k=2: method early-exit needs the transformers backend")
    left = [f"{m.name}:k=2" for m in sweep_methods() if not m.needs_draft and m.name != "early-exit"]
    assert [s.label() for s in retry.specs] == left and retry.request_id == request.request_id + 1
    assert "Left out: early exit (self-speculative): method early-exit needs" in state.verdict()
    assert state.advanced(retry.request_id, 0, finished(10))
    assert state.advanced(retry.request_id, 1, finished(20, stop_reason="cancelled"))
    assert state.finished(retry.request_id) is None and state.result is None and not state.running
    assert state.status() == "Stopped · 0 of 3 repeats" and state.winner() is None
    request = state.start(PLAN, "2", 3, draft=None)
    assert state.failed(request.request_id, "model 'x' is not loaded") is None and not state.running
