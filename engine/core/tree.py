"""Token trees: a draft of several continuations, verified in one target pass (SpecInfer, arXiv 2305.09781;
EAGLE-2, arXiv 2406.16858). A tree is a list of drafted ids with each node's parent (`parents[i]`: the index
of node i's parent, −1 for a child of the last committed token; parents come before their children); a chain
is the tree whose parents are −1, 0, 1, ….

The target's pass gives a row per node plus one for the root (row 0: what follows the last committed token;
row i + 1: what follows node i). Verification keeps one root-to-node path:
- greedy: the longest path whose every token is the target's argmax after its parent;
- sampling: recursive rejection over siblings (SpecInfer's multi-step speculative sampling): a child is kept
  with probability min(1, p(x) / q(x)), q the distribution it was drawn from given what came before (one-hot
  for a node picked deterministically, EAGLE's rule for top-k drafts); on a rejection the target's
  distribution becomes norm(max(0, p − q)) and the next sibling is tried; when no child is kept, the target's
  token is drawn from what is left. Each step is the rule of arXiv 2211.17192 on the distribution left by the
  steps before, so the token kept is distributed exactly as the target's own.

Pure functions on torch tensors and lists; no Qt.
"""

from __future__ import annotations

import torch

from engine.core.sampling import residual, sample
from engine.core.tree_shape import children_of
from engine.core.verify import align_vocab


def ancestor_mask(parents) -> torch.Tensor:
    """(n, n) bool: [i, j] is True where node j is node i or one of its ancestors (what node i may attend to among
    the nodes; every node also sees the whole committed context)."""
    n = len(parents)
    mask = torch.zeros((n, n), dtype=torch.bool)
    for i, parent in enumerate(parents):
        if parent >= 0:
            mask[i] = mask[parent]
        mask[i, i] = True
    return mask


def verify_tree_greedy(probs: torch.Tensor, ids: list[int], parents) -> tuple[list[int], int, list[float], float]:
    """Greedy verification of a tree against the target's rows probs (n+1, V) (row 0: the root's; row i+1: after
    node i): the longest path whose every token is the target's argmax after its parent.

    Returns the kept path (node indices, root to tip), the target's own token after it (the correction where a
    child was refused, the bonus after a leaf), the target's probability of each node's token after its parent,
    and its probability of its own token."""
    rows = probs.detach()
    rows = (rows if rows.device.type == "cpu" else rows.cpu()).float().numpy()  # one transfer a round
    vocab = rows.shape[-1]
    argmax = rows.argmax(axis=-1).tolist()
    children = children_of(parents)
    path: list[int] = []
    row = 0
    while True:
        kept = next((c for c in children.get(path[-1] if path else -1, ()) if ids[c] == argmax[row]), None)
        if kept is None:
            break
        path.append(kept)
        row = kept + 1
    p_target = [float(rows[parent + 1, x]) if x < vocab else 0.0 for x, parent in zip(ids, parents)]
    return path, argmax[row], p_target, float(rows[row, argmax[row]])


def rejection_sample_tree(p_target: torch.Tensor, p_draft: torch.Tensor | None, ids: list[int], parents,
                          generator: torch.Generator
                          ) -> tuple[list[int], int, list[float], list[float | None], float]:
    """Recursive rejection sampling over a tree (SpecInfer, arXiv 2305.09781 §4.2; EAGLE's variant for nodes picked
    deterministically). p_target: (n+1, V) the target's probabilities (row 0: the root's, row i+1: after node i);
    p_draft: (n, V) row i the distribution node i was drawn from, or None (every node one-hot).

    Returns the kept path, the target's token after it (a correction or a bonus), the target's and the drafter's
    probability of each node's token (None where one-hot), and the target's probability of its own token."""
    vocab = p_target.shape[-1]
    children = children_of(parents)
    path: list[int] = []
    row = 0
    while True:
        p = p_target[row]
        kept = None
        for child in children.get(path[-1] if path else -1, ()):
            x = ids[child]
            q = None if p_draft is None else p_draft[child]
            p_x = float(p[x]) if x < vocab else 0.0
            q_x = 1.0 if q is None else float(q[x]) if x < q.shape[-1] else 0.0
            u = float(torch.rand((), generator=generator, device=p.device))
            if q_x > 0 and u * q_x < p_x:
                kept = child
                break
            p = _left_after(p, x, q)
        if kept is None:
            target_id = int(sample(p.unsqueeze(0), generator)[0])
            break
        path.append(kept)
        row = kept + 1
    p_nodes = [float(p_target[parent + 1, x]) if x < vocab else 0.0 for x, parent in zip(ids, parents)]
    q_nodes: list[float | None] = [None] * len(ids) if p_draft is None else \
        [float(p_draft[i, x]) if x < p_draft.shape[-1] else 0.0 for i, x in enumerate(ids)]
    return path, target_id, p_nodes, q_nodes, float(p_target[row, target_id])


def _left_after(p: torch.Tensor, x: int, q: torch.Tensor | None) -> torch.Tensor:
    """The target's distribution after a child drawn from q (None: x itself, one-hot) was refused:
    norm(max(0, p − q)) (engine.core.sampling.residual: p itself where nothing is left)."""
    if q is None:
        q = torch.zeros_like(p)
        if x < q.shape[-1]:
            q[x] = 1.0
    return residual(p, align_vocab(q.unsqueeze(0), p.shape[-1])[0].to(p.device, p.dtype))
