"""What the engine tells the world: frozen events, one per round (never per token).

A round drafts `draft_ids`, the target keeps the first `n_accepted` of them and adds one token of its own,
`target_id`: the correction at the first disagreement (SUBSTITUTED), a bonus after a fully accepted draft
(BONUS), or a plain decoding step when nothing was drafted (PLAIN). Stops (EOS, stop strings, the token
budget) may cut what a round commits: `committed_ids` is always what was really appended to the output.

Plain data: imports only engine.core.stats (the figures a finished event carries) and engine.core.tree_shape. How a round is drawn, token
by token, is engine.core.tokens' fold.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from engine.core.stats import GenerationStats, ServerStats
from engine.core.tree_shape import ghost_line, node_depths


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


def tree_target_status(tree_parents, n_accepted: int) -> TokenStatus:
    """target_status for a tree listed kept path first (RoundVerified.tree_parents): a bonus where the kept
    path ends on a leaf (everything drafted along it was kept), else the correction of the tip's children."""
    if not tree_parents:
        return TokenStatus.PLAIN
    return TokenStatus.SUBSTITUTED if n_accepted - 1 in set(tree_parents) else TokenStatus.BONUS


@dataclass(frozen=True, slots=True)
class Alternatives:
    """A distribution's most likely tokens at one position, most likely first: ids, probabilities, text."""

    ids: tuple[int, ...]
    probs: tuple[float, ...]
    pieces: tuple[str, ...]

    def as_dict(self) -> dict:
        return {"ids": list(self.ids), "probs": [round(p, 5) for p in self.probs], "pieces": list(self.pieces)}

    @classmethod
    def from_dict(cls, data: dict | None) -> "Alternatives | None":
        if not data:
            return None
        return cls(tuple(int(i) for i in data.get("ids", ())), tuple(float(p) for p in data.get("probs", ())),
                   tuple(str(t) for t in data.get("pieces", ())))


@dataclass(frozen=True, slots=True)
class PositionDetail:
    """What the target and the drafter made of one verified position of a round (engine.core.recording)."""

    target: Alternatives  # the target's top alternatives (under the sampling settings the rule used)
    entropy_bits: float  # of the target's distribution there
    draft: Alternatives | None = None  # the drafter's, where it has a distribution (not n-gram, not bonus)
    draw: float | None = None  # sampling: the uniform u; the drafted token was kept iff u < p_target/p_draft
    residual: Alternatives | None = None  # at a sampled substitution: norm(max(0, p_target − p_draft))

    def as_dict(self) -> dict:
        out = {"target": self.target.as_dict(), "entropy_bits": round(self.entropy_bits, 4)}
        for name in ("draft", "residual"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name).as_dict()
        if self.draw is not None:
            out["draw"] = round(self.draw, 6)
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "PositionDetail":
        return cls(Alternatives.from_dict(data.get("target")) or Alternatives((), (), ()),
                   float(data.get("entropy_bits", 0.0)), Alternatives.from_dict(data.get("draft")),
                   None if data.get("draw") is None else float(data["draw"]), Alternatives.from_dict(data.get("residual")))


@dataclass(frozen=True, slots=True)
class RoundDetail:
    """A round's tree, recorded when asked (`generate(record=True)`): one PositionDetail per position the
    target decided, 0…n_accepted (each kept draft, then the first turned down or, all kept, the bonus position;
    past the first rejection the target's rows follow a refused prefix and decide nothing)."""

    positions: tuple[PositionDetail, ...]

    def as_dict(self) -> dict:
        return {"positions": [position.as_dict() for position in self.positions]}

    @classmethod
    def from_dict(cls, data: dict | None) -> "RoundDetail | None":
        if not data or not isinstance(data.get("positions"), list):
            return None
        return cls(tuple(PositionDetail.from_dict(position) for position in data["positions"]))


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
    warnings: tuple[str, ...] = ()  # problems with the settings or the drafter's data (shown with a ⚠)
    rollback: str = ""  # how a rejected draft is cut off a recurrent state, and what that costs (else "")
    notes: tuple[str, ...] = ()  # what this generation's drafter does, said once: information, not a problem
    backend: str = ""  # the backend the reply runs on, by its registry name (llama.cpp, transformers, remote); ""
    # in events recorded before it was said


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
    verify_seconds: float  # the target's pass and the rollback after it (rollback_seconds of it)
    elapsed_seconds: float  # since the generation started
    n_committed_total: int
    rollback_seconds: float = 0.0  # cutting the rejected drafts off the cache (part of verify_seconds)
    detail: RoundDetail | None = None  # recorded only when asked (generate(record=True))
    draft_sources: tuple[str, ...] = ()  # per drafted token, the draft model's own pieces that spelled it
    # (a draft of another tokenizer: engine.drafters.cross_tokenizer); empty for every other drafter
    network_seconds: float = 0.0  # the network's share of verify_seconds: a target on a server verifying local
    # drafts (engine.remote.verify: its /health round trip beside the request); 0 for a local target
    tree_parents: tuple[int, ...] = ()  # a tree round (engine.core.tree): per drafted node, its parent's index
    # in draft_ids (−1: a child of the last committed token). draft_ids then lists the kept path first (its
    # n_accepted nodes, root to tip), then every other node; p_target/p_draft/draft_pieces follow that order.
    # Empty for a chain.

    @property
    def is_tree(self) -> bool:
        return bool(self.tree_parents)

    @property
    def depths(self) -> tuple[int, ...]:
        """Each drafted node's depth (a chain: 0, 1, 2, …)."""
        if not self.tree_parents:
            return tuple(range(len(self.draft_ids)))
        return tuple(node_depths(self.tree_parents))

    @property
    def ghost_nodes(self) -> tuple[int, ...]:
        """The drafted nodes a reply shows as rejected after the kept ones: a chain's rest; in a tree the line the
        drafter put first below the kept tip (its first child, that one's first child, …), as a chain's rejected
        tail. A tree's other branches are the round tree view's."""
        if not self.tree_parents:
            return tuple(range(self.n_accepted, len(self.draft_ids)))
        return tuple(ghost_line(self.tree_parents, self.n_accepted))

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
    stop_reason: str  # eos | stop-string | max-new-tokens | cancelled | context-full | out-of-memory | server-error
    text: str
    output_ids: tuple[int, ...]
    stats: GenerationStats
    error: str | None = None  # a message for the user when the reply ended on a problem (out of memory)
    server: ServerStats | None = None  # a remote server's own figures (engine.remote.engine); None when local
    backend: str = ""  # the started event's backend and device, repeated (a reader of the last line alone knows
    device: str = ""  # where the reply ran); "" in events recorded before they were said


@dataclass(frozen=True, slots=True)
class RoundsRevised:
    """The reply's rounds as they really were, learned only after they streamed: they replace every RoundVerified
    of this generation so far (same tokens, same text, in the same order; statuses and drafted counts change).
    A server that says which of its tokens were drafted only in its last chunk (vLLM's per-request metrics:
    engine.remote.steps) sends its reply plain and then this, just before GenerationFinished."""

    rounds: tuple[RoundVerified, ...]
    note: str  # how the rounds were told (and what could not be told apart), for the reply's notes


Event = GenerationStarted | RoundVerified | RoundsRevised | GenerationFinished


def event_to_dict(event: Event) -> dict:
    """A JSON-ready dict with a `type` key (`started`, `round`, `revised`, `finished`)."""
    kind = {GenerationStarted: "started", RoundVerified: "round", RoundsRevised: "revised",
            GenerationFinished: "finished"}[type(event)]
    if isinstance(event, RoundsRevised):
        return {"type": kind, "rounds": [event_to_dict(r) for r in event.rounds], "note": event.note}
    out: dict = {"type": kind}
    for name in event.__slots__:
        value = getattr(event, name)
        if isinstance(value, TokenStatus):
            value = value.value
        elif isinstance(value, (GenerationStats, ServerStats, RoundDetail)):
            value = value.as_dict()
        elif isinstance(value, tuple):
            value = list(value)
        out[name] = value
    if isinstance(event, RoundVerified):
        out["committed_statuses"] = [s.value for s in event.committed_statuses]
    return out
