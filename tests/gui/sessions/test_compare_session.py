"""CompareState, the compare window's state machine, with no Qt: one run at a time, request ids, stragglers
of a stopped comparison dropped, a sweep's summary and best k, and the reasons a run cannot start."""

from types import SimpleNamespace

import pytest

from engine.measure.compare import comparison_events
from engine.core.config import SamplingConfig, SpecConfig, parse_spec
from engine.core.errors import ConfigError
from engine.core.events import RoundsRevised
import revised_events
from fakes import FakeEngine
from revised_events import RevisingEngine
from gui.sessions.compare import COMPARE, SWEEP, CannotStart, CompareState


def start(state, specs, kind=COMPARE, **kwargs):
    options = dict(prompt="Compare me", sampling=SamplingConfig(), max_new_tokens=12, model="default")
    options.update(kwargs)
    return state.start(specs, kind, **options)


def feed(state, request, engine=None):
    """The worker's part: every run's events, then the end."""
    engine = engine or FakeEngine()
    for index, event in comparison_events(engine, request.prompt, list(request.specs),
                                          max_new_tokens=request.max_new_tokens):
        state.advanced(request.request_id, index, event)
    return state.finished(request.request_id)


def test_a_comparison_runs_plain_first_and_every_greedy_output_is_identical():
    state = CompareState(make_request=SimpleNamespace)
    specs = [parse_spec("prompt-lookup:k=3"), parse_spec("draft-model:k=4,draft=default")]
    session, request = start(state, specs)
    assert state.running and request.specs == tuple(specs) and request.prompt == "Compare me"
    assert [run.label for run in session.runs] == ["plain decoding", "prompt-lookup:k=3",
                                                   "draft-model:k=4,draft=default"]
    with pytest.raises(CannotStart, match="running"):
        start(state, specs)
    assert feed(state, request) is session and not state.running and state.comparison is session
    rows = session.rows()
    assert [row.identical_to_plain for row in rows] == [True, True, True] and rows[0].speedup == pytest.approx(1.0)
    assert state.status(session) == "Done · 3 of 3 runs finished"


def test_a_stopped_comparisons_stragglers_are_dropped_and_ids_grow():
    state = CompareState(make_request=SimpleNamespace)
    first, request = start(state, [parse_spec("prompt-lookup:k=2")])
    events = list(comparison_events(FakeEngine(), "x", [parse_spec("prompt-lookup:k=2")], max_new_tokens=6))
    state.advanced(request.request_id, *events[0])  # the plan (what will run), then the first run's start
    state.advanced(request.request_id, *events[1])
    assert state.finished(request.request_id) is first and first.cancelled  # Stop: the worker is through
    assert first.runs[0].state == "stopped" and "Stopped" in state.status(first)
    second, again = start(state, [parse_spec("prompt-lookup:k=2")])
    assert again.request_id == request.request_id + 1
    assert state.advanced(request.request_id, *events[2]) is None  # the first one's late event
    assert state.failed(request.request_id, "late") is None and state.active is second


def test_a_sweep_gives_its_summary_and_the_best_setting():
    state = CompareState(make_request=SimpleNamespace)
    session, request = state.start_sweep(SpecConfig(method="prompt-lookup", k=4), 4, prompt="Sweep me",
                                         sampling=SamplingConfig(), max_new_tokens=20, model="default")
    assert session.kind == SWEEP and [s.label() for s in request.specs] == [f"prompt-lookup:k={k}" for k in range(1, 5)]
    assert state.best_spec() is None
    feed(state, request)
    summary = state.sweep_summary
    assert [p.k for p in summary.points] == [1, 2, 3, 4] and summary.best is not None
    assert state.best_spec() == SpecConfig(method="prompt-lookup", k=summary.best.k)
    assert f"best k = {summary.best.k}" in state.status(session)


def test_reasons_not_to_start():
    state = CompareState(make_request=SimpleNamespace)
    with pytest.raises(CannotStart, match="still loading"):
        start(state, [parse_spec("prompt-lookup:k=2")], busy="The model is still loading.")
    with pytest.raises(CannotStart, match="Type a prompt"):
        start(state, [parse_spec("prompt-lookup:k=2")], prompt="   ")
    assert not state.running
    with pytest.raises(ConfigError):
        state.start_sweep(SpecConfig(method="prompt-lookup"), 0, prompt="x", sampling=SamplingConfig(),
                          max_new_tokens=5, model="default")


def test_a_runs_rounds_revised_by_its_server_replace_the_runs_rounds():
    state = CompareState(make_request=SimpleNamespace)
    session, request = start(state, [parse_spec("remote:url=http://127.0.0.1:1")])
    revised = []
    for index, event in comparison_events(RevisingEngine(), request.prompt, list(request.specs), max_new_tokens=12):
        tokens = state.advanced(request.request_id, index, event)
        if isinstance(event, RoundsRevised):
            revised.append((index, tokens))
    state.finished(request.request_id)
    assert [index for index, _ in revised] == [0, 1]  # every run of this stream is a server's
    for run, (_, tokens) in zip(session.runs, revised):
        assert tokens == run.turn.tokens and len(run.session.tokens) == 11
        assert [t.serial for t in run.session.tokens] == list(range(11))
        stats = run.session.live.snapshot()
        assert (stats.drafted_tokens, stats.accepted_tokens) == (revised_events.DRAFTED, revised_events.ACCEPTED)
        assert [r.n_accepted for r in run.session.live.rounds] == [0, 3, 0, 2]
        assert run.turn.notes == (revised_events.NOTE,)
    assert [row.acceptance_rate for row in session.rows()][1] == pytest.approx(5 / 9)
