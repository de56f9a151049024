"""One round of speculative decoding, step by step: how much room is left, the target's verifying pass over a
draft (engine.core.verify decides), and what the round commits (cut at EOS, the room, a stop string), told as
a RoundVerified event. The Engine (engine.core.engine) strings rounds together.

Touches a Runner (forward, rollback) and torch tensors; nothing else.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from engine.core.chat import IncrementalDetokenizer, find_stop
from engine.core.config import SamplingConfig
from engine.core.drafting import Proposal
from engine.core.events import RoundDetail, RoundVerified, target_status, tree_target_status
from engine.core.recording import record_round
from engine.core.runner import Runner
from engine.core.sampling import probabilities
from engine.core.stats import StatsAccumulator
from engine.core.tree import rejection_sample_tree, verify_tree_greedy
from engine.core.tree_shape import path_first
from engine.core.verify import align_vocab, rejection_sample, uniform_draws, verify_greedy_drafted


@dataclass(slots=True)
class Generation:
    """What one generation has produced so far (the loop's mutable state, passed from step to step)."""

    ids: list[int]  # prompt + everything committed
    feed: list[int]  # what the first (prefill) round feeds the target: the prompt after the cached prefix
    detok: IncrementalDetokenizer
    stats: StatsAccumulator
    generator: torch.Generator
    started: float
    output: list[int] = field(default_factory=list)
    text: str = ""
    index: int = 0  # of the next round; 0 is the prefill
    stop_reason: str | None = None
    error: str | None = None
    piece: Callable[[int], str] | None = None  # an id's text, when the rounds' trees are recorded


@dataclass(frozen=True, slots=True)
class Verdict:
    """One round's draft and what the target made of it, with the times of both steps."""

    proposal: Proposal
    n_accepted: int
    target_id: int
    p_target: list[float]
    p_draft: list[float | None]
    p_own: float
    draft_seconds: float
    verify_seconds: float  # the pass and the rollback
    rollback_seconds: float = 0.0
    detail: RoundDetail | None = None
    network_seconds: float = 0.0  # the network's share of verify_seconds (a target on a server)


def room_left(state: Generation, cancel: threading.Event, max_new_tokens: int, context_length: int) -> int:
    """How many tokens this round may still commit; ≤ 0 with the stop reason set when none."""
    if cancel.is_set():
        state.stop_reason = "cancelled"
        return 0
    room = min(max_new_tokens - len(state.output), context_length - len(state.ids))
    if room <= 0:
        state.stop_reason = "max-new-tokens" if len(state.output) >= max_new_tokens else "context-full"
    return room


@dataclass(frozen=True, slots=True)
class Checked:
    """What the target's verifying pass decided about a draft (verify_pass)."""

    n_accepted: int
    target_id: int  # the correction, the bonus, or a plain step's token
    p_target: list[float]  # m: the target's probability of each drafted token
    p_draft: list[float | None]  # m: the drafter's (None: a drafter without a distribution)
    p_own: float  # the target's probability of its own token
    rollback_seconds: float
    detail: RoundDetail | None = None  # the round's tree, when recorded


@torch.inference_mode()
def verify_pass(runner: Runner, feed: list[int], proposal: Proposal, sampling: SamplingConfig,
                generator: torch.Generator, piece: Callable[[int], str] | None = None) -> Checked:
    """One target forward pass over the pending token(s) plus the m drafted ids, logits (m+1, V) for the draft
    positions and the bonus; then accept and roll back. `proposal.p_draft`, where given, is (m, V_draft). With
    `piece` (an id's text) the round's tree is recorded too (engine.core.recording); without, nothing more
    runs than the decision needs."""
    draft_ids = proposal.ids
    m = len(draft_ids)
    logits = runner.forward(feed + draft_ids, m + 1)
    draws = p_draft_rows = None
    if sampling.greedy:
        # the round's tree (piece) reads the very softmax the decision used
        rows = torch.softmax(logits, dim=-1)
        n_accepted, target_id, p_target, p_own, p_draft = verify_greedy_drafted(rows, draft_ids, proposal.p_draft)
        p_target_rows = rows.float() if piece is not None else None
    else:
        p_target_rows = probabilities(logits, sampling)
        p_draft_rows = None if proposal.p_draft is None else \
            align_vocab(proposal.p_draft.to(p_target_rows.device), p_target_rows.shape[-1])
        draws = uniform_draws(m, generator, p_target_rows.device) if piece is not None else None
        n_accepted, target_id, p_target, p_draft, p_own = rejection_sample(
            p_target_rows, p_draft_rows, draft_ids, generator, draws)
        if proposal.p_draft is None:
            p_draft = [None] * m
    detail = None if piece is None else record_round(
        p_target_rows, proposal.p_draft if p_draft_rows is None else p_draft_rows, draft_ids, n_accepted, draws, piece,
        logits=logits if sampling.greedy else None)
    # The cache holds everything fed; keep it up to the last accepted draft token. The target's own
    # token is not in it yet: it is fed at the start of the next round.
    t_rollback = time.perf_counter()
    runner.rollback(len(runner.ids) - (m - n_accepted))
    return Checked(n_accepted, target_id, p_target, p_draft, p_own, time.perf_counter() - t_rollback, detail)


@torch.inference_mode()
def verify_tree_pass(runner: Runner, feed: list[int], proposal: Proposal, sampling: SamplingConfig,
                     generator: torch.Generator, piece: Callable[[int], str] | None = None
                     ) -> tuple[Checked, Proposal]:
    """verify_pass for a tree (Proposal.parents): one target pass over `feed` and every node
    (Runner.forward_tree), the kept path chosen (engine.core.tree), the cache cut to it (Runner.keep_path).
    Returns what was decided and the proposal re-ordered with the kept path first, as a round event lists it."""
    ids, parents = proposal.ids, proposal.parents
    logits = runner.forward_tree(feed, ids, parents)
    if sampling.greedy:
        rows = torch.softmax(logits, dim=-1)
        path, target_id, p_target, p_own = verify_tree_greedy(rows, ids, parents)
        p_draft = _drafted_probabilities(proposal)
    else:
        rows = probabilities(logits, sampling)
        q = None if proposal.p_draft is None else proposal.p_draft.to(rows.device)
        path, target_id, p_target, p_draft, p_own = rejection_sample_tree(rows, q, ids, parents, generator)
    order = path_first(parents, path)
    detail = None
    if piece is not None:  # the kept path's positions, as a chain's are recorded
        kept = order[:len(path)]
        q_rows = None if proposal.p_draft is None else proposal.p_draft[kept]
        detail = record_round(rows[[0] + [i + 1 for i in kept]].float(), q_rows, [ids[i] for i in kept], len(path),
                              None, piece, logits=logits[[0] + [i + 1 for i in kept]] if sampling.greedy else None)
    t_rollback = time.perf_counter()
    runner.keep_path(path)
    checked = Checked(len(path), target_id, [p_target[i] for i in order], [p_draft[i] for i in order], p_own,
                      time.perf_counter() - t_rollback, detail)
    return checked, proposal.kept(order)


def _drafted_probabilities(proposal: Proposal) -> list[float | None]:
    """The drafter's probability of each node's token, from its rows (None each where it has none)."""
    if proposal.p_draft is None:
        return [None] * len(proposal.ids)
    rows = proposal.p_draft.detach().float().cpu().numpy()
    return [float(rows[i, x]) if x < rows.shape[-1] else 0.0 for i, x in enumerate(proposal.ids)]


def commit_round(state: Generation, verdict: Verdict, drafter_name: str, room: int, max_new_tokens: int,
                 stop_strings: tuple[str, ...], eos_ids) -> RoundVerified:
    """Append what the round keeps (cut at EOS, the room, a stop string) and describe it as an event."""
    draft_ids, n_accepted = verdict.proposal.ids, verdict.n_accepted
    committed = draft_ids[:n_accepted] + [verdict.target_id]
    cut = next((i + 1 for i, t in enumerate(committed) if t in eos_ids), None)
    if cut is not None:
        committed, state.stop_reason = committed[:cut], "eos"
    if len(committed) >= room:
        committed = committed[:room]
        state.stop_reason = state.stop_reason or (
            "max-new-tokens" if len(state.output) + len(committed) >= max_new_tokens else "context-full")
    tree_parents = verdict.proposal.parents or ()
    # Rejected tokens are decoded after the accepted ones (their text may finish a character); a tree's other
    # branches are no continuation of the kept path: each of their tokens is decoded alone
    if n_accepted >= len(draft_ids):
        rejected_pieces = []
    elif tree_parents:
        rejected_pieces = [state.detok.text_of(token) for token in draft_ids[n_accepted:]]
    else:
        rejected_pieces = state.detok.peek(draft_ids)[n_accepted:]
    pieces = state.detok.add(committed)
    state.ids.extend(committed)
    state.output.extend(committed)
    if stop_strings:
        pieces, state.stop_reason, state.text = apply_stop(state.text, pieces, stop_strings, state.stop_reason)
    else:
        state.text += "".join(pieces)
    draft_pieces = tuple(pieces[:n_accepted] + [""] * max(0, n_accepted - len(pieces)) + rejected_pieces)
    return RoundVerified(
        index=state.index, drafter=drafter_name if draft_ids else "target", draft_ids=tuple(draft_ids),
        draft_pieces=draft_pieces, n_accepted=n_accepted, target_id=verdict.target_id,
        target_status=tree_target_status(tree_parents, n_accepted) if tree_parents else target_status(
            len(draft_ids), n_accepted),
        target_piece=pieces[n_accepted] if len(pieces) > n_accepted else "",
        p_target=tuple(verdict.p_target), p_draft=tuple(verdict.p_draft),
        p_target_of_target_id=verdict.p_own, committed_ids=tuple(committed), committed_pieces=tuple(pieces),
        draft_seconds=verdict.draft_seconds, verify_seconds=verdict.verify_seconds,
        elapsed_seconds=time.perf_counter() - state.started, n_committed_total=len(state.output),
        rollback_seconds=verdict.rollback_seconds, detail=verdict.detail, network_seconds=verdict.network_seconds,
        draft_sources=verdict.proposal.sources or (), tree_parents=tuple(tree_parents))


def apply_stop(text: str, pieces: list[str], stop_strings, stop_reason):
    """Cut this round's pieces where a stop string begins. Text streamed in an earlier round stays, so that
    the final text is always what was shown (a stop string spanning rounds leaves its first part).
    Returns pieces, stop reason, text so far."""
    joined = text + "".join(pieces)
    at = find_stop(joined, stop_strings, len(text))
    if at is None:
        return pieces, stop_reason, joined
    kept, length = [], len(text)
    for piece in pieces:
        take = max(0, min(len(piece), at - length))
        kept.append(piece[:take])
        length += len(piece)
    return kept, "stop-string", text + "".join(kept)
