"""A reply's rounds as the round views read them (the timeline, the round's tree, the token popover, colour-by):
one `RoundRecord` per engine round, holding the very `RoundVerified` event (its drafted ids, accepted count,
times and, when recorded, its `RoundDetail`) and the serials of the display tokens it became, so a round and
its tokens find each other both ways. A reopened chat's rounds are the stored rounds read back as events
(gui.persistence.records.round_event), so they read the same as live ones.

The per-token figures the views colour by are defined here once, from the engine's own definitions
(engine.core.sampling.acceptance_probability), so the legend, the tooltip and the tree agree; so are a server's
steps (rounds with no draft or verify time of their own: the timeline draws their wall time) and the drafts a
server turned down without naming them (the transcript draws a placeholder).

May touch: engine events and tokens (read), engine.core.sampling's scalar definitions. Never Qt, never a widget.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.core.events import PositionDetail, RoundDetail, RoundVerified, TokenStatus
from engine.core.sampling import acceptance_probability
from engine.core.tokens import DisplayToken

MAX_ENTROPY_BITS = 8.0  # colour-by entropy: this many bits and more is the far end of the scale
from engine.remote.steps import SERVER_DRAFTER  # the drafter a server's rounds name (its steps, not our rounds)
UNNAMED_GHOST = "▯"  # what a draft a server turned down without naming it is drawn as (unnamed_draft)


@dataclass(frozen=True, slots=True)
class RoundRecord:
    """One round of one reply: the engine's event and the serials of its display tokens (display order)."""

    turn: int  # the assistant turn's index in the conversation
    event: RoundVerified
    serials: tuple[int, ...]

    @property
    def index(self) -> int:
        return self.event.index

    @property
    def drafter(self) -> str:
        return self.event.drafter

    @property
    def n_drafted(self) -> int:
        return len(self.event.draft_ids)

    @property
    def n_accepted(self) -> int:
        return self.event.n_accepted

    @property
    def is_tree(self) -> bool:
        """The round drafted a token tree (RoundVerified.tree_parents)."""
        return self.event.is_tree

    @property
    def depth(self) -> int:
        """How deep its draft went: the tree's deepest node's depth counted from 1 (a chain: its length)."""
        depths = self.event.depths
        return max(depths) + 1 if depths else 0

    @property
    def n_committed(self) -> int:
        return len(self.event.committed_ids)

    @property
    def draft_seconds(self) -> float:
        return self.event.draft_seconds

    @property
    def rollback_seconds(self) -> float:
        return self.event.rollback_seconds

    @property
    def network_seconds(self) -> float:
        """The network's share of the verify time (a target on a server verifying drafts made here)."""
        return self.event.network_seconds

    @property
    def verify_seconds(self) -> float:
        """The target's pass alone (the event's verify time less the rollback and the network in it)."""
        return max(0.0, self.event.verify_seconds - self.event.rollback_seconds - self.event.network_seconds)

    @property
    def seconds(self) -> float:
        return self.event.draft_seconds + self.event.verify_seconds

    @property
    def detail(self) -> RoundDetail | None:
        return self.event.detail

    def position_detail(self, position: int | None) -> PositionDetail | None:
        """What was recorded at a verified position (0…n_drafted; None: a plain step, its only position 0)."""
        detail = self.event.detail
        at = 0 if position is None else position
        if detail is None or not 0 <= at < len(detail.positions):
            return None
        return detail.positions[at]

    def as_dict(self) -> dict:
        """The scripted run's JSON of a round."""
        return {"index": self.index, "drafter": self.drafter, "drafted": self.n_drafted, "accepted": self.n_accepted,
                **({"tree_depth": self.depth} if self.is_tree else {}), "committed": self.n_committed,
                "draft_ms": round(1000 * self.draft_seconds, 3),
                "verify_ms": round(1000 * self.verify_seconds, 3),
                "rollback_ms": round(1000 * self.rollback_seconds, 3),
                **({"network_ms": round(1000 * self.network_seconds, 3)} if self.network_seconds else {})}


def is_server_step(record: RoundRecord) -> bool:
    """A server's step (engine.remote): it says when the step's tokens arrived, not how long drafting and verifying
    took (its draft and verify times are 0)."""
    return record.drafter == SERVER_DRAFTER and record.draft_seconds == 0 and record.event.verify_seconds == 0


def step_seconds(rounds, position: int) -> float:
    """The wall time of the round at `position` of a reply's rounds as their arrivals tell it: from the round before
    it (the reply's start, for the first) to its own elapsed_seconds."""
    before = rounds[position - 1].event.elapsed_seconds if position > 0 else 0.0
    return max(0.0, rounds[position].event.elapsed_seconds - before)


def records_of(turn: int, events, first_serial: int, counts) -> list[RoundRecord]:
    """The RoundRecords of a turn's events whose display tokens are numbered from `first_serial`, `counts[i]`
    tokens for events[i] (a reopened reply)."""
    out, serial = [], first_serial
    for event, count in zip(events, counts):
        out.append(RoundRecord(turn, event, tuple(range(serial, serial + count))))
        serial += count
    return out


# ---------------------------------------------------------------------- per-token figures
def unnamed_draft(token: DisplayToken) -> bool:
    """A drafted token a server turned down and does not name (id -1, no text): its step says how many it drafted,
    not which (engine.core.events.RoundsRevised)."""
    return token.status is TokenStatus.REJECTED and token.token_id == -1 and not token.text


def token_acceptance(token: DisplayToken) -> float | None:
    """min(1, p_target/p_draft) of a drafted token (one-hot drafters: p_target); None for the target's own and for a
    server's draft (its drafter's p_draft stays on the server)."""
    if token.status not in (TokenStatus.ACCEPTED, TokenStatus.REJECTED) or token.drafter == SERVER_DRAFTER:
        return None
    return acceptance_probability(token.p_target, token.p_draft)


def token_entropy(token: DisplayToken, record: RoundRecord | None) -> float | None:
    """The target's entropy (bits) where it decided this token, when the round was recorded."""
    if record is None or (record.is_tree and token.status is TokenStatus.REJECTED):  # a tree records its kept path
        return None
    detail = record.position_detail(token.position)
    return None if detail is None else detail.entropy_bits


def token_confidence(token: DisplayToken) -> float | None:
    """The drafter's probability of the token it drafted (None: not drafted, or a drafter with no
    distribution)."""
    if token.status not in (TokenStatus.ACCEPTED, TokenStatus.REJECTED):
        return None
    return token.p_draft
