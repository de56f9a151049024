"""Logits → probabilities (temperature, top-k, top-p) and seeded draws. Works on any device.
Pure tensor functions: touches torch and the SamplingConfig it is given, nothing else."""

from __future__ import annotations

import torch

from engine.core.config import SamplingConfig


def device_ids(ids: list[int], device) -> torch.Tensor:
    """`ids` as a (1, n) long tensor on `device`. On a GPU it is copied from pinned memory without waiting: a tensor
    built from a list straight on the device is copied from pageable memory, which first waits for every queued
    kernel (a host sync)."""
    if device.type == "cuda":
        return torch.tensor([ids], dtype=torch.long, pin_memory=True).to(device, non_blocking=True)
    return torch.tensor([ids], dtype=torch.long).to(device)


def make_generator(device: torch.device, seed: int | None) -> torch.Generator:
    generator = torch.Generator(device=device)
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(seed)
    return generator


def probabilities(logits: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
    """Rows of float32 logits → rows of probabilities under the sampling settings.

    Greedy (temperature 0) returns the plain softmax: it is only used to report probabilities, the pick
    itself is an argmax.
    """
    logits = logits.float()
    if sampling.greedy:
        return torch.softmax(logits, dim=-1)
    logits = logits / sampling.temperature
    if sampling.top_k and sampling.top_k < logits.shape[-1]:
        kth = torch.topk(logits, sampling.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if sampling.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        sorted_probs = torch.softmax(sorted_logits, dim=-1)
        # drop a token when the tokens above it already reach top_p (the first token always stays)
        drop_sorted = (torch.cumsum(sorted_probs, dim=-1) - sorted_probs) >= sampling.top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return torch.softmax(logits, dim=-1)


def sample(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One draw per row."""
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def residual(p_target: torch.Tensor, p_draft: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p_target − p_draft)) row by row: the distribution a correction is drawn from after the
    draft's token was rejected (arXiv 2211.17192 §2.3; 2302.01318 Alg. 2). A row whose residual has no mass
    (the two distributions agree) is p_target itself."""
    rows = torch.clamp(p_target - p_draft, min=0.0)
    mass = rows.sum(dim=-1, keepdim=True)
    return torch.where(mass > 0, rows / mass.clamp_min(1e-30), p_target)


def acceptance_probability(p_target: float | None, p_draft: float | None) -> float | None:
    """min(1, p_target(x) / p_draft(x)): the chance that speculative sampling keeps drafted token x
    (arXiv 2211.17192 Alg. 1). A drafter with no distribution (n-gram) is a one-hot draft, p_draft(x) = 1;
    None where p_target is not known."""
    if p_target is None:
        return None
    q = 1.0 if p_draft is None else p_draft
    return 1.0 if q <= 0 else min(1.0, p_target / q)


def entropy_bits(p: torch.Tensor) -> torch.Tensor:
    """The entropy of each row of probabilities, in bits."""
    return torch.special.entr(p.float()).sum(dim=-1) / 0.6931471805599453
