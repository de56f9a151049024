"""A server's own speculative steps laid over the tokens it streamed, so that each token gets its status.

vLLM started with `--per-request-spec-decode-metrics detailed` reports, in a reply's last chunk, each verify step
that drafted: how many tokens it drafted (`per_step_drafted`) and how many of them the target kept
(`per_step_accepted`), in order. A step commits its kept drafts and then one token of the target's own (a
correction where it turned a draft down, a bonus where it kept them all); the steps that drafted nothing (an
n-gram lookup that found no match) are not listed, and neither is the first token (the prompt's pass). The
stream sends each engine step's tokens in one chunk, or several steps in one chunk where the client read late.

`place_steps` finds where the listed steps lie among the tokens: the first token is the prompt pass's, every
other step is either the next listed one (its kept drafts + 1 tokens; the last step may be cut short by a stop:
vLLM counts drafts it kept past the end) or a plain step of one token, and no step straddles two chunks. Chunks
of several tokens pin their steps; a one-token step that turned down all its drafts and a plain one look the
same, so where a listed step of 0 kept could be one of several one-token chunks there is more than one placement:
the earliest is taken and `Placement.unique` says it was a choice. One step per chunk is tried first; only where
no such placement fits may a chunk hold several steps. `server_rounds` turns a placement into the
RoundVerified of each step (drafted tokens the server turned down are unknown: id −1, no text).

Pure functions of counts and events: no network, no Qt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from engine.core.events import RoundVerified, TokenStatus, target_status

UNKNOWN_ID = -1  # a token the server does not name (a draft it turned down; any token of a server without ids)
SERVER_DRAFTER = "server"  # the drafter a server's rounds name (its own steps, not a round of SpecScope's loop)


@dataclass(frozen=True, slots=True)
class Step:
    start: int  # the index of its first token in the reply
    size: int  # the tokens it committed
    drafted: int  # 0: a plain step
    accepted: int


@dataclass(frozen=True, slots=True)
class Placement:
    steps: tuple[Step, ...]
    unique: bool  # no other placement fits the chunks
    one_chunk_a_step: bool = True  # each chunk is one step (else some chunks held several: a late reader)


def place_steps(chunk_sizes: Sequence[int], accepted: Sequence[int], drafted: Sequence[int]) -> Placement | None:
    """The steps of a reply of sum(chunk_sizes) tokens that drafted `drafted[j]` and kept `accepted[j]` at its j-th
    drafting step (see the module docstring): a placement with one step per chunk where one fits (the stream
    followed the steps), else one where chunks may hold several steps; None where none fits (the counts are not
    this reply's)."""
    return _place(chunk_sizes, accepted, drafted, True) or _place(chunk_sizes, accepted, drafted, False)


def _place(chunk_sizes: Sequence[int], accepted: Sequence[int], drafted: Sequence[int],
           one_chunk_a_step: bool) -> Placement | None:
    if len(accepted) != len(drafted) or any(a < 0 or d < a for a, d in zip(accepted, drafted)):
        return None
    n = sum(chunk_sizes)
    if n < 1 or any(size < 1 for size in chunk_sizes) or (one_chunk_a_step and chunk_sizes[0] != 1):
        return None
    if n == 1:
        return Placement((Step(0, 1, 0, 0),), unique=True) if not accepted else None
    chunk_end = []
    for size in chunk_sizes:
        chunk_end += [len(chunk_end) + size] * size
    n_steps = len(accepted)
    before = [0]  # tokens the first j listed steps commit, uncut
    for a in accepted:
        before.append(before[-1] + a + 1)

    def fits(t: int, size: int) -> bool:
        return t + size == chunk_end[t] if one_chunk_a_step else t + size <= chunk_end[t]

    def moves(t: int, j: int):
        """(next t, next j, step) from token t with j listed steps placed."""
        if fits(t, 1):
            yield t + 1, j, Step(t, 1, 0, 0)
        if j < n_steps:
            size = accepted[j] + 1
            if fits(t, size):
                yield t + size, j + 1, Step(t, size, drafted[j], accepted[j])
            elif j == n_steps - 1 and n - t < size and fits(t, n - t):  # the last step, cut by a stop
                yield n, j + 1, Step(t, n - t, drafted[j], accepted[j])

    # ways[(t, j)]: placements of tokens t… with listed steps j… (capped at 2), from the end backwards; a state's
    # plain steps so far are t − 1 − before[j], at most the reply's plain steps
    most_plain = n - 1 - (before[-1] - accepted[-1] if n_steps else 0)
    ways: dict[tuple[int, int], int] = {(n, n_steps): 1}
    for t in range(n - 1, 0, -1):
        for j in range(_first_at_least(before, t - 1 - most_plain), n_steps + 1):
            if before[j] > t - 1:
                break
            total = sum(ways.get((t2, j2), 0) for t2, j2, _ in moves(t, j))
            if total:
                ways[(t, j)] = min(total, 2)
    if not ways.get((1, 0)):
        return None
    steps, t, j = [Step(0, 1, 0, 0)], 1, 0
    while t < n:  # the earliest placement: a listed step before a plain one wherever both fit
        options = sorted(moves(t, j), key=lambda move: -move[2].drafted)
        t, j, step = next(move for move in options if ways.get(move[:2], 0))
        steps.append(step)
    return Placement(tuple(steps), unique=ways[(1, 0)] == 1, one_chunk_a_step=one_chunk_a_step)


def _first_at_least(values: list[int], floor: int) -> int:
    """The first index whose value is ≥ floor (values ascending)."""
    lo, hi = 0, len(values)
    while lo < hi:
        mid = (lo + hi) // 2
        if values[mid] < floor:
            lo = mid + 1
        else:
            hi = mid
    return lo


def server_rounds(tokens: Sequence[RoundVerified], placement: Placement) -> tuple[RoundVerified, ...]:
    """One RoundVerified per server step, from the reply's one-token plain rounds (their ids, text, probabilities
    and arrival times): a step's kept drafts are ACCEPTED, its own token SUBSTITUTED or BONUS, the drafts it turned
    down unknown (id −1, no text); a step a stop cut short commits what came."""
    rounds = []
    for index, step in enumerate(placement.steps):
        mine = tokens[step.start: step.start + step.size]
        ids = tuple(r.target_id for r in mine)
        pieces = tuple(r.target_piece for r in mine)
        probs = tuple(r.p_target_of_target_id for r in mine)
        kept = min(step.accepted, step.size)
        reached = step.size > step.accepted  # the step's own token came (no stop cut it)
        unknown = step.drafted - kept
        p_kept = probs[:kept] if all(p is not None for p in probs[:kept]) else ()
        own = step.accepted if reached else None
        rounds.append(RoundVerified(
            index=index, drafter=SERVER_DRAFTER, draft_ids=ids[:kept] + (UNKNOWN_ID,) * unknown,
            draft_pieces=pieces[:kept] + ("",) * unknown, n_accepted=step.accepted,
            target_id=ids[own] if own is not None else UNKNOWN_ID,
            target_status=target_status(step.drafted, step.accepted),
            target_piece=pieces[own] if own is not None else "", p_target=p_kept, p_draft=(),
            p_target_of_target_id=probs[own] if own is not None else None, committed_ids=ids,
            committed_pieces=pieces, draft_seconds=0.0, verify_seconds=0.0, elapsed_seconds=mine[-1].elapsed_seconds,
            n_committed_total=step.start + step.size))
    return tuple(rounds)


def placement_note(server: str, placement: Placement | None, n_listed: int) -> str:
    """How the reply's tokens got their statuses, in one sentence."""
    if placement is None:
        return (f"{server}'s reported steps ({n_listed} that drafted) don't add up to the tokens it sent, so tokens "
                "are shown plain")
    drafting = sum(1 for s in placement.steps if s.drafted)
    plain = len(placement.steps) - drafting
    said = (f"coloured by {server}'s own steps ({drafting} that drafted, {plain} plain; the drafts it turned down "
            "are not named, so they show as ▯)")
    if not placement.one_chunk_a_step:
        said += "; some chunks held several steps (the reader fell behind), so they were split by the counts"
    if placement.unique:
        return said
    return (said + "; a step that turned down all its drafts looks like a plain one-token step, and more than one "
            "placement fits here: the earliest is shown")
