"""The state of a chat session, in plain Python (no Qt): engine events fold into transcript tokens and stats.

Views render from here and keep nothing of their own. A round event becomes a few `Token`s (accepted,
rejected drafts, then the target's own token) appended to the current assistant turn; the figures come from
`engine.stats.StatsAccumulator`, so the GUI, the CLI and the benchmark agree on every definition. Graph
series are bounded ring buffers, so a long reply costs the same per round at its end as at its start.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from engine.events import GenerationFinished, GenerationStarted, RoundVerified, TokenStatus
from engine.stats import GenerationStats, StatsAccumulator, efficiency, speedup

SERIES_CAPACITY = 4096  # points kept per graph series
ROLLING_ROUNDS = 16  # window of the rolling acceptance rate, in drafting rounds
ROLLING_SECONDS = 2.0  # window of the rolling tok/s
MIN_BASELINE_TOKENS = 8  # a plain-decoding run shorter than this is no reference


@dataclass(frozen=True, slots=True)
class Token:
    """One piece of the transcript drawn by status, with what its tooltip tells."""

    serial: int  # index in SessionModel.tokens
    text: str
    status: TokenStatus
    round_index: int
    position: int | None  # 1-based position in the round's draft; k+1 for a bonus; None for plain
    draft_length: int
    p_target: float | None
    p_draft: float | None
    drafter: str
    token_id: int
    replaced: str | None = None  # substituted: the drafted piece it replaced
    replaced_p_target: float | None = None
    replaced_p_draft: float | None = None

    @property
    def committed(self) -> bool:
        return self.status is not TokenStatus.REJECTED


@dataclass(slots=True)
class Turn:
    role: str  # "user" | "assistant"
    text: str = ""
    tokens: list[Token] = field(default_factory=list)  # assistant: in display order, rejected drafts too
    spec_label: str = ""
    model: str = ""
    stop_reason: str | None = None
    stats: GenerationStats | None = None
    error: str | None = None
    warnings: tuple[str, ...] = ()

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


class LiveStats:
    """Figures of the generation in progress (or the last one), folded round by round."""

    def __init__(self) -> None:
        self.reset(k=0, method="none", model="")

    def reset(self, k: int, method: str, model: str) -> None:
        self.k = k
        self.method = method
        self.model = model
        self.accumulator = StatsAccumulator(k)
        self.final: GenerationStats | None = None
        self.acceptance_cumulative = RingSeries()  # x: tokens committed, y: acceptance rate (0…1)
        self.acceptance_rolling = RingSeries()
        self.speed_cumulative = RingSeries()  # x: seconds since start, y: tok/s
        self.speed_rolling = RingSeries()
        self._window: deque[tuple[int, int]] = deque()  # drafting rounds: (drafted, accepted)
        self._window_drafted = 0
        self._window_accepted = 0
        self._recent: deque[tuple[float, int]] = deque()  # (elapsed, committed total)
        self.version = 0  # bumped on every change; views redraw when it moved

    def add_round(self, event: RoundVerified) -> None:
        self.accumulator.add_round(event)
        acc = self.accumulator
        tokens = acc.committed_tokens
        n_drafted = len(event.draft_ids)
        if n_drafted:
            self._window.append((n_drafted, event.n_accepted))
            self._window_drafted += n_drafted
            self._window_accepted += event.n_accepted
            if len(self._window) > ROLLING_ROUNDS:
                old_drafted, old_accepted = self._window.popleft()
                self._window_drafted -= old_drafted
                self._window_accepted -= old_accepted
            self.acceptance_cumulative.append(tokens, acc.accepted_tokens / acc.drafted_tokens)
            self.acceptance_rolling.append(tokens, self._window_accepted / self._window_drafted)
        elapsed = event.elapsed_seconds
        self._recent.append((elapsed, tokens))
        while len(self._recent) > 2 and elapsed - self._recent[1][0] >= ROLLING_SECONDS:
            self._recent.popleft()
        if acc.rounds > 1:
            decode_time = elapsed - acc.ttft_seconds
            if decode_time > 0:
                self.speed_cumulative.append(elapsed, (tokens - 1) / decode_time)
            t0, n0 = self._recent[0]
            if elapsed > t0:
                self.speed_rolling.append(elapsed, (tokens - n0) / (elapsed - t0))
        self.version += 1

    def finish(self, stats: GenerationStats) -> None:
        self.final = stats
        self.version += 1

    def snapshot(self) -> GenerationStats:
        return self.final if self.final is not None else self.accumulator.snapshot()


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


class SessionModel:
    """A conversation and the live figures of its current reply."""

    def __init__(self, system_prompt: str = "") -> None:
        self.system_prompt = system_prompt
        self.turns: list[Turn] = []
        self.tokens: list[Token] = []  # every token of every assistant turn, by serial
        self.live = LiveStats()
        self.baselines: dict[str, float] = {}  # model name -> plain-decoding tok/s measured this session
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

    @property
    def last_user_text(self) -> str | None:
        for turn in reversed(self.turns):
            if turn.role == "user":
                return turn.text
        return None

    def new_chat(self) -> None:
        self.turns.clear()
        self.tokens.clear()
        self._current = None
        self.live.reset(k=0, method="none", model="")

    def restore(self, turns: list[Turn], tokens: list[Token]) -> None:
        """Replace the conversation with saved turns (their tokens' serials index `tokens`)."""
        self.new_chat()
        self.turns.extend(turns)
        self.tokens.extend(tokens)

    # ------------------------------------------------------------------ events
    def start(self, event: GenerationStarted) -> Turn:
        turn = Turn(role="assistant", spec_label=event.spec_label, model=event.model, warnings=event.warnings)
        self.turns.append(turn)
        self._current = turn
        self.live.reset(k=event.k, method=event.method, model=event.model)
        return turn

    def apply_round(self, event: RoundVerified) -> list[Token]:
        """Fold one round into the current turn; returns its tokens in display order (rejected drafts too)."""
        turn = self._current
        if turn is None:
            raise RuntimeError("a round arrived before GenerationStarted")
        self.live.add_round(event)
        n_committed = len(event.committed_ids)
        n_drafted = len(event.draft_ids)
        n_accepted = event.n_accepted
        new: list[Token] = []

        def add(**kwargs) -> None:
            token = Token(serial=len(self.tokens), round_index=event.index, drafter=event.drafter,
                          draft_length=n_drafted, **kwargs)
            self.tokens.append(token)
            new.append(token)

        for i in range(min(n_accepted, n_committed)):
            add(text=event.committed_pieces[i], status=TokenStatus.ACCEPTED, position=i + 1,
                p_target=_at(event.p_target, i), p_draft=_at(event.p_draft, i), token_id=event.committed_ids[i])
        if n_committed > n_accepted:  # the round reached the target's own token (no stop cut it first)
            for i in range(n_accepted, n_drafted):
                add(text=event.draft_pieces[i], status=TokenStatus.REJECTED, position=i + 1,
                    p_target=_at(event.p_target, i), p_draft=_at(event.p_draft, i), token_id=event.draft_ids[i])
            status = event.target_status
            replaced = {}
            if status is TokenStatus.SUBSTITUTED and n_accepted < n_drafted:
                replaced = dict(replaced=event.draft_pieces[n_accepted],
                                replaced_p_target=_at(event.p_target, n_accepted),
                                replaced_p_draft=_at(event.p_draft, n_accepted))
            add(text=event.committed_pieces[n_accepted], status=status,
                position=None if status is TokenStatus.PLAIN else n_accepted + 1,
                p_target=event.p_target_of_target_id, p_draft=None, token_id=event.target_id, **replaced)
        turn.tokens.extend(new)
        turn.text += "".join(event.committed_pieces)
        return new

    def finish(self, event: GenerationFinished) -> Turn | None:
        turn = self._current
        self._current = None
        self.live.finish(event.stats)
        if turn is None:
            return None
        turn.stop_reason = event.stop_reason
        turn.stats = event.stats
        if getattr(event, "error", None):  # the reply ended on a problem (out of memory): what came stays
            turn.error = event.error
        if event.text and len(event.text) >= len(turn.text):
            turn.text = event.text  # the engine's own decoding of the whole reply is authoritative
        if self.live.method == "none" and event.stats.committed_tokens >= MIN_BASELINE_TOKENS:
            self.record_baseline(turn.model, event.stats.tok_per_s)
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

    def record_baseline(self, model: str, tok_per_s: float) -> None:
        if tok_per_s > 0:
            self.baselines[model] = tok_per_s

    # ------------------------------------------------------------------ figures
    def figures(self) -> Figures:
        stats = self.live.snapshot()
        speculative = self.live.method != "none"
        baseline = self.baselines.get(self.live.model)
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
            committed_tokens=stats.committed_tokens, speculative=speculative)

    def finish_record(self, turn: Turn) -> dict:
        """The finish stats as one flat dict (the scripted mode prints it as a JSON line)."""
        stats = turn.stats
        record = {"model": turn.model, "spec": turn.spec_label, "stop_reason": turn.stop_reason,
                  "text": turn.text}
        if stats is not None:
            record.update(stats.as_dict())
            baseline = self.baselines.get(turn.model)
            measured = speedup(stats.tok_per_s, baseline) if baseline else None
            record["baseline_tok_per_s"] = baseline
            record["speedup"] = measured
            record["efficiency"] = efficiency(measured, stats.theoretical_speedup)
        return record


def _at(values, i):
    return values[i] if i < len(values) else None
