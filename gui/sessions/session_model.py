"""The event fold, in plain Python (no Qt): engine events become transcript tokens, turns and live stats.

A round event becomes a few `engine.core.tokens.DisplayToken`s (accepted, rejected drafts, then the target's
own token), each numbered by its serial in the session, appended to the current assistant turn; a RoundsRevised
(a server that tells its steps only at the end) replaces the current turn's rounds, folded again. Every figure,
live ones included, is an `engine.core.stats` figure: the cumulative ones are the `StatsAccumulator`'s, the
rolling ones (last rounds, last seconds) the same definitions applied to the difference of two of its
snapshots, so the GUI, the CLI and the benchmark agree on every definition. Graph series are bounded ring
buffers, so a long reply costs the same per round at its end as at its start.
The chat (gui.sessions.chat) and each run of a comparison (gui.sessions.compare) fold their events here.

May touch: engine events and stats (read). Never Qt, never a widget.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from dataclasses import dataclass, field

from engine.core.events import GenerationFinished, GenerationStarted, RoundsRevised, RoundVerified
from engine.core.methods import plain_method
from engine.core.tokens import DisplayToken, fold_round
from engine.core.stats import AggregateStats, GenerationStats, StatsAccumulator, efficiency, speedup
from gui.sessions.rounds import RoundRecord

SERIES_CAPACITY = 4096  # points kept per graph series
ROLLING_ROUNDS = 16  # window of the rolling acceptance rate, in drafting rounds
ROLLING_SECONDS = 2.0  # window of the rolling tok/s


@dataclass(slots=True)
class Turn:
    role: str  # "user" | "assistant"
    text: str = ""
    tokens: list[DisplayToken] = field(default_factory=list)  # assistant: in display order, rejected drafts too
    spec_label: str = ""
    model: str = ""
    stop_reason: str | None = None
    stats: GenerationStats | None = None
    error: str | None = None
    warnings: tuple[str, ...] = ()  # problems said at the start of the reply
    notes: tuple[str, ...] = ()  # information said at the start (what the drafter does), not a problem
    rounds: list[RoundRecord] = field(default_factory=list)  # assistant: its rounds (gui.sessions.rounds)

    @property
    def finished(self) -> bool:
        return self.stop_reason is not None or self.error is not None


class RingSeries:
    """A bounded (x, y) series for a graph."""

    def __init__(self, capacity: int = SERIES_CAPACITY) -> None:
        self.x: deque[float] = deque(maxlen=capacity)
        self.y: deque[float] = deque(maxlen=capacity)

    def append(self, x: float, y: float) -> None:
        self.x.append(x)
        self.y.append(y)

    def clear(self) -> None:
        self.x.clear()
        self.y.clear()

    def __len__(self) -> int:
        return len(self.x)

    def data(self) -> tuple[list[float], list[float]]:
        return list(self.x), list(self.y)


def window_stats(newer: GenerationStats, older: GenerationStats | None) -> AggregateStats:
    """The rounds between two snapshots of one generation, as pooled figures: their acceptance rate and their
    tok/s are engine.core.stats' definitions applied to those rounds alone (the rolling graphs)."""
    if older is None:
        return AggregateStats(1, newer.committed_tokens, newer.decode_tokens, newer.decode_seconds,
                              newer.elapsed_seconds, newer.target_passes, newer.drafted_tokens,
                              newer.accepted_tokens, newer.drafting_rounds, newer.decode_rounds,
                              newer.draft_seconds, newer.verify_seconds)
    committed = newer.committed_tokens - older.committed_tokens
    seconds = newer.elapsed_seconds - older.elapsed_seconds
    return AggregateStats(
        generations=1, committed_tokens=committed, decode_tokens=committed, decode_seconds=seconds,
        elapsed_seconds=seconds, target_passes=newer.target_passes - older.target_passes,
        drafted_tokens=newer.drafted_tokens - older.drafted_tokens,
        accepted_tokens=newer.accepted_tokens - older.accepted_tokens,
        drafting_rounds=newer.drafting_rounds - older.drafting_rounds,
        decode_rounds=newer.decode_rounds - older.decode_rounds,
        draft_seconds=newer.draft_seconds - older.draft_seconds,
        verify_seconds=newer.verify_seconds - older.verify_seconds)


class LiveStats:
    """Figures of the generation in progress (or the last one), folded round by round."""

    def __init__(self) -> None:
        self.reset(k=0, method=plain_method().name, model="")

    def reset(self, k: int, method: str, model: str, rollback: str = "") -> None:
        self.k = k
        self.method = method
        self.model = model
        self.rollback = rollback  # how a recurrent state is rolled back, and its cost (engine's words; "": free)
        self.accumulator = StatsAccumulator(k)
        self.final: GenerationStats | None = None
        self.acceptance_cumulative = RingSeries()  # x: tokens committed, y: acceptance rate (0…1)
        self.acceptance_rolling = RingSeries()
        self.speed_cumulative = RingSeries()  # x: seconds since start, y: tok/s
        self.speed_rolling = RingSeries()
        self._drafting: deque[GenerationStats] = deque()  # snapshots before each of the last drafting rounds
        self._recent: deque[GenerationStats] = deque()  # snapshots of the last seconds' rounds
        self._last: GenerationStats | None = None
        self.rounds: list[RoundRecord] = []  # the reply's rounds, for the round views (timeline, tree)
        self.version = 0  # bumped on every change; views redraw when it moved

    def add_round(self, event: RoundVerified, record: RoundRecord | None = None) -> None:
        if record is not None:
            self.rounds.append(record)
        before = self._last
        self.accumulator.add_round(event)
        now = self._last = self.accumulator.snapshot()
        tokens = now.committed_tokens
        if event.draft_ids:
            self._drafting.append(before)
            if len(self._drafting) > ROLLING_ROUNDS:
                self._drafting.popleft()
            self.acceptance_cumulative.append(tokens, now.acceptance_rate)
            self.acceptance_rolling.append(tokens, window_stats(now, self._drafting[0]).acceptance_rate)
        self._recent.append(now)
        while len(self._recent) > 2 and now.elapsed_seconds - self._recent[1].elapsed_seconds >= ROLLING_SECONDS:
            self._recent.popleft()
        if now.rounds > 1:
            if now.decode_seconds > 0:
                self.speed_cumulative.append(now.elapsed_seconds, now.tok_per_s)
            oldest = self._recent[0]
            if now.elapsed_seconds > oldest.elapsed_seconds:
                self.speed_rolling.append(now.elapsed_seconds, window_stats(now, oldest).tok_per_s)
        self.version += 1

    def restart(self) -> None:
        """Forget the reply's rounds so far, to fold them again as they really were (RoundsRevised): same k,
        method, model and rollback; `version` goes on rising, so a view that drew the old rounds redraws."""
        version = self.version
        self.reset(k=self.k, method=self.method, model=self.model, rollback=self.rollback)
        self.version = version + 1

    def finish(self, stats: GenerationStats) -> None:
        self.final = stats
        self.version += 1

    def snapshot(self) -> GenerationStats:
        if self.final is not None:
            return self.final
        return self._last if self._last is not None else self.accumulator.snapshot()


@dataclass(frozen=True, slots=True)
class Figures:
    """What the stats strip shows; None where a figure is not defined yet."""

    tok_per_s: float
    acceptance_rate: float | None
    mean_accepted_length: float
    speedup: float | None
    baseline_tok_per_s: float | None
    theoretical_speedup: float | None
    efficiency: float | None
    draft_seconds: float
    verify_seconds: float
    committed_tokens: int
    speculative: bool
    measure_offer_seconds: int | None = None  # ≈ seconds of the plain-speed measurement offered (ChatSession)
    by_drafter: tuple = ()  # a combined method's drafters: (name, drafted, accepted, rate) each (GenerationStats)


class SessionModel:
    """A conversation and the live figures of its current reply."""

    def __init__(self, system_prompt: str = "") -> None:
        self.system_prompt = system_prompt
        self.turns: list[Turn] = []
        self.tokens: list[DisplayToken] = []  # every token of every assistant turn, by serial
        self.token_rounds: list[RoundRecord | None] = []  # the round of each token, by serial
        self.live = LiveStats()
        self._current: Turn | None = None

    # ------------------------------------------------------------------ conversation
    def conversation(self, *, include_pending: bool = True) -> list[dict]:
        """The chat history as the engine takes it: system prompt, then every turn that has text."""
        messages = []
        if self.system_prompt.strip():
            messages.append({"role": "system", "content": self.system_prompt.strip()})
        for turn in self.turns:
            if turn is self._current and not include_pending:
                continue
            if turn.role == "assistant" and not turn.text:
                continue
            messages.append({"role": turn.role, "content": turn.text})
        return messages

    def add_user(self, text: str) -> Turn:
        turn = Turn(role="user", text=text)
        self.turns.append(turn)
        return turn

    @property
    def current(self) -> Turn | None:
        """The assistant turn being generated, if any."""
        return self._current

    def new_chat(self) -> None:
        self.turns.clear()
        self.tokens.clear()
        self.token_rounds.clear()
        self._current = None
        self.live.reset(k=0, method=plain_method().name, model="")

    def restore(self, turns: list[Turn], tokens: list[DisplayToken]) -> None:
        """Replace the conversation with saved turns (their tokens' serials index `tokens`)."""
        self.new_chat()
        self.turns.extend(turns)
        self.tokens.extend(tokens)
        self.token_rounds.extend([None] * len(tokens))
        for turn in turns:
            for record in turn.rounds:
                for serial in record.serials:
                    if 0 <= serial < len(self.token_rounds):
                        self.token_rounds[serial] = record

    def round_of(self, serial: int | None) -> RoundRecord | None:
        """The round a token (by serial) came from, where known."""
        if serial is None or not 0 <= serial < len(self.token_rounds):
            return None
        return self.token_rounds[serial]

    # ------------------------------------------------------------------ events
    def start(self, event: GenerationStarted) -> Turn:
        turn = Turn(role="assistant", spec_label=event.spec_label, model=event.model, warnings=event.warnings,
                    notes=event.notes)
        self.turns.append(turn)
        self._current = turn
        self.live.reset(k=event.k, method=event.method, model=event.model, rollback=event.rollback)
        return turn

    def apply_round(self, event: RoundVerified) -> list[DisplayToken]:
        """Fold one round into the current turn (engine.core.tokens.fold_round); returns its tokens in display order,
        rejected drafts too, each numbered by its serial in `tokens`."""
        turn = self._current
        if turn is None:
            raise RuntimeError("a round arrived before GenerationStarted")
        first = len(self.tokens)
        new = [dataclasses.replace(display, serial=first + i) for i, display in enumerate(fold_round(event))]
        at = len(self.turns) - 1 if self.turns[-1] is turn else self.turns.index(turn)
        record = RoundRecord(at, event, tuple(token.serial for token in new))
        self.live.add_round(event, record)
        self.tokens.extend(new)
        self.token_rounds.extend([record] * len(new))
        turn.tokens.extend(new)
        turn.rounds.append(record)
        turn.text += event.text
        return new

    def revise(self, event: RoundsRevised) -> list[DisplayToken]:
        """The current turn's rounds as they really were (engine.core.events.RoundsRevised): its tokens and rounds so
        far (the last of `tokens`: the turn being written is the latest) give way to the revised rounds, folded
        again and numbered on from the same first serial; the live figures are folded again from the first round,
        and the event's note joins the turn's notes. Returns the turn's tokens in display order."""
        turn = self._current
        if turn is None:
            raise RuntimeError("rounds were revised before GenerationStarted")
        first = len(self.tokens) - len(turn.tokens)
        del self.tokens[first:]
        del self.token_rounds[first:]
        turn.tokens.clear()
        turn.rounds.clear()
        turn.text = ""
        self.live.restart()
        for round_event in event.rounds:
            self.apply_round(round_event)
        if event.note and event.note not in turn.notes:
            turn.notes += (event.note,)
        return list(turn.tokens)

    def finish(self, event: GenerationFinished) -> Turn | None:
        turn = self._current
        self._current = None
        self.live.finish(event.stats)
        if turn is None:
            return None
        turn.stop_reason = event.stop_reason
        turn.stats = event.stats
        if event.error:  # the reply ended on a problem (out of memory): what came stays
            turn.error = event.error
        if event.text and len(event.text) >= len(turn.text):
            turn.text = event.text  # the engine's own decoding of the whole reply is authoritative
        return turn

    def fail(self, message: str) -> str | None:
        """The current request failed. With nothing generated, its user message is taken back and returned
        (so the window can put it back in the message box); otherwise the partial reply stays."""
        turn = self._current
        self._current = None
        if turn is not None and turn.text:
            turn.error = message
            return None
        if turn is not None:
            self.turns.remove(turn)
        if self.turns and self.turns[-1].role == "user":
            return self.turns.pop().text
        return None

    # ------------------------------------------------------------------ figures
    def figures_against(self, baseline: float | None) -> Figures:
        """The stats strip's figures of the reply shown; speed-up against `baseline` (plain tok/s)."""
        stats = self.live.snapshot()
        speculative = self.live.method != plain_method().name
        measured = speedup(stats.tok_per_s, baseline) if baseline and stats.tok_per_s > 0 else None
        theoretical = stats.theoretical_speedup if speculative and stats.drafted_tokens else None
        return Figures(
            tok_per_s=stats.tok_per_s,
            acceptance_rate=stats.acceptance_rate if stats.drafted_tokens else None,
            mean_accepted_length=stats.mean_accepted_length,
            speedup=measured, baseline_tok_per_s=baseline,
            theoretical_speedup=theoretical,
            efficiency=efficiency(measured, theoretical) if theoretical else None,
            draft_seconds=stats.draft_seconds, verify_seconds=stats.verify_seconds,
            committed_tokens=stats.committed_tokens, speculative=speculative,
            by_drafter=stats.drafter_acceptance() if len(stats.by_drafter) > 1 else ())

