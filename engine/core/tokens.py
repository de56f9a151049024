"""The one token record (`DisplayToken`) and the one fold of a round into it: `RoundVerified` → the pieces a
reader sees, in order.

Used by the chat view (gui/sessions/session_model.py), the history store (gui/persistence/: it stores and reads
back these very records) and the terminal (engine/cli/terminal.py), so a reply looks the same live, reopened
from history and in a terminal. Pure Python on events; imports only engine.core.events.

Display order of one round: the accepted drafts, then — when the round reached the target's own token (no
stop cut it first) — the rejected drafts as ghosts where they were proposed, then the target's token
(substituted, bonus or plain). Tokens a stop cut off are not shown; neither are ghosts after a cut.

Position convention (one, everywhere, stored as is in the history database):
  `position` is the 0-based index in the round's draft, the index into `draft_ids`, `p_target` and
  `p_draft`: accepted and rejected drafts have their own index, a correction has the index of the draft
  token it replaced (= n_accepted), a bonus has len(draft_ids) (one past the last drafted token), a plain
  decoding step has None. A tree round (RoundVerified.tree_parents) lists the kept path first: its ghosts are
  the line below the kept tip (RoundVerified.ghost_nodes), each at its node's index, and its correction has
  the index of the first of them. Words for a person count from 1: `draft_position_words` says "draft position
  {position + 1} of {draft_length}", in one place.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterable, Sequence

from engine.core.events import RoundVerified, TokenStatus

__all__ = ["DisplayToken", "fold_round", "fill_replacements", "committed_text", "draft_position_words"]


@dataclass(frozen=True, slots=True)
class DisplayToken:
    """One piece of a reply as drawn, with what its tooltip tells. The chat numbers the tokens it shows
    (`serial`: the index in its session's token list, by which the transcript finds the token under the mouse);
    the fold and the history store leave it None."""

    text: str
    status: TokenStatus
    round_index: int
    position: int | None  # 0-based index in the round's draft (see the module docstring); None: plain step
    draft_length: int  # tokens drafted in its round
    p_target: float | None
    p_draft: float | None  # None for the target's own token and for one-hot drafters (n-gram)
    drafter: str  # the drafter's name, "target" for a round with nothing drafted
    token_id: int | None
    replaced: str | None = None  # substituted: the drafted piece it replaced
    replaced_p_target: float | None = None
    replaced_p_draft: float | None = None
    serial: int | None = None
    draft_source: str | None = None  # a drafted token of a draft of another tokenizer: the draft's own pieces

    @property
    def committed(self) -> bool:
        """Part of the output (everything but a rejected ghost)."""
        return self.status is not TokenStatus.REJECTED


def _at(values: Sequence, i: int):
    return values[i] if i < len(values) else None


def fold_round(event: RoundVerified) -> list[DisplayToken]:
    """The display tokens of one round, in display order (see the module docstring)."""
    n_committed, n_drafted, n_accepted = len(event.committed_ids), len(event.draft_ids), event.n_accepted

    def token(text, status, position, token_id, p_target, p_draft) -> DisplayToken:
        drafted = status in (TokenStatus.ACCEPTED, TokenStatus.REJECTED)
        return DisplayToken(text=text, status=status, round_index=event.index, position=position,
                            draft_length=n_drafted, p_target=p_target, p_draft=p_draft, drafter=event.drafter,
                            token_id=token_id,
                            draft_source=_at(event.draft_sources, position) if drafted else None)

    tokens = [token(event.committed_pieces[i], TokenStatus.ACCEPTED, i, event.committed_ids[i],
                    _at(event.p_target, i), _at(event.p_draft, i))
              for i in range(min(n_accepted, n_committed))]
    if n_committed > n_accepted:  # the round reached the target's own token
        tokens += [token(_at(event.draft_pieces, i) or "", TokenStatus.REJECTED, i, event.draft_ids[i],
                         _at(event.p_target, i), _at(event.p_draft, i))
                   for i in event.ghost_nodes]
        status = event.target_status
        ghosts = event.ghost_nodes
        position = (None if status is TokenStatus.PLAIN else n_accepted if not event.is_tree
                    else ghosts[0] if status is TokenStatus.SUBSTITUTED and ghosts else n_drafted)
        tokens.append(token(event.committed_pieces[n_accepted], status, position,
                            event.committed_ids[n_accepted], event.p_target_of_target_id, None))
    return fill_replacements(tokens)


def fill_replacements(round_tokens: Sequence[DisplayToken]) -> list[DisplayToken]:
    """One round's tokens with each correction told which drafted piece it replaced: the round's first
    rejected ghost. Used by the fold and when a stored round is read back (the store keeps no copy)."""
    ghost = next((t for t in round_tokens if t.status is TokenStatus.REJECTED), None)
    if ghost is None:
        return list(round_tokens)
    return [dataclasses.replace(t, replaced=ghost.text, replaced_p_target=ghost.p_target,
                                replaced_p_draft=ghost.p_draft)
            if t.status is TokenStatus.SUBSTITUTED and t.replaced is None else t
            for t in round_tokens]


def committed_text(tokens: Iterable[DisplayToken]) -> str:
    """The reply's text: every token but the rejected ghosts."""
    return "".join(t.text for t in tokens if t.status is not TokenStatus.REJECTED)


def draft_position_words(token: DisplayToken) -> str:
    """Where in its draft a token stood, counted from 1 for a person (a tooltip line)."""
    if token.position is None:
        return "draft position: — (nothing was drafted this round)"
    if token.status is TokenStatus.BONUS:
        return f"draft position {token.position + 1}: after all {token.draft_length} drafted tokens"
    return f"draft position {token.position + 1} of {token.draft_length}"
