"""Method `draft-model`: a smaller model of the same tokenizer family drafts autoregressively, with its
own KV cache (Leviathan et al., arXiv 2211.17192; Chen et al., arXiv 2302.01318).

`RunnerDrafter` drafts with any engine.backends Runner (early exit reuses it with a view of the target);
`ModelDrafter` is that with a runner of the draft model. Touches only its runner.
"""

from __future__ import annotations

import torch

from engine.backends import LoadedModel, Runner
from engine.core.config import SamplingConfig
from engine.drafters.base import Proposal
from engine.core.sampling import probabilities, sample


class RunnerDrafter:
    """Drafts k tokens one forward pass at a time with its own runner (cache synced by common prefix)."""

    name = "draft-model"
    free_to_propose = False  # every drafted token is a forward pass
    note: str | None = None  # nothing to say at the start of a generation

    def __init__(self, runner: Runner, name: str | None = None) -> None:
        self.runner = runner
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
                rows.append(logits.clone())  # kept past the next pass (a runner may reuse its buffer)
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
        self.runner.release()


class ModelDrafter(RunnerDrafter):
    """A separate draft model (any backend) with a runner of its own."""

    def __init__(self, draft: LoadedModel, name: str = "draft-model") -> None:
        super().__init__(draft.new_runner(), name)
