"""Verification of a draft against the target's logits: pure functions, one device → host transfer a round.

The acceptance rule is the one of Leviathan et al. (arXiv 2211.17192) and Chen et al. (arXiv 2302.01318):
keep drafted token x with probability min(1, p_target(x) / p_draft(x)); at the first rejection draw the
correction from norm(max(0, p_target − p_draft)); when all k are kept, draw a bonus token from the target.
A drafter with no distribution counts as a one-hot p_draft. Greedy decoding is the temperature → 0 limit:
keep x while it is the target's argmax. Either way the output is distributed exactly as the target's own.
Touches torch tensors (and numpy views of those in host memory) only.
"""

from __future__ import annotations

import numpy as np
import torch

from engine.core.sampling import device_ids, residual, sample


def verify_greedy(target_logits: torch.Tensor, draft_ids: list[int]) -> tuple[int, int, list[float], float]:
    """Greedy verification of m drafted ids against the target's logits (m+1, V) for positions 0…m (row i: the
    target's prediction for draft position i; row m: the bonus position).

    Returns n_accepted, the target's own token (argmax at the first disagreement, or the bonus), the
    target's probability of each drafted token, and its probability of its own token.
    """
    return verify_greedy_probs(torch.softmax(target_logits, dim=-1), draft_ids)


def verify_greedy_probs(probs: torch.Tensor, draft_ids: list[int]) -> tuple[int, int, list[float], float]:
    """verify_greedy on probs (m+1, V), the softmax of the target's logits computed by the caller (a recorded
    round keeps it)."""
    return verify_greedy_drafted(probs, draft_ids, None)[:4]


def verify_greedy_drafted(probs: torch.Tensor, draft_ids: list[int], p_draft: torch.Tensor | None
                          ) -> tuple[int, int, list[float], float, list[float | None]]:
    """verify_greedy_probs, and the drafter's probability of each drafted token read from its rows p_draft (m, V)
    (None each where it has none), all in the one device → host transfer of the round."""
    m = len(draft_ids)
    if probs.device.type == "cpu" and probs.dtype == torch.float32:
        verdict = _verify_greedy_on_host(probs.detach().numpy(), draft_ids)
        if p_draft is None:
            return (*verdict, [None] * m)
        rows = p_draft.detach()
        rows = (rows if rows.device.type == "cpu" else rows.cpu()).float().numpy()
        return (*verdict, [float(rows[i, x]) for i, x in enumerate(draft_ids)])
    top_p, top_id = probs.max(dim=-1)
    parts = [top_id.float(), top_p, _gather_drafted(probs, draft_ids)]
    if p_draft is not None:
        parts.append(_gather_drafted(p_draft.to(probs.device, torch.float32), draft_ids))
    # one device → host transfer per round: ids are exact in float32 (< 2**24)
    values = torch.cat(parts).tolist()
    argmax = [int(v) for v in values[: m + 1]]
    n_accepted = 0
    while n_accepted < m and draft_ids[n_accepted] == argmax[n_accepted]:
        n_accepted += 1
    drafted = values[3 * m + 2:] if p_draft is not None else [None] * m
    return n_accepted, argmax[n_accepted], values[2 * m + 2:3 * m + 2], values[m + 1 + n_accepted], drafted


def _verify_greedy_on_host(probs: np.ndarray, draft_ids: list[int]) -> tuple[int, int, list[float], float]:
    """verify_greedy on probabilities (m+1, V) already in host memory, in numpy: the same first maximum of each
    row and the same values, without the per-op cost of torch (whose max over a row of a large vocabulary is slow)."""
    m, vocab = len(draft_ids), probs.shape[-1]
    argmax = probs.argmax(axis=-1).tolist()
    n_accepted = 0
    while n_accepted < m and draft_ids[n_accepted] == argmax[n_accepted]:
        n_accepted += 1
    target_id = argmax[n_accepted]
    p_target = [float(probs[i, x]) if x < vocab else 0.0 for i, x in enumerate(draft_ids)]
    return n_accepted, target_id, p_target, float(probs[n_accepted, target_id])


def rejection_sample(p_target: torch.Tensor, p_draft: torch.Tensor | None, draft_ids: list[int],
                     generator: torch.Generator, draws: torch.Tensor | None = None
                     ) -> tuple[int, int, list[float], list[float], float]:
    """Speculative sampling (arXiv 2211.17192 Alg. 1; 2302.01318 Alg. 2).

    p_target: (m+1, V) target probabilities; p_draft: (m, V) the draft's, or None for a one-hot draft.
    `draws`: the m uniform draws that decide the drafted tokens, where the caller drew them first from the
    same generator (to record them); else they are drawn here, the same way.
    Returns n_accepted, the target's token (correction or bonus), p_target and p_draft of each drafted
    token, and the target's probability of its own token.
    """
    m = len(draft_ids)
    device = p_target.device
    if p_draft is None:
        p_draft = one_hot_draft(draft_ids, p_target.shape[-1], device)
    pt_x = _gather_drafted(p_target[:m], draft_ids)
    pd_x = _gather_drafted(p_draft, draft_ids, outside=1.0)
    if draws is None:
        draws = uniform_draws(m, generator, device)
    accept = draws * pd_x < pt_x  # u < p_target/p_draft
    # Residual distributions for every position, plus the bonus row: draw all m+1 at once and keep the
    # one at the first rejection, so the whole round needs a single device → host transfer.
    candidates = sample(torch.cat([residual(p_target[:m], p_draft), p_target[m:m + 1]]), generator)
    p_candidates = p_target[torch.arange(m + 1, device=device), candidates]
    values = torch.cat([accept.float(), candidates.float(), p_candidates, pt_x, pd_x]).tolist()
    n_accepted = 0
    while n_accepted < m and values[n_accepted] > 0.5:
        n_accepted += 1
    target_id = int(values[m + n_accepted])
    p_own = values[2 * m + 1 + n_accepted]
    return n_accepted, target_id, values[3 * m + 2: 4 * m + 2], values[4 * m + 2:], p_own


def uniform_draws(m: int, generator: torch.Generator, device) -> torch.Tensor:
    """The m uniform draws (m,) of a round's acceptance test, in the order rejection_sample takes them."""
    return torch.rand(m, generator=generator, device=device)


def one_hot_draft(draft_ids: list[int], vocab: int, device) -> torch.Tensor:
    """A drafter with no distribution as rows (m, vocab) of one-hot probabilities (ids beyond the vocabulary:
    zeros)."""
    rows = torch.zeros((len(draft_ids), vocab), device=device)
    in_vocab = [(i, x) for i, x in enumerate(draft_ids) if x < vocab]
    if in_vocab:
        rows[[i for i, _ in in_vocab], [x for _, x in in_vocab]] = 1.0
    return rows


def _gather_drafted(rows: torch.Tensor, draft_ids: list[int], outside: float = 0.0) -> torch.Tensor:
    """rows[i, draft_ids[i]] (m,) from rows (≥ m, V); a draft id beyond the target's vocabulary (vocabularies may
    differ by up to 128 padding ids) has target probability 0, so it is always rejected."""
    vocab = rows.shape[-1]
    drafted = device_ids(draft_ids, rows.device)[0]  # no host sync on a GPU
    picked = rows[torch.arange(len(draft_ids), device=rows.device), drafted.clamp(max=vocab - 1)]
    return torch.where(drafted < vocab, picked, torch.full_like(picked, outside))


def align_vocab(p_draft: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Draft and target vocabularies may differ by a few padding ids (≤ 128): pad or cut the draft's rows
    (m, V_draft) to (m, vocab_size)."""
    extra = vocab_size - p_draft.shape[-1]
    if extra > 0:
        return torch.nn.functional.pad(p_draft, (0, extra))
    return p_draft[:, :vocab_size] if extra < 0 else p_draft
