"""verify_greedy's numpy path for probabilities in host memory: the same verdict as the torch path (first maximum
of each row, the same float values), ties and drafts beyond the vocabulary included."""

from __future__ import annotations

import numpy as np
import torch

from engine.core.verify import _verify_greedy_on_host


def torch_verdict(logits: torch.Tensor, draft_ids: list[int]):
    """verify_greedy as torch computes it on any device."""
    m, vocab = len(draft_ids), logits.shape[-1]
    probs = torch.softmax(logits, dim=-1)
    top_p, top_id = probs.max(dim=-1)
    argmax = top_id.tolist()
    n_accepted = 0
    while n_accepted < m and draft_ids[n_accepted] == argmax[n_accepted]:
        n_accepted += 1
    p_target = [probs[i, x].item() if x < vocab else 0.0 for i, x in enumerate(draft_ids)]
    return n_accepted, argmax[n_accepted], p_target, top_p[n_accepted].item()


def test_the_host_path_gives_the_torch_paths_verdict():
    generator = torch.Generator().manual_seed(0)
    for trial in range(400):
        vocab, m = (50, 700)[trial % 2], trial % 5
        logits = torch.randn(m + 1, vocab, generator=generator) * 4
        if trial % 3 == 0:
            logits = logits.round()  # many exact ties: the first maximum wins on both paths
        argmax = torch.softmax(logits, -1).max(-1).indices.tolist()
        draft = [argmax[i] if (trial >> i) & 1 else (argmax[i] + 1) % vocab for i in range(m)]
        if m and trial % 7 == 0:
            draft[-1] = vocab + 3  # beyond the target's vocabulary: p_target 0, rejected
        probs = torch.softmax(logits, -1).numpy()
        assert _verify_greedy_on_host(probs, draft) == torch_verdict(logits, draft), trial
    tie = np.zeros((1, 8), dtype=np.float32)
    tie[0, [2, 5]] = 0.5
    assert _verify_greedy_on_host(tie, [])[1] == 2
