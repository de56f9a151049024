"""What the engine tells the world: frozen events, one per round (never per token).

A round drafts `draft_ids`, the target keeps the first `n_accepted` of them and adds one token of its own,
`target_id`: the correction at the first disagreement (SUBSTITUTED), a bonus after a fully accepted draft
(BONUS), or a plain decoding step when nothing was drafted (PLAIN). Stops (EOS, stop strings, the token
budget) may cut what a round commits: `committed_ids` is always what was really appended to the output.

Plain data: imports only engine.core.stats (the figures a finished event carries). How a round is drawn, token
by token, is engine.core.tokens' fold.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from engine.core.stats import GenerationStats, ServerStats


class TokenStatus(enum.Enum):
    PROMPT = "prompt"
    PLAIN = "plain"  # decoded by the target alone (baseline, or a round with nothing drafted)
    ACCEPTED = "accepted"  # drafted and kept
    REJECTED = "rejected"  # drafted and thrown away (never part of the output)
    SUBSTITUTED = "substituted"  # the target's correction at the first rejected position
    BONUS = "bonus"  # the target's extra token after all drafted tokens were kept


def target_status(n_drafted: int, n_accepted: int) -> TokenStatus:
    """What the target's own token of a round is: a plain step, a bonus after a fully kept draft, or the
    correction at the first rejected position."""
    if not n_drafted:
        return TokenStatus.PLAIN
    return TokenStatus.BONUS if n_accepted == n_drafted else TokenStatus.SUBSTITUTED


@dataclass(frozen=True, slots=True)
class GenerationStarted:
    spec_label: str
    method: str
    k: int
    model: str
    draft: str | None
    device: str
    dtype: str
    greedy: bool
    prompt_tokens: int
    reused_prefix_tokens: int  # prompt tokens whose KV cache was kept from the previous message
    max_new_tokens: int
    warnings: tuple[str, ...] = ()
    rollback: str = ""  # how a rejected draft is cut off a recurrent state, and what that costs (else "")


@dataclass(frozen=True, slots=True)
class RoundVerified:
    index: int  # 0 is the prefill round
    drafter: str
    draft_ids: tuple[int, ...]
    draft_pieces: tuple[str, ...]  # text of each drafted token, in context
    n_accepted: int
    target_id: int
    target_status: TokenStatus  # SUBSTITUTED, BONUS or PLAIN
    target_piece: str
    p_target: tuple[float, ...]  # per drafted position: target probability of the drafted token
    p_draft: tuple[float | None, ...]  # per drafted position; None for one-hot drafters (n-gram)
    p_target_of_target_id: float | None  # the target's probability of its own token (1.0 if greedy argmax);
    # None where it is not known (a server that does not give it: engine.remote.engine)
    committed_ids: tuple[int, ...]  # what this round appended (a stop may cut it short)
    committed_pieces: tuple[str, ...]
    draft_seconds: float
    verify_seconds: float
    elapsed_seconds: float  # since the generation started
    n_committed_total: int

    @property
    def accepted_ids(self) -> tuple[int, ...]:
        return self.draft_ids[: self.n_accepted]

    @property
    def rejected_ids(self) -> tuple[int, ...]:
        return self.draft_ids[self.n_accepted:]

    @property
    def rejected_pieces(self) -> tuple[str, ...]:
        return self.draft_pieces[self.n_accepted:]

    @property
    def correction_id(self) -> int | None:
        return self.target_id if self.target_status is TokenStatus.SUBSTITUTED else None

    @property
    def bonus_id(self) -> int | None:
        return self.target_id if self.target_status is TokenStatus.BONUS else None

    @property
    def committed_statuses(self) -> tuple[TokenStatus, ...]:
        statuses = (TokenStatus.ACCEPTED,) * self.n_accepted + (self.target_status,)
        return statuses[: len(self.committed_ids)]

    @property
    def text(self) -> str:
        return "".join(self.committed_pieces)


@dataclass(frozen=True, slots=True)
class GenerationFinished:
    stop_reason: str  # eos | stop-string | max-new-tokens | cancelled | context-full | out-of-memory
    text: str
    output_ids: tuple[int, ...]
    stats: GenerationStats
    error: str | None = None  # a message for the user when the reply ended on a problem (out of memory)
    server: ServerStats | None = None  # a remote server's own figures (engine.remote.engine); None when local


Event = GenerationStarted | RoundVerified | GenerationFinished


def event_to_dict(event: Event) -> dict:
    """A JSON-ready dict with a `type` key (`started`, `round`, `finished`)."""
    kind = {GenerationStarted: "started", RoundVerified: "round", GenerationFinished: "finished"}[type(event)]
    out: dict = {"type": kind}
    for name in event.__slots__:
        value = getattr(event, name)
        if isinstance(value, TokenStatus):
            value = value.value
        elif isinstance(value, (GenerationStats, ServerStats)):
            value = value.as_dict()
        elif isinstance(value, tuple):
            value = list(value)
        out[name] = value
    if isinstance(event, RoundVerified):
        out["committed_statuses"] = [s.value for s in event.committed_statuses]
    return out
