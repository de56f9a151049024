"""The GUI tests' stand-in for `engine.core.engine.Engine`: same `generate()` signature, canned events, no model.

A test double, with test switches (`pause_after`, `fail_with`, the draft name "mismatch" that is refused):
it lives here, under tests/, never in the product (the app's `--demo` replays a recording instead:
gui/demo_engine.py). Its rounds cycle through every case the transcript draws: a plain prefill, full
acceptance with a bonus token, a correction after a partial draft, a rejection at position 0, and
(prompt-lookup) rounds that drafted nothing.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Iterator

from engine.core.config import SamplingConfig, SpecConfig
from engine.drafters.early_exit import check_layers
from engine.core.errors import ConfigError
from engine.core.events import (Alternatives, GenerationFinished, GenerationStarted, PositionDetail, RoundDetail,
                                RoundVerified, target_status)
from engine.core.stats import StatsAccumulator

WORDS = ("Speculative", " decoding", " lets", " a", " small", " drafter", " guess", " the", " next", " few",
         " tokens", ",", " and", " the", " large", " model", " checks", " them", " all", " in", " one",
         " pass", ".", "\n\n", "When", " the", " guesses", " are", " right", ",", " several", " tokens",
         " arrive", " for", " the", " price", " of", " one", ";", " when", " they", " are", " wrong", ",",
         " the", " target", " model", " writes", " its", " own", " token", " instead", ".", "\n")
WRONG = (" cat", " blue", " quickly", " seven", " because", " under", " maybe", " red")


@dataclass
class FakeModel:
    """What `engine.models.load.LoadedModel` tells about itself (the GUI reads no more than this)."""

    name: str = "fake"
    device: str = "cpu"
    dtype: str = "float32"
    n_layers: int = 12
    context_length: int = 8192
    model: object = None
    tokenizer: object = None
    backend: str = "transformers"
    source: object = None  # where the model comes from (engine.models.sources.ModelSource; None: nowhere known)

    @property
    def label(self) -> str:
        return self.name

    @property
    def dtype_label(self) -> str:
        return self.dtype


@dataclass
class FakeCall:
    conversation: object
    spec: SpecConfig
    sampling: SamplingConfig
    max_new_tokens: int


@dataclass
class FakeEngine:
    """Yields GenerationStarted, rounds, GenerationFinished, like the real engine.

    delay: seconds to sleep between rounds (0: as fast as possible).
    pause_after: after this many rounds, block (still honouring `cancel`) until `resume` is set.
    fail_with: an exception to raise from generate() before anything is yielded.
    """

    target: FakeModel = field(default_factory=FakeModel)
    delay: float = 0.0
    pause_after: int | None = None
    resume: threading.Event = field(default_factory=threading.Event)
    fail_with: BaseException | None = None
    calls: list[FakeCall] = field(default_factory=list)
    releases: int = 0
    on_status: object = None  # given by the loader, as a real engine is built with it; the fake has no slow step

    def validate(self, spec: SpecConfig) -> None:
        if spec.method == "early-exit":
            check_layers(spec.param("layers"), self.target.n_layers)  # the engine's own check
        if spec.method == "draft-model" and spec.draft == "mismatch":
            raise ConfigError("the draft model's tokenizer differs from the target's (vocabulary size 49152 vs 32000)")

    def release(self) -> None:
        """The real engine frees its KV caches here (before each run of a comparison); nothing to free."""
        self.releases += 1

    def generate(self, conversation, *, spec: SpecConfig = SpecConfig(), sampling: SamplingConfig = SamplingConfig(),
                 max_new_tokens: int = 256, stop_strings=(), cancel: threading.Event | None = None,
                 system: str | None = None, record: bool = False) -> Iterator[GenerationStarted | RoundVerified | GenerationFinished]:
        self.calls.append(FakeCall(conversation, spec, sampling, max_new_tokens))
        if self.fail_with is not None:
            raise self.fail_with
        self.validate(spec)
        prompt_tokens = sum(len(m["content"].split()) for m in conversation) if isinstance(conversation, list) \
            else len(str(conversation).split())
        yield GenerationStarted(spec_label=spec.label(), method=spec.method, k=spec.k, model=self.target.name,
                                draft=spec.draft, device=self.target.device, dtype=self.target.dtype,
                                greedy=sampling.greedy, prompt_tokens=prompt_tokens, reused_prefix_tokens=0,
                                max_new_tokens=max_new_tokens, warnings=spec.warnings)
        accumulator = StatsAccumulator(spec.k)
        words = itertools.cycle(enumerate(WORDS))
        start = time.perf_counter()
        committed: list[int] = []
        pieces: list[str] = []
        stop_reason = "max-new-tokens"
        for index in itertools.count():
            if cancel is not None and cancel.is_set():
                stop_reason = "cancelled"
                break
            if len(committed) >= max_new_tokens:
                break
            if self.pause_after is not None and index == self.pause_after:
                while not self.resume.wait(0.005):
                    if cancel is not None and cancel.is_set():
                        break
                if cancel is not None and cancel.is_set():
                    stop_reason = "cancelled"
                    break
            if self.delay:
                time.sleep(self.delay)
            event = self._round(index, spec, words, max_new_tokens - len(committed), start, len(committed))
            if record:
                event = dataclasses.replace(event, detail=fake_detail(event, sampling.greedy),
                                            rollback_seconds=0.001 if event.n_accepted < len(event.draft_ids) else 0.0)
            accumulator.add_round(event)
            committed += event.committed_ids
            pieces += event.committed_pieces
            yield event
        accumulator.set_elapsed(time.perf_counter() - start)
        yield GenerationFinished(stop_reason=stop_reason, text="".join(pieces), output_ids=tuple(committed),
                                 stats=accumulator.snapshot())

    @staticmethod
    def _round(index: int, spec: SpecConfig, words, budget: int, start: float, n_before: int) -> RoundVerified:
        k = spec.k
        if index == 0 or spec.method == "none":
            n_drafted, n_accepted = 0, 0
        elif spec.method == "prompt-lookup" and index % 5 == 3:
            n_drafted, n_accepted = 0, 0  # a lookup miss: a plain step
        else:
            pattern = (k, min(1, k - 1) if k > 1 else 0, 0, max(0, k - 2), k)
            n_accepted = pattern[index % len(pattern)]
            n_drafted = k
        truth = [next(words) for _ in range(n_accepted + 1)]
        draft_ids = [i + 100 for i, _ in truth[:n_accepted]]
        draft_pieces = [w for _, w in truth[:n_accepted]]
        for j in range(n_drafted - n_accepted):
            wrong = WRONG[(index + j) % len(WRONG)]
            draft_ids.append(1000 + (index + j) % len(WRONG))
            draft_pieces.append(wrong)
        status = target_status(n_drafted, n_accepted)
        committed_ids = tuple(i + 100 for i, _ in truth)[:budget]
        committed_pieces = tuple(w for _, w in truth)[:budget]
        p_target = tuple(0.9 - 0.1 * j if j < n_accepted else 0.05 for j in range(n_drafted))
        p_draft = tuple(None if spec.method == "prompt-lookup" else 0.8 - 0.05 * j for j in range(n_drafted))
        return RoundVerified(
            index=index, drafter=spec.method if n_drafted else "none", draft_ids=tuple(draft_ids),
            draft_pieces=tuple(draft_pieces), n_accepted=n_accepted, target_id=truth[-1][0] + 100,
            target_status=status, target_piece=truth[-1][1], p_target=p_target, p_draft=p_draft,
            p_target_of_target_id=0.75, committed_ids=committed_ids, committed_pieces=committed_pieces,
            draft_seconds=0.002 * n_drafted, verify_seconds=0.01,
            elapsed_seconds=max(time.perf_counter() - start, 0.001 * (index + 1)),
            n_committed_total=n_before + len(committed_ids))


def fake_detail(event: RoundVerified, greedy: bool) -> RoundDetail:
    """A round's tree as the engine records it (engine.core.recording's shape): at each decided position the
    target's top-5 (the drafted token with its p_target first where it was kept, else the target's own token
    first), an entropy, the drafter's top-5 where it has a distribution, and when sampling the draws and the
    residual at the substitution."""
    m = len(event.draft_ids)
    positions = []
    for i in range(event.n_accepted + 1):  # the positions the target decided
        own = event.target_id if i == min(event.n_accepted, m) else (event.draft_ids[i] if i < m else 7)
        p_own = event.p_target_of_target_id or 0.75 if i == event.n_accepted else (event.p_target[i] if i < m else 0.6)
        ids = (own, 11, 12, 13, 14)
        probs = (p_own, 0.1, 0.05, 0.03, 0.02)
        target = Alternatives(ids, probs, tuple(f"w{t}" for t in ids))
        draft = None
        if i < m and event.p_draft[i] is not None:
            draft = Alternatives((event.draft_ids[i], 11, 12, 13, 14), (event.p_draft[i], 0.08, 0.04, 0.02, 0.01),
                                 (event.draft_pieces[i], "w11", "w12", "w13", "w14"))
        draw = None if greedy or i >= m else (0.1 if i < event.n_accepted else 0.97)
        residual = None
        if not greedy and i == event.n_accepted < m:
            residual = Alternatives((event.target_id, 11, 12, 13, 14), (0.7, 0.1, 0.08, 0.07, 0.05),
                                    (event.target_piece, "w11", "w12", "w13", "w14"))
        positions.append(PositionDetail(target, 1.0 + 0.5 * i, draft, draw, residual))
    return RoundDetail(tuple(positions))
