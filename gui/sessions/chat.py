"""The chat's state machine, in plain Python (no Qt): what the main window used to keep in its widgets.

A `ChatSession` is the conversation and its live figures (`gui.sessions.session_model.SessionModel`, the event fold)
plus everything that decides what happens next: which model is loaded or loading, the one request in flight
(a chat reply, or a hidden plain-decoding run that measures the baseline), the ids that tell its events from
a cancelled request's stragglers, the plain-decoding baseline per model, the settings each message ran with,
and the history writes (`gui.persistence.recorder.HistoryRecorder`). The window asks it what to do and renders what it
answers; the views never see it change behind their back.

It composes smaller pieces and answers for them (its public methods and attributes stay the window's one
surface): which model is loaded or loading, the pair waiting for a load, a device chosen for this run only and
this session's answers to the loader's safety questions (gui.sessions.loading), where the chat branches, Edit
and Regenerate (gui.sessions.forks), and the plain-decoding speeds (gui.sessions.baselines). A request's
purpose is a gui.sessions.purpose.Purpose.

May touch: engine configs, events, stats and consent (read), gui.sessions (session_model, loading, forks,
baselines, purpose), gui.persistence.recorder and fork. Never Qt, never a widget.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable

from engine.core.config import SamplingConfig, SpecConfig, parse_spec, sampling_to_record, spec_to_record
from engine.core.errors import ConfigError
from engine.core.events import GenerationFinished, GenerationStarted, RoundsRevised, RoundVerified
from engine.core.methods import plain_method
from engine.core.stats import efficiency, speedup
from engine.core.tokens import DisplayToken
from engine.models.consent import ConsentAnswers
from gui.persistence.fork import branch_recorder
from gui.persistence.recorder import HistoryRecorder
from gui.sessions.baselines import Baseline, Baselines
from gui.sessions.forks import Branches, turns_before
from gui.sessions.loading import ModelLoading, SessionConsents
from gui.sessions.purpose import Purpose
from gui.sessions.session_model import Figures, SessionModel, Turn

MIN_BASELINE_TOKENS = 8  # a plain-decoding run shorter than this is no reference
BASELINE_PROMPT = "Write a short paragraph about the sea."  # when the chat has no message to measure on
# what the session is doing: one of these at any time
NOT_LOADED, LOADING, IDLE, GENERATING, MEASURING = "not-loaded", "loading", "idle", "generating", "measuring"


@dataclass(frozen=True, slots=True)
class Settings:
    """The settings panel's values for the next message (engine configs validate themselves)."""

    model: str
    spec: SpecConfig
    sampling: SamplingConfig
    max_new_tokens: int
    system_prompt: str


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the end of a request means for the window."""

    purpose: Purpose
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
        self.baselines = Baselines()  # baseline_key -> the plain-decoding speed (this run or remembered)
        self.model_loading = ModelLoading()  # the loaded model, the one loading, the pair waiting for a load
        self.consents = SessionConsents()  # this session's answers to the loader's safety questions
        self.branches = Branches()  # the message being edited, and the settings each message was sent with
        self.active = None  # the request in flight
        self.settings_in_effect: Settings | None = None  # what the last message was sent with
        self.record_rounds = True  # chat replies record every round's tree (the round views' detail; a setting)
        self.saved_settings: dict | None = None  # what a reopened chat's last reply ran with (its settings record)
        self._request_record: dict = {}
        self._next_request_id = 1

    # ------------------------------------------------------------------ the composed pieces' fields, read here
    @property
    def model_info(self):
        """gui.worker.ModelInfo of the loaded model (None: none loaded)."""
        return self.model_loading.info

    @property
    def loaded_as(self) -> dict[str, Any]:
        """backend -> ModelInfo: the loaded model on each backend it is loaded on."""
        return self.model_loading.loaded_as

    @property
    def loading(self) -> str | None:
        """The model being loaded."""
        return self.model_loading.loading

    @property
    def pending_pair(self) -> tuple[str, str | None] | None:
        """The Models window's choice of target and draft, until that target loads."""
        return self.model_loading.pending_pair

    @pending_pair.setter
    def pending_pair(self, pair: tuple[str, str | None] | None) -> None:
        self.model_loading.pending_pair = pair

    @property
    def device_override(self) -> tuple[str, str] | None:
        """(device, dtype) for this run only (--device)."""
        return self.model_loading.device_override

    @device_override.setter
    def device_override(self, choice: tuple[str, str] | None) -> None:
        self.model_loading.device_override = choice

    @property
    def editing(self) -> int | None:
        """The turn index of the message being edited (Edit), if any."""
        return self.branches.editing

    @property
    def sent_with(self) -> list[tuple[Turn, Settings]]:
        return self.branches.sent_with

    # ------------------------------------------------------------------ state
    @property
    def state(self) -> str:
        if self.active is not None:
            return MEASURING if self.active.purpose is Purpose.BASELINE else GENERATING
        if self.loading is not None:
            return LOADING
        return IDLE if self.model_info is not None else NOT_LOADED

    @property
    def ready(self) -> bool:
        """A model is loaded and none is loading."""
        return self.model_loading.ready

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

    # ------------------------------------------------------------------ loading (gui.sessions.loading)
    def wants_load(self, name: str, force: bool = False) -> str | None:
        """The name to load (and the session is now loading it), or None when there is nothing to do: it is
        loading already, or it is the loaded model and `force` is off."""
        return self.model_loading.wants_load(name, force)

    def load_started(self, name: str) -> None:
        self.model_loading.loading = name

    def model_loaded(self, info) -> None:
        self.model_loading.loaded(info)

    def model_loaded_on(self, info) -> None:
        """The loaded model, loaded on another backend too (for a method its own backend can't serve)."""
        self.model_loading.loaded_on(info)

    def load_ended(self) -> None:
        """The load failed, or it waits for the user's answer to a safety question."""
        self.model_loading.loading = None

    def expect_pair(self, target: str, draft: str | None) -> bool:
        """The Models window chose a target and draft: they become the chat's settings once that target has
        loaded (`take_pair`). Returns whether it is the loaded one already (nothing to wait for)."""
        return self.model_loading.expect_pair(target, draft)

    def take_pair(self, loaded: str) -> tuple[str, str | None] | None:
        """The pair chosen for `loaded`, once (None: none chosen, or chosen for another model)."""
        return self.model_loading.take_pair(loaded)

    def answer_consent(self, kind: str, model: str, answer: bool) -> None:
        """The user's answer to a safety question (kind: remote-code | pickle) about `model`."""
        self.consents.answer(kind, model, answer)

    def consent(self, kind: str, model: str, stored: bool | None) -> bool | None:
        """This session's answer, else the one remembered from an earlier run (`stored`)."""
        return self.consents.get(kind, model, stored)

    def consent_answers(self, stored: dict[str, dict]) -> ConsentAnswers:
        """Every answer the loader must know: the remembered ones (`stored`: kind -> {model: answer}) with this
        session's on top."""
        return self.consents.merged_with(stored)

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
        self.branches.sent(self.add_user(text), settings)
        return self._begin(Purpose.CHAT, model, self.conversation(), settings.spec, settings.sampling,
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
        return self._begin(Purpose.BASELINE, self.model_name(fallback_model), history, SpecConfig(),
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

    def _begin(self, purpose: Purpose, model, conversation, spec, sampling, max_new_tokens):
        request = self.make_request(request_id=self._next_request_id, model=model, conversation=conversation,
                                    spec=spec, sampling=sampling, max_new_tokens=max_new_tokens, purpose=purpose,
                                    record=self.record_rounds and purpose is Purpose.CHAT)
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
        if request is None or request.purpose is not Purpose.CHAT:
            return None
        turn = self.start(event)
        self.recorder.reply_started({**self._request_record, "spec": event.spec_label, "model_label": event.model,
                                     "device": event.device, "dtype": event.dtype})
        return turn

    def on_round(self, request_id: int, event: RoundVerified) -> list[DisplayToken] | None:
        """The round's tokens in display order (None: not a chat reply's round)."""
        request = self._ours(request_id)
        if request is None or request.purpose is not Purpose.CHAT or self.current is None:
            return None
        tokens = self.apply_round(event)
        self.recorder.round_verified(event)  # one short transaction: a kill mid-reply keeps every round so far
        return tokens

    def on_revised(self, request_id: int, event: RoundsRevised) -> list[DisplayToken] | None:
        """The chat reply's rounds as they really were (a server tells its steps only at the end): they replace the
        reply's rounds so far, here and in the history (one transaction). Returns the reply's tokens in display
        order, to draw it again (None: not a chat reply in flight)."""
        request = self._ours(request_id)
        if request is None or request.purpose is not Purpose.CHAT or self.current is None:
            return None
        tokens = self.revise(event)
        self.recorder.rounds_revised(event.rounds)
        return tokens

    def on_finished(self, request_id: int, event: GenerationFinished) -> Outcome | None:
        request = self._ours(request_id)
        if request is None:
            return None
        self.active = None
        stats = event.stats
        if request.purpose is Purpose.BASELINE:
            if event.stop_reason == "cancelled" or stats.committed_tokens < MIN_BASELINE_TOKENS:
                return Outcome(Purpose.BASELINE, "Plain-speed measurement stopped before it had enough tokens")
            self.record_baseline(stats.tok_per_s, replace=True)
            return Outcome(Purpose.BASELINE, f"Plain decoding: {stats.tok_per_s:.1f} tok/s on this machine · used for "
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
        return Outcome(Purpose.CHAT, status, turn=turn)

    def on_failed(self, request_id: int, message: str) -> Outcome | None:
        request = self._ours(request_id)
        if request is None:
            return None
        self.active = None
        if request.purpose is not Purpose.CHAT:
            return Outcome(request.purpose, f"Refused: {message}", error=message)
        restored = self.fail(message)
        self.recorder.reply_failed(message, taken_back=restored is not None)
        last = self.turns[-1] if self.turns and self.turns[-1].role == "assistant" else None
        return Outcome(Purpose.CHAT, f"Refused: {message}", turn=last, restored_text=restored, error=message)

    def abandon(self, stop_reason: str = "cancelled") -> bool:
        """Forget the request in flight (the window stops it); a chat reply's part so far is kept in the
        history with its figures so far, ended by `stop_reason` (cancelled: a new chat; closed: SpecScope
        was closed), never as an error. Returns whether there was one."""
        request = self.active
        if request is None:
            return False
        self.active = None
        if request.purpose is Purpose.CHAT:
            stats = self.live.snapshot() if self.current is not None else None
            if self.current is not None:
                self.current.stop_reason = stop_reason
            self.recorder.reply_stopped(stop_reason, stats.as_dict() if stats is not None else None)
        return True

    # ------------------------------------------------------------------ branches (Edit, Regenerate: gui.sessions.forks)
    def edit(self, turn_index: int) -> str:
        """The user message `turn_index` is being edited: sending forks the chat before it. Returns its text."""
        self.branches.edit(turn_index)
        return self.turns[turn_index].text

    def cancel_edit(self) -> bool:
        """No message is being edited any more; returns whether one was."""
        return self.branches.cancel_edit()

    def fork_edited(self) -> bool:
        """Before a message goes out: a message being edited forks the chat before it (the history keeps both
        branches). Returns whether it forked."""
        index = self.branches.take_edit()
        if index is None:
            return False
        self.fork_before(index)
        return True

    def settings_of(self, turn_index: int) -> Settings | None:
        """The settings the user message `turn_index` (or the reply to it) was sent with, if sent this session."""
        return self.branches.settings_of(self.turns, turn_index)

    def fork_before(self, turn_index: int) -> str:
        """Go on from before the user message `turn_index`: it and every turn after it leave the chat, and the
        history writes to a new branch holding the turns before it (gui.persistence.fork; the old conversation
        stays). Returns the message's text (to edit, or to send again)."""
        turn = self.turns[turn_index]
        if turn.role != "user" or self.active is not None:
            raise ValueError("a chat forks at a user message, and not while a reply is being written")
        kept, kept_tokens = turns_before(self.turns, self.tokens, turn_index)
        conversation_id = self.recorder.conversation_id
        self.restore(kept, kept_tokens)
        branch_recorder(self.recorder, conversation_id, kept)
        return turn.text

    # ------------------------------------------------------------------ conversations
    def new_chat(self) -> None:
        super().new_chat()
        self.saved_settings = None
        self.branches.cancel_edit()  # a message being edited belonged to the chat shown before
        self.recorder.new_chat()

    def open_saved(self, conversation_id: int, turns: list[Turn], tokens: list[DisplayToken], run=None) -> None:
        """Show a saved conversation; the next message continues it. `run` (gui.persistence.replay.SavedRun): its last
        reply's rounds, folded again so its stats and graphs are as they were, and the settings it ran with."""
        self.restore(turns, tokens)
        self.branches.cancel_edit()  # a message being edited belonged to the chat shown before
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
        if self.model_info is not None:
            self.baselines.record(self.model_info, tok_per_s, replace=replace, at=at)

    def remember_baselines(self, stored: dict) -> None:
        """Baselines measured in earlier runs (key -> {"tok_per_s", "measured_at"}); this run's stay."""
        self.baselines.remember(stored)

    def baseline(self) -> Baseline | None:
        """The plain speed of the loaded model (on its device, in its dtype), however long ago it was measured."""
        return self.baselines.of(self.model_info)

    def plain_speeds(self) -> dict[str, Baseline]:
        """The loaded model's measured plain speed on each backend it is loaded on (where one is stored)."""
        return self.baselines.on_backends(self.loaded_as)

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
            "sampling": sampling_to_record(sampling)}
