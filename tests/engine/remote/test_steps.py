"""engine.remote.steps: a server's listed speculative steps laid over the chunks it streamed."""

from __future__ import annotations

import random

from engine.remote.steps import Step, place_steps


def truth(rng: random.Random, k: int = 3):
    """A random reply: (steps, per-step accepted, drafted) as vLLM would list them (plain steps unlisted)."""
    steps, at = [Step(0, 1, 0, 0)], 1
    for _ in range(rng.randint(0, 12)):
        if rng.random() < 0.3:
            steps.append(Step(at, 1, 0, 0))
        else:
            a = rng.randint(0, k)
            steps.append(Step(at, a + 1, k, a))
        at += steps[-1].size
    listed = [s for s in steps if s.drafted]
    return steps, [s.accepted for s in listed], [s.drafted for s in listed]


def test_chunks_that_follow_steps_with_no_fully_turned_down_step_place_them_exactly():
    rng = random.Random(5)
    checked = 0
    for _ in range(400):
        steps, accepted, drafted = truth(rng)
        if any(s.drafted and s.size == 1 for s in steps):
            continue
        placement = place_steps([s.size for s in steps], accepted, drafted)
        assert placement is not None and placement.unique and placement.steps == tuple(steps)
        checked += 1
    assert checked > 100


def test_every_reply_has_a_placement_that_adds_up_even_with_merged_chunks():
    rng = random.Random(11)
    for _ in range(400):
        steps, accepted, drafted = truth(rng)
        sizes = [steps[0].size]
        for step in steps[1:]:  # a late reader gets several steps in one chunk
            if rng.random() < 0.3:
                sizes[-1] += step.size
            else:
                sizes.append(step.size)
        placement = place_steps(sizes, accepted, drafted)
        assert placement is not None
        listed = [s for s in placement.steps if s.drafted]
        assert [s.accepted for s in listed] == accepted and sum(s.size for s in placement.steps) == sum(sizes)
        if placement.unique:
            assert placement.steps == tuple(steps)


def test_a_fully_turned_down_step_among_one_token_steps_is_placed_earliest_and_said_to_be_a_choice():
    placement = place_steps([1, 1, 1, 1], [0], [3])
    assert not placement.unique and [s.drafted for s in placement.steps] == [0, 3, 0, 0]


def test_the_last_step_may_be_cut_by_a_stop_and_counts_that_do_not_fit_place_nothing():
    placement = place_steps([1, 1], [3], [3])  # kept 3, the first was the end of the reply
    assert placement.unique and placement.steps[1] == Step(1, 1, 3, 3)
    assert place_steps([1, 4], [3, 0], [3, 3]) is None  # 1 + 4 + 1 tokens at least
    assert place_steps([1, 1, 1], [2, 0], [3, 3]) is None  # the first listed step commits 3
    merged = place_steps([1, 2], [0], [3])  # a step of 0 kept can't commit 2: the chunk held two steps
    assert merged is not None and not merged.one_chunk_a_step
    assert place_steps([1], [], []).steps == (Step(0, 1, 0, 0),) and place_steps([1], [0], [1]) is None
    assert place_steps([2, 1], [2], [1]) is None  # kept more than drafted
