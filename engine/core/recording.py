"""A round's tree, recorded on request: at each position the target decided, its top alternatives and the
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
                 draws: torch.Tensor | None, piece: Callable[[int], str], top_n: int = TOP_N,
                 logits: torch.Tensor | None = None) -> RoundDetail:
    """The RoundDetail of one round. `p_target`: (m+1, V) the probabilities the acceptance rule used (greedy:
    the softmax); `p_draft`: (m, V') the drafter's, None for a one-hot drafter; `draws`: the m uniforms of a
    sampled round, None when greedy; `logits`: greedy, the logits `p_target` is the softmax of (the entropy is
    then read from them with no logarithm per entry).

    Only the positions the target decided are recorded: each kept draft, then the first one turned down (with the
    correction's residual when sampled) or, when all were kept, the bonus position; n_accepted + 1 in all. Past
    the first rejection the target's rows follow a prefix it refused, and nothing was decided there."""
    m, vocab = len(draft_ids), p_target.shape[-1]
    decided = n_accepted + 1  # target rows: 0…n_accepted
    drafted = min(decided, m)  # draft rows and draws: the drafted tokens among them
    p_target = p_target[:decided].float()
    if logits is not None:
        logits = logits[:decided]
    n = min(top_n, vocab)
    top = _top(p_target, n)
    parts = list(top) + [_entropy(p_target, logits, top)]
    aligned = None if p_draft is None or not m else \
        align_vocab(p_draft[:drafted].float().to(p_target.device), vocab)
    if aligned is not None:
        parts += _top(aligned, n)
    substituted = draws is not None and n_accepted < m
    if substituted:
        row = aligned[n_accepted:n_accepted + 1] if aligned is not None else \
            one_hot_draft(draft_ids[n_accepted:n_accepted + 1], vocab, p_target.device)
        parts += _top(residual(p_target[n_accepted:n_accepted + 1], row), n)
    if draws is not None and m:
        parts.append(draws[:drafted].float().to(p_target.device))
    values = torch.cat([part.flatten() for part in parts]).tolist()  # the one transfer
    reader = _Reader(values, n, piece)
    targets = reader.block(decided)
    entropies = reader.take(decided)
    drafts = reader.block(drafted) if aligned is not None else [None] * drafted
    residual_row = reader.block(1)[0] if substituted else None
    uniforms = reader.take(drafted) if draws is not None and m else [None] * drafted
    positions = [PositionDetail(targets[i], entropies[i], drafts[i] if i < drafted else None,
                                uniforms[i] if i < drafted else None,
                                residual_row if substituted and i == n_accepted else None)
                 for i in range(decided)]
    return RoundDetail(tuple(positions))


def _entropy(p: torch.Tensor, logits: torch.Tensor | None, top) -> torch.Tensor:
    """Each row's entropy in bits. From a softmax's own logits l: H = logsumexp(l) − Σ p·l, and logsumexp(l) =
    l[a] − log p[a] at the row's most likely a; a dot product per row instead of p·log p over the vocabulary.
    Where the logits are not all finite (a masked vocabulary): from p itself (engine.core.sampling)."""
    if logits is None:
        return entropy_bits(p)
    logits = logits.float()
    probs, ids = top
    lse = logits.gather(-1, ids[:, :1].long()).squeeze(-1) - probs[:, 0].log()
    nats = lse - (p * logits).sum(dim=-1)  # an infinite logit makes it nan (0 · −inf)
    if not bool(torch.isfinite(nats).all()):
        return entropy_bits(p)
    return nats.clamp_min(0.0) / 0.6931471805599453


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
