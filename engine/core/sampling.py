"""Logits → probabilities (temperature, top-k, top-p) and seeded draws. Works on any device.
Pure tensor functions: touches torch and the SamplingConfig it is given, nothing else."""

from __future__ import annotations

import torch

from engine.core.config import SamplingConfig


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
