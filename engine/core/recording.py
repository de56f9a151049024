"""A round's tree, recorded on request: at each position the target verified, its top alternatives and the
entropy of its distribution, the drafter's top alternatives where it drafted from a distribution, the uniform
draw that decided a drafted token (sampling), and at a sampled substitution the residual
norm(max(0, p_target − p_draft)) the correction was drawn from (arXiv 2211.17192 §2.3).

Computed from the rows the verifying pass already has, in one device → host transfer, only when
`Engine.generate(record=True)`: off, nothing here runs. Pure torch; text of ids through the caller's `piece`.
"""

from __future__ import annotations

from typing import Callable

import torch

from engine.core.events import Alternatives, PositionDetail, RoundDetail
from engine.core.sampling import entropy_bits, residual
from engine.core.verify import align_vocab, one_hot_draft

TOP_N = 5  # alternatives kept per distribution and position


def record_round(p_target: torch.Tensor, p_draft: torch.Tensor | None, draft_ids: list[int], n_accepted: int,
                 draws: torch.Tensor | None, piece: Callable[[int], str], top_n: int = TOP_N) -> RoundDetail:
    """The RoundDetail of one round. `p_target`: (m+1, V) the probabilities the acceptance rule used (greedy:
    the softmax); `p_draft`: (m, V') the drafter's, None for a one-hot drafter; `draws`: the m uniforms of a
    sampled round, None when greedy."""
    m, vocab = len(draft_ids), p_target.shape[-1]
    p_target = p_target.float()
    n = min(top_n, vocab)
    parts = list(_top(p_target, n)) + [entropy_bits(p_target)]
    aligned = None if p_draft is None or not m else align_vocab(p_draft.float().to(p_target.device), vocab)
    if aligned is not None:
        parts += _top(aligned, n)
    substituted = draws is not None and n_accepted < m
    if substituted:
        row = aligned[n_accepted:n_accepted + 1] if aligned is not None else \
            one_hot_draft(draft_ids[n_accepted:n_accepted + 1], vocab, p_target.device)
        parts += _top(residual(p_target[n_accepted:n_accepted + 1], row), n)
    if draws is not None and m:
        parts.append(draws.float().to(p_target.device))
    values = torch.cat([part.flatten() for part in parts]).tolist()  # the one transfer
    reader = _Reader(values, n, piece)
    targets = reader.block(m + 1)
    entropies = reader.take(m + 1)
    drafts = reader.block(m) if aligned is not None else [None] * m
    residual_row = reader.block(1)[0] if substituted else None
    uniforms = reader.take(m) if draws is not None and m else [None] * m
    positions = [PositionDetail(targets[i], entropies[i], drafts[i] if i < m else None,
                                uniforms[i] if i < m else None, residual_row if substituted and i == n_accepted else None)
                 for i in range(m + 1)]
    return RoundDetail(tuple(positions))


def _top(rows: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The n largest probabilities of each row and their ids (as floats: exact below 2**24)."""
    probs, ids = torch.topk(rows, n, dim=-1)
    return probs, ids.float()


class _Reader:
    """Reads the flat list of values back in the order record_round put them."""

    def __init__(self, values: list[float], n: int, piece: Callable[[int], str]) -> None:
        self.values, self.n, self.piece, self.at = values, n, piece, 0

    def take(self, count: int) -> list[float]:
        out = self.values[self.at:self.at + count]
        self.at += count
        return out

    def block(self, rows: int) -> list[Alternatives]:
        """`rows` rows of a _top block: all their probabilities, then all their ids."""
        probs, ids = self.take(rows * self.n), self.take(rows * self.n)
        out = []
        for r in range(rows):
            row_ids = tuple(int(i) for i in ids[r * self.n:(r + 1) * self.n])
            out.append(Alternatives(row_ids, tuple(probs[r * self.n:(r + 1) * self.n]),
                                    tuple(self.piece(i) for i in row_ids)))
        return out
