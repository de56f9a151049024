"""The chat's state machine, in plain Python (no Qt): what the main window used to keep in its widgets.

A `ChatSession` is the conversation and its live figures (`gui.sessions.session_model.SessionModel`, the event fold)
plus everything that decides what happens next: which model is loaded or loading, the one request in flight
(a chat reply, or a hidden plain-decoding run that measures the baseline), the ids that tell its events from
a cancelled request's stragglers, the plain-decoding baseline per model, the settings each message ran with,
and the history writes (`gui.persistence.recorder.HistoryRecorder`). The window asks it what to do and renders what it
answers; the views never see it change behind their back.

The answers to the loader's safety questions given in this session, and a device chosen for this run only,
live here too; the remembered ones are the window's (QSettings).

May touch: engine configs, events, stats and consent (read), gui.sessions.session_model, gui.persistence.recorder. Never Qt, never
a widget.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Any, Callable

from engine.core.config import SamplingConfig, SpecConfig, parse_spec, spec_to_record
from engine.core.errors import ConfigError
from engine.models.consent import PICKLE, REMOTE_CODE, ConsentAnswers
from engine.core.events import GenerationFinished, GenerationStarted, RoundVerified
from engine.core.methods import plain_method
from engine.core.stats import efficiency, speedup
from engine.core.tokens import DisplayToken
from gui.persistence.recorder import HistoryRecorder
from gui.persistence.fork import branch_recorder
from gui.sessions.session_model import Figures, SessionModel, Turn

MIN_BASELINE_TOKENS = 8  # a plain-decoding run shorter than this is no reference
BASELINE_PROMPT = "Write a short paragraph about the sea."  # when the chat has no message to measure on
# what the session is doing: one of these at any time
NOT_LOADED, LOADING, IDLE, GENERATING, MEASURING = "not-loaded", "loading", "idle", "generating", "measuring"
CHAT, BASELINE = "chat", "baseline"  # a request's purpose


@dataclass(frozen=True, slots=True)
class Settings:
    """The settings panel's values for the next message (engine configs validate themselves)."""

    model: str
    spec: SpecConfig
    sampling: SamplingConfig
    max_new_tokens: int
    system_prompt: str


@dataclass(frozen=True, slots=True)
class Baseline:
    """The plain-decoding speed of one model on one device in one dtype: measured once, used everywhere."""

    tok_per_s: float
    measured_at: float  # seconds since the epoch

    def describe(self) -> str:
        return f"{self.tok_per_s:.1f} tok/s, measured {time.strftime('%d %b %Y %H:%M', time.localtime(self.measured_at))}"


def baseline_key(info) -> str:
    """What a baseline is the speed of: the model as loaded (its name, device and dtype)."""
    return f"{info.requested} · {info.device} · {info.dtype}"


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the end of a request means for the window."""

    purpose: str  # chat | baseline
    status: str  # the status line
    turn: Turn | None = None  # chat: the finished (or partial) reply
    baseline: float | None = None  # baseline: the measured tok/s (None: too short, stopped)
    restored_text: str | None = None  # chat failed before any token: the message taken back
    error: str | None = None  # failed: the message


class ChatSession(SessionModel):
    """The chat: its conversation (SessionModel) and what it is doing (`state`).

    `make_request(request_id=, model=, conversation=, spec=, sampling=, max_new_tokens=, purpose=, record=)` builds the
    worker's request (the window passes `gui.worker.GenerationRequest`)."""

    def __init__(self, recorder: HistoryRecorder, make_request: Callable[..., Any], system_prompt: str = "") -> None:
        super().__init__(system_prompt)
        self.recorder = recorder
        self.make_request = make_request
        self.baselines: dict[str, Baseline] = {}  # baseline_key -> the plain-decoding speed (this run or remembered)
        self.model_info = None  # gui.worker.ModelInfo of the loaded model
        self.loaded_as: dict[str, Any] = {}  # backend -> ModelInfo: the loaded model there (a setting run there)
        self.loading: str | None = None  # the model being loaded
        self.active = None  # the request in flight
        self.settings_in_effect: Settings | None = None  # what the last message was sent with
        self.sent_with: list[tuple[Turn, Settings]] = []  # each message sent this session and its settings
        self.record_rounds = True  # chat replies record every round's tree (the round views' detail; a setting)
        self.saved_settings: dict | None = None  # what a reopened chat's last reply ran with (its settings record)
        self.consents: dict[tuple[str, str], bool] = {}  # (kind, model) -> the answer given this session
        self.device_override: tuple[str, str] | None = None  # (device, dtype) for this run only (--device)
        self.editing: int | None = None  # the turn index of the message being edited (Edit), if any
        self.pending_pair: tuple[str, str | None] | None = None  # the Models window's choice, until it loads
        self._request_record: dict = {}
        self._next_request_id = 1

    # ------------------------------------------------------------------ state
    @property
    def state(self) -> str:
        if self.active is not None:
            return MEASURING if self.active.purpose == BASELINE else GENERATING
        if self.loading is not None:
            return LOADING
        return IDLE if self.model_info is not None else NOT_LOADED

    @property
    def ready(self) -> bool:
        """A model is loaded and none is loading."""
        return self.model_info is not None and self.loading is None

    @property
    def generating(self) -> bool:
        return self.active is not None

    def model_name(self, fallback: str) -> str:
        """What requests name the model: the loaded one, else `fallback` (the settings panel's)."""
        return self.model_info.requested if self.model_info is not None else fallback

    def busy_reason(self) -> str | None:
        """Why another run (a comparison) cannot use the device now, or None."""
        if not self.ready:
            return "The model is still loading."
        if self.active is not None:
            return "The chat is generating: wait for the reply or stop it first."
        return None

    # ------------------------------------------------------------------ loading
    def wants_load(self, name: str, force: bool = False) -> str | None:
        """The name to load (and the session is now loading it), or None when there is nothing to do: it is
        loading already, or it is the loaded model and `force` is off."""
        name = name.strip() or "default"
        if name == self.loading or (not force and self.loading is None and self.model_info is not None
                                    and name == self.model_info.requested):
            return None
        self.loading = name
        return name

    def load_started(self, name: str) -> None:
        self.loading = name

    def model_loaded(self, info) -> None:
        self.loading = None
        self.model_info = info
        self.loaded_as = {info.backend: info}

    def model_loaded_on(self, info) -> None:
        """The loaded model, loaded on another backend too (for a method its own backend can't serve)."""
        if self.model_info is not None and info.requested == self.model_info.requested:
            self.loaded_as[info.backend] = info

    def load_ended(self) -> None:
        """The load failed, or it waits for the user's answer to a safety question."""
        self.loading = None

    def expect_pair(self, target: str, draft: str | None) -> bool:
        """The Models window chose a target and draft: they become the chat's settings once that target has
        loaded (`take_pair`). Returns whether it is the loaded one already (nothing to wait for)."""
        self.pending_pair = (target, draft)
        return self.model_info is not None and self.model_info.requested == target

    def take_pair(self, loaded: str) -> tuple[str, str | None] | None:
        """The pair chosen for `loaded`, once (None: none chosen, or chosen for another model)."""
        pending, self.pending_pair = self.pending_pair, None
        return pending if pending is not None and pending[0] == loaded else None

    # ------------------------------------------------------------------ how models load
    def answer_consent(self, kind: str, model: str, answer: bool) -> None:
        """The user's answer to a safety question (kind: remote-code | pickle) about `model`."""
        self.consents[(kind, model)] = answer

    def consent(self, kind: str, model: str, stored: bool | None) -> bool | None:
        """This session's answer, else the one remembered from an earlier run (`stored`)."""
        return self.consents.get((kind, model), stored)

    def consent_answers(self, stored: dict[str, dict]) -> ConsentAnswers:
        """Every answer the loader must know: the remembered ones (`stored`: kind -> {model: answer}) with this
        session's on top."""
        def names(kind: str, answer: bool) -> frozenset[str]:
            merged = {**{m: a for m, a in stored.get(kind, {}).items() if isinstance(a, bool)},
                      **{m: a for (k, m), a in self.consents.items() if k == kind}}
            return frozenset(m for m, a in merged.items() if a is answer)

        return ConsentAnswers(remote_code_allowed=names(REMOTE_CODE, True), remote_code_refused=names(REMOTE_CODE, False),
                              pickle_allowed=names(PICKLE, True), pickle_refused=names(PICKLE, False))

    # ------------------------------------------------------------------ requests
    def send(self, text: str, settings: Settings, fallback_model: str):
        """Add the user's message and return the request for its reply (None: not now, or empty text). In a chat
        another window writes (read-only here) the message goes to a branch holding the turns its reply is made from."""
        text = text.strip()
        if not text or not self.ready or self.active is not None:
            return None
        self.system_prompt = settings.system_prompt
        self.settings_in_effect = settings
        model = self.model_name(fallback_model)
        self._request_record = settings_record(settings, model)
        if self.recorder.read_only_reason is not None:
            branch_recorder(self.recorder, self.recorder.conversation_id, self.turns)
        self.recorder.user_message(text, self._request_record)
        self.sent_with.append((self.add_user(text), settings))
        return self._begin(CHAT, model, self.conversation(), settings.spec, settings.sampling,
                           settings.max_new_tokens)

    def baseline_request(self, sampling: SamplingConfig, fallback_model: str):
        """A hidden plain-decoding run of the last message (or a stock prompt) that measures the model's
        reference tok/s; None when a request is in flight or no model is ready."""
        if not self.ready or self.active is not None:
            return None
        history = self.conversation()
        while history and history[-1]["role"] == "assistant":
            history.pop()
        if not history or history[-1]["role"] != "user":
            history = ([m for m in history if m["role"] == "system"]
                       + [{"role": "user", "content": BASELINE_PROMPT}])
        return self._begin(BASELINE, self.model_name(fallback_model), history, SpecConfig(),
                           sampling, self.measurement_budget())

    def measurement_budget(self) -> int:
        """The tokens the plain-speed measurement decodes: as many as the last reply (at least 32), else 128."""
        last = next((t for t in reversed(self.turns) if t.role == "assistant" and t.stats), None)
        return max(32, last.stats.committed_tokens) if last is not None else 128

    def measure_offer(self) -> int | None:
        """The seconds (≈, rounded up) the plain-speed measurement would take, offered once a speculative reply is
        done while this model has no plain speed; None otherwise. Estimated from the reply shown: its time to
        first token (the measurement's prefill is of the same chat) and its tokens' rate over the measurement's
        budget."""
        stats = self.live.final
        if (stats is None or stats.tok_per_s <= 0 or not self.ready or self.active is not None
                or self.live.method == plain_method().name or self.baseline() is not None):
            return None
        return max(1, math.ceil(stats.ttft_seconds + self.measurement_budget() / stats.tok_per_s))

    def _begin(self, purpose, model, conversation, spec, sampling, max_new_tokens):
        request = self.make_request(request_id=self._next_request_id, model=model, conversation=conversation,
                                    spec=spec, sampling=sampling, max_new_tokens=max_new_tokens, purpose=purpose,
                                    record=self.record_rounds and purpose == CHAT)
        self._next_request_id += 1
        self.active = request
        return request

    def _ours(self, request_id: int):
        """The request in flight if `request_id` is its id (events of a stopped request are dropped)."""
        request = self.active
        return request if request is not None and request.request_id == request_id else None

    # ------------------------------------------------------------------ events of the request in flight
    def on_started(self, request_id: int, event: GenerationStarted) -> Turn | None:
        """The reply's turn (None: not ours, or the hidden baseline run)."""
        request = self._ours(request_id)
        if request is None:
            return None
        if request.purpose != CHAT:
            return None
        turn = self.start(event)
        self.recorder.reply_started({**self._request_record, "spec": event.spec_label, "model_label": event.model,
                                     "device": event.device, "dtype": event.dtype})
        return turn

    def on_round(self, request_id: int, event: RoundVerified) -> list[DisplayToken] | None:
        """The round's tokens in display order (None: not a chat reply's round)."""
        request = self._ours(request_id)
        if request is None or request.purpose != CHAT or self.current is None:
            return None
        tokens = self.apply_round(event)
        self.recorder.round_verified(event)  # one short transaction: a kill mid-reply keeps every round so far
        return tokens

    def on_finished(self, request_id: int, event: GenerationFinished) -> Outcome | None:
        request = self._ours(request_id)
        if request is None:
            return None
        self.active = None
        stats = event.stats
        if request.purpose == BASELINE:
            if event.stop_reason == "cancelled" or stats.committed_tokens < MIN_BASELINE_TOKENS:
                return Outcome(BASELINE, "Plain-speed measurement stopped before it had enough tokens")
            self.record_baseline(stats.tok_per_s, replace=True)
            return Outcome(BASELINE, f"Plain decoding: {stats.tok_per_s:.1f} tok/s on this machine · used for "
                           "every speed-up of this model from now on", baseline=stats.tok_per_s)
        turn = self.finish(event)
        self.recorder.reply_finished(event)
        if self.live.method == plain_method().name and stats.committed_tokens >= MIN_BASELINE_TOKENS and turn is not None:
            self.record_baseline(stats.tok_per_s, replace=False)  # the first plain reply, when none was measured
        if event.error:
            status = f"Reply ended: {event.error}"
        else:
            ended = "Stopped" if event.stop_reason == "cancelled" else "Done"  # as the reply's footer says it
            status = (f"{ended} · {stats.committed_tokens} tokens · {stats.tok_per_s:.1f} tok/s"
                      + (f" · acceptance {stats.acceptance_rate:.0%}" if stats.drafted_tokens else ""))
        return Outcome(CHAT, status, turn=turn)

    def on_failed(self, request_id: int, message: str) -> Outcome | None:
        request = self._ours(request_id)
        if request is None:
            return None
        self.active = None
        if request.purpose != CHAT:
            return Outcome(request.purpose, f"Refused: {message}", error=message)
        restored = self.fail(message)
        self.recorder.reply_failed(message, taken_back=restored is not None)
        last = self.turns[-1] if self.turns and self.turns[-1].role == "assistant" else None
        return Outcome(CHAT, f"Refused: {message}", turn=last, restored_text=restored, error=message)

    def abandon(self, stop_reason: str = "cancelled") -> bool:
        """Forget the request in flight (the window stops it); a chat reply's part so far is kept in the
        history with its figures so far, ended by `stop_reason` (cancelled: a new chat; closed: SpecScope
        was closed), never as an error. Returns whether there was one."""
        request = self.active
        if request is None:
            return False
        self.active = None
        if request.purpose == CHAT:
            stats = self.live.snapshot() if self.current is not None else None
            if self.current is not None:
                self.current.stop_reason = stop_reason
            self.recorder.reply_stopped(stop_reason, stats.as_dict() if stats is not None else None)
        return True

    # ------------------------------------------------------------------ branches (Edit, Regenerate)
    def edit(self, turn_index: int) -> str:
        """The user message `turn_index` is being edited: sending forks the chat before it. Returns its text."""
        self.editing = turn_index
        return self.turns[turn_index].text

    def cancel_edit(self) -> bool:
        """No message is being edited any more; returns whether one was."""
        editing, self.editing = self.editing, None
        return editing is not None

    def fork_edited(self) -> bool:
        """Before a message goes out: a message being edited forks the chat before it (the history keeps both
        branches). Returns whether it forked."""
        if self.editing is None:
            return False
        index, self.editing = self.editing, None
        self.fork_before(index)
        return True

    def settings_of(self, turn_index: int) -> Settings | None:
        """The settings the user message `turn_index` (or the reply to it) was sent with, if sent this session."""
        turn = self.turns[turn_index]
        if turn.role == "assistant" and turn_index > 0:
            turn = self.turns[turn_index - 1]
        return next((settings for sent, settings in self.sent_with if sent is turn), None)

    def fork_before(self, turn_index: int) -> str:
        """Go on from before the user message `turn_index`: it and every turn after it leave the chat, and the
        history writes to a new branch holding the turns before it (gui.persistence.fork; the old conversation
        stays). Returns the message's text (to edit, or to send again)."""
        turn = self.turns[turn_index]
        if turn.role != "user" or self.active is not None:
            raise ValueError("a chat forks at a user message, and not while a reply is being written")
        kept = self.turns[:turn_index]
        n_tokens = sum(len(t.tokens) for t in kept)  # serials run in turn order: the kept turns' come first
        conversation_id = self.recorder.conversation_id
        self.restore(kept, self.tokens[:n_tokens])
        branch_recorder(self.recorder, conversation_id, kept)
        return turn.text

    # ------------------------------------------------------------------ conversations
    def new_chat(self) -> None:
        super().new_chat()
        self.saved_settings = None
        self.editing = None  # a message being edited belonged to the chat shown before
        self.recorder.new_chat()

    def open_saved(self, conversation_id: int, turns: list[Turn], tokens: list[DisplayToken], run=None) -> None:
        """Show a saved conversation; the next message continues it. `run` (gui.persistence.replay.SavedRun): its last
        reply's rounds, folded again so its stats and graphs are as they were, and the settings it ran with."""
        self.restore(turns, tokens)
        self.editing = None  # a message being edited belonged to the chat shown before
        self.recorder.open(conversation_id)
        self.saved_settings = run.settings if run is not None else None
        if run is not None:
            self.live.reset(k=run.k, method=run.method, model=run.model)
            # the reply's rounds as the round views read them: its turn's, when they are the run's rounds
            shown = next((t for t in reversed(turns) if t.role == "assistant" and (t.rounds or t.stats)), None)
            records = shown.rounds if shown is not None and len(shown.rounds) == len(run.rounds) else []
            for i, event in enumerate(run.rounds):
                self.live.add_round(event, records[i] if records else None)
            if run.stats is not None:
                self.live.finish(run.stats)

    def last_prompt(self) -> str | None:
        """The last message the user sent in this chat (what "which setting is fastest here?" runs on)."""
        return next((t.text for t in reversed(self.turns) if t.role == "user" and t.text.strip()), None)

    @property
    def conversation_id(self) -> int | None:
        return self.recorder.conversation_id

    # ------------------------------------------------------------------ figures
    def record_baseline(self, tok_per_s: float, *, replace: bool, at: float | None = None) -> None:
        """The loaded model's plain speed; `replace` off keeps one measured before (measured once)."""
        if tok_per_s <= 0 or self.model_info is None:
            return
        key = baseline_key(self.model_info)
        if replace or key not in self.baselines:
            self.baselines[key] = Baseline(tok_per_s, time.time() if at is None else at)

    def remember_baselines(self, stored: dict) -> None:
        """Baselines measured in earlier runs (key -> {"tok_per_s", "measured_at"}); this run's stay."""
        for key, value in stored.items():
            try:
                baseline = Baseline(float(value["tok_per_s"]), float(value["measured_at"]))
            except (KeyError, TypeError, ValueError):
                continue
            if baseline.tok_per_s > 0:
                self.baselines.setdefault(key, baseline)

    def baseline(self) -> Baseline | None:
        """The plain speed of the loaded model (on its device, in its dtype), however long ago it was measured."""
        return self.baselines.get(baseline_key(self.model_info)) if self.model_info is not None else None

    def plain_speeds(self) -> dict[str, Baseline]:
        """The loaded model's measured plain speed on each backend it is loaded on (where one is stored)."""
        found = {backend: self.baselines.get(baseline_key(info)) for backend, info in self.loaded_as.items()}
        return {backend: baseline for backend, baseline in found.items() if baseline is not None}

    def baseline_tok_per_s(self) -> float | None:
        baseline = self.baseline()
        return baseline.tok_per_s if baseline is not None else None

    def figures(self) -> Figures:
        figures = self.figures_against(self.baseline_tok_per_s())
        if not figures.speculative:  # plain decoding is the reference: its speed-up is 1 by definition, no figure
            figures = dataclasses.replace(figures, speedup=None, efficiency=None)
        offer = self.measure_offer()
        return dataclasses.replace(figures, measure_offer_seconds=offer) if offer is not None else figures

    def finish_record(self, turn: Turn) -> dict:
        """The finish stats as one flat dict (the scripted mode prints it as a JSON line): the reply's backend
        and each of its rounds (drafted, accepted, draft_ms, verify_ms; gui.sessions.rounds.RoundRecord.as_dict)."""
        stats = turn.stats
        record = {"model": turn.model, "backend": reply_backend(turn.spec_label, self.model_info),
                  "spec": turn.spec_label, "stop_reason": turn.stop_reason, "text": turn.text}
        if stats is not None:
            record.update(stats.as_dict())
            baseline = self.baseline_tok_per_s()
            measured = speedup(stats.tok_per_s, baseline) if baseline and turn.spec_label != SpecConfig().label() else None
            record["baseline_tok_per_s"] = baseline
            record["speedup"] = measured
            record["efficiency"] = efficiency(measured, stats.theoretical_speedup)
            record["n_rounds"] = stats.rounds
        record["rounds"] = [r.as_dict() for r in turn.rounds]  # the list (the stats' count is n_rounds)
        return record


def reply_backend(spec_label: str, info) -> str | None:
    """The backend a reply ran on: its setting's (auto may have moved the method), else the loaded model's."""
    try:
        moved = parse_spec(spec_label).backend if spec_label else None
    except ConfigError:
        moved = None
    return moved or (info.backend if info is not None else None)


def backend_note(note: str, backends: tuple[str, ...], speeds: dict[str, Baseline]) -> str:
    """Why a setting runs on another backend than the loaded model's (`note`: engine.backends.resolve_backend's),
    and what plain decoding costs on each of `backends`: measured, or not yet."""
    costs = "; ".join(f"on {backend}: {speeds[backend].describe()}" if backend in speeds else
                      f"on {backend}: not measured yet" for backend in backends)
    return f"{note[:1].upper()}{note[1:]}. Plain decoding {costs}."


def spec_words(spec: SpecConfig) -> str:
    """A setting as the user reads it (the status line): the method's label, then k, the draft and the
    parameters set."""
    if not spec.speculative:
        return spec.info.label
    extra = [f"k={spec.k}"] + ([f"draft {spec.draft}"] if spec.draft else []) + [
        f"{spec.info.param(name).title} {value}" for name, value in spec.params]
    return f"{spec.info.label}, {', '.join(extra)}"


def settings_record(settings: Settings, model: str) -> dict:
    """The settings a message ran with, as stored in the history (JSON-ready)."""
    spec, sampling = settings.spec, settings.sampling
    return {"model": model, **spec_to_record(spec), "max_new_tokens": settings.max_new_tokens,
            "system_prompt": settings.system_prompt or None,
            "sampling": {"temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": sampling.top_k,
                         "seed": sampling.seed}}
