"""ChatSession, the chat's state machine, with no Qt at all: states, request ids, stragglers of a stopped
request, the baseline, failures and the history writes; a server's rounds revised at the end of its reply."""

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from engine.core.config import SamplingConfig, SpecConfig
from engine.core.events import GenerationFinished, GenerationStarted, RoundsRevised, RoundVerified, TokenStatus
import revised_events
from fakes import FakeEngine
from gui.sessions.baselines import Baseline, baseline_key
from gui.sessions.chat import (GENERATING, IDLE, LOADING, MEASURING, MIN_BASELINE_TOKENS, NOT_LOADED, ChatSession,
                              Settings)
from gui.sessions.purpose import Purpose
from gui.persistence.recorder import HistoryRecorder, turns_from_conversation
from gui.persistence.records import COMPLETE, STREAMING
from gui.persistence.replay import saved_run
from gui.persistence.store import HistoryStore

ROOT = Path(__file__).resolve().parents[3]
INFO = SimpleNamespace(requested="default", name="fake", device="cpu", dtype="float32", backend="transformers",
                       describe=lambda: "fake · cpu")


def settings(method="draft-model", k=4, **spec):
    if method == "draft-model":
        spec.setdefault("draft", "default")
    return Settings(model="default", spec=SpecConfig(method=method, k=k, **spec), sampling=SamplingConfig(),
                    max_new_tokens=24, system_prompt="")


def loaded(store=None) -> ChatSession:
    session = ChatSession(HistoryRecorder(store), make_request=SimpleNamespace)
    assert session.wants_load("default") == "default"
    session.model_loaded(INFO)
    return session


def run(session: ChatSession, request, engine=None):
    """Feed the engine's events for `request` back to the session; returns the finish outcome."""
    engine = engine or FakeEngine()
    outcome = None
    for event in engine.generate(request.conversation, spec=request.spec, max_new_tokens=request.max_new_tokens):
        if isinstance(event, GenerationStarted):
            session.on_started(request.request_id, event)
        elif isinstance(event, RoundVerified):
            session.on_round(request.request_id, event)
        elif isinstance(event, GenerationFinished):
            outcome = session.on_finished(request.request_id, event)
    return outcome


def test_states_follow_loading_sending_and_the_end_of_a_reply():
    session = ChatSession(HistoryRecorder(None), make_request=SimpleNamespace)
    assert session.state == NOT_LOADED and session.send("hi", settings(), "default") is None
    assert session.wants_load("  ") == "default" and session.state == LOADING
    assert session.wants_load("default") is None  # already loading it
    session.model_loaded(INFO)
    assert session.state == IDLE and session.wants_load("default") is None  # loaded already
    assert session.wants_load("default", force=True) == "default"  # a new device: load again
    session.model_loaded(INFO)
    request = session.send("  hi  ", settings(), "default")
    assert session.state == GENERATING and request.purpose is Purpose.CHAT and request.model == "default"
    assert request.conversation == [{"role": "user", "content": "hi"}]
    assert session.send("again", settings(), "default") is None  # one request at a time
    assert session.busy_reason() is not None
    outcome = run(session, request)
    assert session.state == IDLE and outcome.purpose is Purpose.CHAT and outcome.turn.text
    assert outcome.status.startswith("Done · 24 tokens") and "acceptance" in outcome.status
    assert session.settings_in_effect.spec.label() == "draft-model:k=4,draft=default"
    assert session.busy_reason() is None


def test_request_ids_grow_and_a_stopped_requests_stragglers_are_dropped():
    session = loaded()
    first = session.send("one", settings(), "default")
    events = list(FakeEngine().generate(first.conversation, spec=first.spec, max_new_tokens=8))
    session.on_started(first.request_id, events[0])
    assert session.abandon("cancelled") and session.state == IDLE
    session.new_chat()
    second = session.send("two", settings(), "default")
    assert second.request_id == first.request_id + 1
    # the first request's later events arrive after the second went out: none of them counts
    assert session.on_round(first.request_id, events[1]) is None
    assert session.on_finished(first.request_id, events[-1]) is None
    assert session.on_failed(first.request_id, "late") is None
    assert session.state == GENERATING and [t.role for t in session.turns] == ["user"]
    assert run(session, second).turn.text


def test_a_plain_reply_and_a_hidden_measurement_both_give_the_baseline():
    session = loaded()
    assert session.baseline() is None
    outcome = run(session, session.send("hi", settings("none"), "default"))
    first = session.baseline()
    assert first.tok_per_s == pytest.approx(outcome.turn.stats.tok_per_s)
    assert session.figures().speedup is None  # a plain reply is the reference, not "0.80×" of itself
    assert session.finish_record(outcome.turn)["speedup"] is None
    reply = run(session, session.send("more", settings(), "default"))
    figures = session.figures()
    assert figures.speedup == pytest.approx(reply.turn.stats.tok_per_s / first.tok_per_s)
    record = session.finish_record(reply.turn)
    assert record["speedup"] == pytest.approx(figures.speedup) and record["committed_tokens"] == 24
    # another plain reply does not move the baseline: it is measured once
    run(session, session.send("plain again", settings("none"), "default"))
    assert session.baseline() == first
    # the hidden run: plain decoding of the last user message, not part of the chat; it measures again
    turns_before = len(session.turns)
    request = session.baseline_request(SamplingConfig(), "default")
    assert request.purpose is Purpose.BASELINE and session.state == MEASURING and request.spec.method == "none"
    assert request.conversation[-1] == {"role": "user", "content": "plain again"} and request.max_new_tokens >= 32
    outcome = run(session, request)
    assert outcome.purpose is Purpose.BASELINE and outcome.baseline == pytest.approx(session.baseline().tok_per_s)
    assert session.baseline().measured_at >= first.measured_at
    assert len(session.turns) == turns_before and outcome.status.startswith("Plain decoding:")


def test_one_baseline_per_model_device_and_dtype_kept_over_new_chats_and_runs():
    session = loaded()
    request = session.baseline_request(SamplingConfig(), "default")
    run(session, request)
    measured = session.baseline()
    session.new_chat()
    assert session.baseline() == measured  # New chat and the next reply use the same figure
    reply = run(session, session.send("hi", settings(), "default"))
    assert session.figures().speedup == pytest.approx(reply.turn.stats.tok_per_s / measured.tok_per_s)
    assert measured.describe().startswith(f"{measured.tok_per_s:.1f} tok/s, measured ")
    # another dtype of the same model is another baseline
    session.model_loaded(SimpleNamespace(requested="default", name="fake", device="cpu", dtype="bfloat16",
                                         backend="transformers"))
    assert session.baseline() is None
    # a later run remembers them (gui.persistence.settings stores them by key), its own measurement wins
    later = loaded()
    later.remember_baselines({baseline_key(INFO): {"tok_per_s": measured.tok_per_s, "measured_at": 5.0},
                              "broken": {"tok_per_s": "x"}})
    assert later.baseline() == Baseline(measured.tok_per_s, 5.0)


def test_a_measurement_too_short_to_count_is_no_baseline():
    session = loaded()
    request = session.baseline_request(SamplingConfig(), "default")
    assert request.conversation[-1]["content"]  # no message yet: a stock prompt
    events = list(FakeEngine().generate(request.conversation, spec=request.spec,
                                        max_new_tokens=MIN_BASELINE_TOKENS - 1))
    session.on_started(request.request_id, events[0])
    outcome = session.on_finished(request.request_id, events[-1])
    assert outcome.baseline is None and "stopped before" in outcome.status and session.baseline() is None


def test_a_failure_before_any_token_gives_the_message_back():
    session = loaded()
    request = session.send("keep me", settings(), "default")
    outcome = session.on_failed(request.request_id, "the draft's tokenizer differs")
    assert outcome.restored_text == "keep me" and session.turns == [] and session.state == IDLE
    assert outcome.status == "Refused: the draft's tokenizer differs"


def test_history_is_written_as_the_reply_arrives(tmp_path):
    store = HistoryStore(tmp_path / "history.sqlite3")
    try:
        session = loaded(store)
        run(session, session.send("hello there", settings(), "default"))
        conversation = store.load_conversation(session.conversation_id)
        user, reply = conversation.messages
        assert user.content == "hello there" and user.settings["method"] == "draft-model"
        assert reply.content == session.turns[-1].text and len(reply.rounds) > 1
        session.new_chat()
        assert session.conversation_id is None and session.turns == []
        session.open_saved(conversation.id, [], [])
        assert session.conversation_id == conversation.id
    finally:
        store.close()


def test_the_session_imports_no_qt():
    code = ("import sys, gui.sessions.chat, gui.sessions.session_model, gui.sessions.loading, gui.sessions.forks, "
            "gui.sessions.baselines, gui.sessions.purpose; assert 'PySide6' not in sys.modules, sys.modules.keys()")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_a_purpose_keeps_its_words():
    assert [p.value for p in Purpose] == ["chat", "baseline"]


def test_this_sessions_safety_answers_override_the_remembered_ones():
    session = loaded()
    stored = {"remote-code": {"a": True, "b": False, "junk": "yes"}, "pickle": {"c": True}}
    assert session.consent("remote-code", "a", stored["remote-code"]["a"]) is True
    session.answer_consent("remote-code", "a", False)
    session.answer_consent("pickle", "d", False)
    answers = session.consent_answers(stored)
    assert answers.remote_code_allowed == frozenset() and answers.remote_code_refused == {"a", "b"}
    assert answers.pickle_allowed == {"c"} and answers.pickle_refused == {"d"}
    assert session.consent("remote-code", "a", True) is False and session.consent("pickle", "z", None) is None


def test_the_measurement_is_offered_after_a_speculative_reply_while_no_plain_speed_is_known():
    import math

    session = loaded()
    assert session.measure_offer() is None  # nothing replied yet
    request = session.send("hi", settings(), "default")
    events = list(FakeEngine().generate(request.conversation, spec=request.spec, max_new_tokens=24))
    session.on_started(request.request_id, events[0])
    session.on_round(request.request_id, events[1])
    assert session.measure_offer() is None  # not while the reply is written
    for event in events[2:-1]:
        session.on_round(request.request_id, event)
    reply = session.on_finished(request.request_id, events[-1]).turn
    stats = reply.stats
    expected = max(1, math.ceil(stats.ttft_seconds + session.measurement_budget() / stats.tok_per_s))
    assert session.measurement_budget() == 32  # 24 tokens replied: the measurement's floor
    assert session.measure_offer() == expected and session.figures().measure_offer_seconds == expected
    measuring = session.baseline_request(SamplingConfig(), "default")
    assert measuring.max_new_tokens == session.measurement_budget()
    assert session.measure_offer() is None  # measuring
    run(session, measuring)
    assert session.baseline() is not None and session.measure_offer() is None  # measured: nothing to offer
    assert session.figures().measure_offer_seconds is None


def test_a_plain_reply_is_offered_nothing_and_gives_the_baseline_as_before():
    session = loaded()
    plain = run(session, session.send("hi", settings("none"), "default"))
    assert plain.turn.stats.committed_tokens >= MIN_BASELINE_TOKENS and session.baseline() is not None
    run(session, session.send("more", settings(), "default"))
    assert session.measure_offer() is None  # the plain reply measured it
    other = loaded()
    request = other.send("hi", settings("none"), "default")
    request.max_new_tokens = MIN_BASELINE_TOKENS - 4  # too short to be the reference
    run(other, request)
    assert other.baseline() is None and other.measure_offer() is None  # no baseline, but a plain reply


def feed(session: ChatSession, request_id: int, events) -> list:
    """The worker's part: each event to the session's slot for it, as the window connects them; their answers."""
    slots = {GenerationStarted: session.on_started, RoundVerified: session.on_round,
             RoundsRevised: session.on_revised, GenerationFinished: session.on_finished}
    return [slots[type(event)](request_id, event) for event in events]


def statuses(tokens) -> list:
    return [(t.text, t.status, t.token_id) for t in tokens]


def test_a_servers_revised_rounds_replace_the_reply_here_and_in_the_history(tmp_path):
    store = HistoryStore(tmp_path / "history.sqlite3")
    try:
        session = loaded(store)
        request = session.send("hello there", settings(), "default")
        events = revised_events.events()
        answers = feed(session, request.request_id, events[:-1])
        turn, reply_id = session.current, session.recorder.message_id
        assert answers[-1] == turn.tokens and len(turn.tokens) == 11 and turn.notes == (revised_events.NOTE,)
        stored = store.load_conversation(session.conversation_id).messages[1]
        assert stored.id == reply_id and stored.state == STREAMING and [r.index for r in stored.rounds] == [0, 1, 2, 3]
        outcome = session.on_finished(request.request_id, events[-1])
        assert outcome.turn is turn and "acceptance 56%" in outcome.status and session.recorder.last_error is None

        conversation = store.load_conversation(session.conversation_id)
        reply = conversation.messages[1]
        assert reply.state == COMPLETE and reply.content == "".join(revised_events.PIECES)
        assert reply.stats["drafted_tokens"] == revised_events.DRAFTED
        turns, tokens = turns_from_conversation(conversation)
        assert statuses(tokens) == statuses(turn.tokens)  # reopened: the revised colours, ▯ ghosts and all
        assert [r.serials for r in turns[1].rounds] == [r.serials for r in turn.rounds]
        reopened = loaded()
        reopened.open_saved(conversation.id, turns, tokens, run=saved_run(conversation))
        live = reopened.live.snapshot()
        assert (live.drafted_tokens, live.accepted_tokens, live.rounds) == (
            revised_events.DRAFTED, revised_events.ACCEPTED, revised_events.STEPS)
        assert [(r.n_drafted, r.n_accepted) for r in reopened.live.rounds][:3] == [(0, 0), (3, 3), (3, 0)]
        assert reopened.live.rounds[3].n_accepted == 2  # its draft past the stop is not stored (records.round_event)
    finally:
        store.close()


def test_a_revision_not_of_the_chat_reply_in_flight_is_ignored():
    session = loaded()
    request = session.send("hello", settings(), "default")
    feed(session, request.request_id, revised_events.events()[:-2])
    plain = list(session.tokens)
    assert session.on_revised(request.request_id + 1, revised_events.revision()) is None  # a stopped request's
    assert session.tokens == plain and session.current.notes == ()
    feed(session, request.request_id, revised_events.events()[-1:])
    assert session.on_revised(request.request_id, revised_events.revision()) is None  # the reply has ended
    assert session.tokens == plain and [t.status for t in plain] == [TokenStatus.PLAIN] * 8
    measuring = session.baseline_request(SamplingConfig(), "default")  # the hidden plain-speed run folds nothing
    answers = feed(session, measuring.request_id, revised_events.events())
    assert answers[-2] is None and session.tokens == plain and session.turns[-1].tokens == plain
