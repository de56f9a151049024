"""The per-round draft and verify times are accounted inside the generation's time: the stats add up the rounds'
own times, and the clocks nest (rounds ⊂ the engine's elapsed ⊂ the caller's wall clock). How large a share the
rounds take is a figure, not an assertion: `python -m benchmarks.round_times` prints it."""

from __future__ import annotations

import time

import pytest

from engine.core.config import SpecConfig
from engine.runtime import local_engine
from engine_testkit import run

PROMPT = [5, 9, 20, 31] * 4


def test_draft_and_verify_times_nest_inside_the_generation_time(tiny_model, tiny_draft_dir):
    """A draft model: both parts of a round do real passes (a lookup's rounds are so short on the tiny model
    that the bookkeeping between them would weigh more than anything a real model shows)."""
    spec = SpecConfig("draft-model", k=4, draft=str(tiny_draft_dir))
    engine = local_engine(tiny_model)
    run(engine, PROMPT, max_new_tokens=4, spec=spec)  # the draft loaded and warmed up outside the timing
    engine.release()
    started = time.perf_counter()
    _, rounds, finished = run(engine, PROMPT, max_new_tokens=96, spec=spec)
    wall = time.perf_counter() - started
    accounted = sum(r.draft_seconds + r.verify_seconds for r in rounds)
    stats = finished.stats
    print(f"\n{len(rounds)} rounds, draft + verify {accounted:.3f} s, engine's elapsed "
          f"{stats.elapsed_seconds:.3f} s, wall {wall:.3f} s ({accounted / wall:.1%})")
    assert len(finished.output_ids) == 96 and len(rounds) > 10 and stats.drafted_tokens > 0
    assert accounted == pytest.approx(stats.draft_seconds + stats.verify_seconds)
    assert 0 < accounted <= stats.elapsed_seconds <= wall  # nested clocks: the rounds lie inside the generation
    assert all(r.draft_seconds > 0 and r.verify_seconds > 0 for r in rounds[1:])  # both sides did real passes
