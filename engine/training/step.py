"""The training step of an EAGLE head: the head unrolled for several draft steps exactly as it drafts, the
loss and the held-out acceptance by draft position. Pure torch on tensors: engine/training/train.py feeds it.

Unrolled forward ("training-time test", EAGLE-3, arXiv 2503.01840): step 1 reads the target's features f_i
and the token x_{i+1} at every position i of a window; step s reads the features step s−1 predicted at i and
x_{i+s}. Step s at row i attends to the step-1 entries 0…i (what the drafter's cache holds, read from the
target's own features) and to its own row's entries of steps 2…s (the positions it drafted), which is what
engine/drafters/eagle.py computes when it drafts s tokens after position i.

Loss: cross-entropy of the head's draft-vocabulary distribution to the target's next-token distribution
(KL up to the target's entropy, a constant), p_target = exp(f_{i+s} · W_d − logsumexp over the full
vocabulary), plus `regression` × smooth-L1 to the target's features (EAGLE-1's feature loss).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn import functional as F
from transformers import DynamicCache

from engine.drafters.eagle_head import EagleHead


@dataclass(frozen=True)
class Batch:
    """Windows of consecutive positions (B, L): features, the target's logsumexp and argmax, token ids, which
    sequence each position belongs to, and which positions count for acceptance (the replies)."""

    features: torch.Tensor  # (B, L, H)
    lse: torch.Tensor  # (B, L) float32: logsumexp of the target's logits over the full vocabulary
    top: torch.Tensor  # (B, L) long: the target's argmax
    ids: torch.Tensor  # (B, L) long
    sequence: torch.Tensor  # (B, L) long
    scored: torch.Tensor  # (B, L) bool: positions where acceptance is measured

    def to(self, device: torch.device, features_dtype: torch.dtype | None = None) -> "Batch":
        """This batch on `device` (the target's, where the head trains), the features in `features_dtype` (None:
        as they are). From the CPU to CUDA each tensor is pinned and copied without blocking, so the copy overlaps
        the work already queued."""
        def moved(tensor: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
            if tensor.device != device and device.type == "cuda" and tensor.device.type == "cpu":
                tensor = tensor.pin_memory().to(device, non_blocking=True)
            else:
                tensor = tensor.to(device)
            return tensor if dtype is None else tensor.to(dtype)  # cast where it now lies
        return Batch(moved(self.features, features_dtype), moved(self.lse), moved(self.top), moved(self.ids),
                     moved(self.sequence), moved(self.scored))


def step_mask(sequence: torch.Tensor, step: int) -> torch.Tensor:
    """The attention mask (B, 1, L, step·L), True where allowed, of draft step `step` (1-based): row i sees
    step-1 columns j ≤ i of its own sequence, and column i of every later step up to `step`."""
    B, L = sequence.shape
    same = sequence[:, :, None] == sequence[:, None, :]
    causal = torch.ones(L, L, dtype=torch.bool, device=sequence.device).tril()
    blocks = [same & causal]
    eye = torch.eye(L, dtype=torch.bool, device=sequence.device).expand(B, L, L)
    blocks += [eye] * (step - 1)
    return torch.cat(blocks, dim=-1)[:, None]


def shifted(values: torch.Tensor, by: int) -> torch.Tensor:
    """values[:, i + by] at column i (the last `by` columns repeat the last value; they are masked out)."""
    if by == 0:
        return values
    tail = values[:, -1:].expand(-1, by, *values.shape[2:])
    return torch.cat([values[:, by:], tail], dim=1)


def unrolled(head: EagleHead, embed, batch: Batch, steps: int) -> list[torch.Tensor]:
    """The features the head predicts at each draft step 1…steps, each (B, L, H) (row i of step s predicts
    f_{i+s}); the head's cache is built within the call, so gradients flow through every step."""
    B, L, _ = batch.features.shape
    cache = DynamicCache(config=head.config)
    inputs = batch.features
    outputs = []
    for step in range(1, steps + 1):
        tokens = embed(shifted(batch.ids, step))
        positions = (torch.arange(L, device=inputs.device) + step - 1).expand(B, L)
        predicted = head(inputs, tokens.to(inputs.dtype), positions, cache, step_mask(batch.sequence, step))
        outputs.append(predicted)
        inputs = predicted
    return outputs


def valid_rows(batch: Batch, step: int) -> torch.Tensor:
    """(B, L) bool: row i of step s has a target (i + s inside the window and in the same sequence)."""
    L = batch.sequence.shape[1]
    inside = torch.arange(L, device=batch.sequence.device) + step < L
    return inside[None] & (shifted(batch.sequence, step) == batch.sequence)


def target_log_probs(readout: torch.Tensor, batch: Batch) -> torch.Tensor:
    """log p_target over the draft vocabulary at every position (B, L, V_draft), float32: the target's own
    logits there (its features through the output head's rows) minus the logsumexp over the full vocabulary."""
    with torch.no_grad():
        return (batch.features @ readout.T).float() - batch.lse[..., None]


def loss_and_hits(head: EagleHead, embed, readout: torch.Tensor, batch: Batch, steps: int,
                  regression: float = 0.0) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
    """The mean loss over steps and, per step, which rows the head's argmax equals the target's (hits) and
    which rows count (valid and scored). `readout` (V_draft, H) is the output head's draft-vocabulary rows.
    The target's distribution is computed once per batch and shifted for each step."""
    total = torch.zeros((), device=readout.device)
    hits, counted = [], []
    draft_vocab = head.draft_vocab
    log_p_all = target_log_probs(readout, batch)
    for step, predicted in enumerate(unrolled(head, embed, batch, steps), 1):
        valid = valid_rows(batch, step)
        log_q = torch.log_softmax((predicted @ readout.T).float(), dim=-1)
        per_row = -(shifted(log_p_all, step).exp() * log_q).sum(-1)
        if regression:
            per_row = per_row + regression * F.smooth_l1_loss(
                predicted.float(), shifted(batch.features, step).float(), reduction="none").mean(-1)
        total = total + (per_row * valid).sum() / valid.sum().clamp_min(1)
        hits.append(draft_vocab[log_q.argmax(-1)] == shifted(batch.top, step))
        counted.append(valid & batch.scored)
    return total / steps, hits, counted


def acceptance_by_position(hits: list[torch.Tensor], counted: list[torch.Tensor]) -> list[tuple[int, int]]:
    """Greedy acceptance at draft positions 1…steps as (accepted, drafted) counts: position s is drafted at a
    row where positions 1…s−1 were accepted, and accepted where the head's argmax is the target's too."""
    reached = counted[0].clone()
    out = []
    for hit, count in zip(hits, counted):
        reached = reached & count
        accepted = reached & hit
        out.append((int(accepted.sum()), int(reached.sum())))
        reached = accepted
    return out
