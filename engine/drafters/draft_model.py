"""Method `draft-model`: a smaller model of the same tokenizer family drafts autoregressively, with its
own KV cache (Leviathan et al., arXiv 2211.17192; Chen et al., arXiv 2302.01318)."""

from __future__ import annotations

import torch

from engine.cache import CachedModel
from engine.config import SamplingConfig
from engine.drafters.base import Proposal
from engine.sampling import probabilities, sample


class ModelDrafter:
    name = "draft-model"

    def __init__(self, model, config=None, name: str | None = None) -> None:
        self.runner = CachedModel(model, config)
        if name:
            self.name = name
        self._sampling = SamplingConfig()
        self._generator: torch.Generator | None = None

    def begin(self, sampling: SamplingConfig, generator: torch.Generator) -> None:
        self._sampling = sampling
        self._generator = generator

    def propose(self, context_ids: list[int], k: int) -> Proposal:
        runner = self.runner
        feed = runner.sync(context_ids)
        draft_ids: list[int] = []
        rows: list[torch.Tensor] = []
        for step in range(k):
            logits = runner.forward(feed, 1)[-1]
            if self._sampling.greedy:
                token = int(torch.argmax(logits))
                rows.append(logits)  # turned into probabilities once, below
            else:
                probs = probabilities(logits, self._sampling)
                token = int(sample(probs, self._generator))
                rows.append(probs)
            draft_ids.append(token)
            feed = [token]
        if not draft_ids:
            return Proposal.empty()
        stacked = torch.stack(rows)
        p_draft = torch.softmax(stacked, dim=-1) if self._sampling.greedy else stacked
        return Proposal(draft_ids, p_draft)

    def observe(self, n_accepted: int) -> None:
        pass  # the next propose() syncs the cache by common prefix, rolling back rejected positions

    def release(self) -> None:
        self.runner.reset()
