"""Method `eagle`: a trained EAGLE-style head (arXiv 2401.15077, engine/drafters/eagle_head.py) drafts from the target's
own last hidden states, which the verify pass computes anyway (the target's runner keeps them once this
drafter attaches: the Runner's declared record_outputs, read by its hidden_rows). Each draft step reads the
features of the position before and the embedding of the token drafted last, predicts the next features and
reads them out through the target's frozen output head over the head's draft vocabulary; p_draft is that
distribution (zero outside the draft vocabulary), so verification is the usual lossless one.

The head keeps a one-layer KV cache of its own for the positions with real (target) features, synced by
common prefix like any runner; positions drafted from predicted features are dropped after each round.
A head folder is ours (head.safetensors + head.json) or another tool's (a speculators "eagle" or EAGLE-1
config.json with model.safetensors: engine/drafters/eagle_formats.py), which may bring its own embedding and readout.
Transformers backend only (it reads the target's torch modules). Touches the target's embedding and output
head read-only, the target runner's kept hidden states read-only, and its own cache.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from engine.backends import LoadedModel, Runner, common_prefix_length
from engine.core.config import SamplingConfig, SpecConfig, check_backend
from engine.core.drafting import Drafter, Proposal
from engine.core.errors import ConfigError
from engine.core.methods import MethodSpec
from engine.drafters.tree_shapes import DynamicTree, default_width

if TYPE_CHECKING:  # the drafter's own modules import torch: they are imported where a head is used
    import torch

    from engine.drafters.eagle_head import EagleHead

NAME = "eagle"

# `specscope drafter train`'s default budget, data generation included (what it gives the built-in model:
# README, Command line)
TRAIN_MINUTES = 20


def head_folder(spec: SpecConfig, target: LoadedModel) -> Path:
    """The head `spec` names (--draft DIR), else the one trained for this target (its default folder)."""
    from engine.drafters.eagle_head import default_head_dir, target_fingerprint
    return Path(spec.draft).expanduser() if spec.draft else default_head_dir(target_fingerprint(target.model))


def no_head_message(target: LoadedModel) -> str:
    """What to do when a model has no head yet: the command that trains one and how long it takes here."""
    return (f"{target.label} has no eagle head yet: train one with `specscope drafter train --model {target.name} "
            f"--minutes {TRAIN_MINUTES}` (about {TRAIN_MINUTES} minutes on this CPU, data generation included; "
            "Ctrl+C keeps a checkpoint to resume), then pick eagle again, or give a head with --draft DIR")


def check_eagle(spec: SpecConfig, target: LoadedModel) -> Path:
    """The head folder for `target`: refused on another backend, when missing (with how to train one), or when
    it was trained for another target. A folder in another tool's layout (speculators "eagle", EAGLE-1: a
    config.json) must fit the target's shapes (engine.drafters.eagle_formats)."""
    from engine.drafters.eagle_formats import check_speculators, is_foreign_head
    from engine.drafters.eagle_head import read_card, target_fingerprint
    check_backend(NAME, target.backend)
    folder = head_folder(spec, target)
    if not spec.draft and not folder.is_dir():
        raise ConfigError(no_head_message(target))
    if is_foreign_head(folder):
        check_speculators(folder, target.model, target.label)
        return folder
    card = read_card(folder)
    if card.fingerprint != target_fingerprint(target.model):
        raise ConfigError(f"the eagle head in {folder} was trained for {card.target}, not {target.label} (the "
                          "weights' fingerprints differ); train one for this model with `specscope drafter train`")
    return folder


def make_eagle_drafter(spec: SpecConfig, target: LoadedModel, target_runner) -> "EagleDrafter":
    from engine.drafters.eagle_formats import is_foreign_head, load_speculators
    from engine.drafters.eagle_head import load_head
    folder = check_eagle(spec, target)
    load = load_speculators if is_foreign_head(folder) else load_head
    head, card = load(folder, target.model, target.label)
    return EagleDrafter(target, head, target_runner, note=card.info.get("note"))


def causal_mask(n_new: int, n_past: int, device: torch.device) -> torch.Tensor:
    """A (1, 1, n_new, n_past + n_new) mask, True where allowed: new position i sees the past and new ones ≤ i."""
    import torch
    return torch.ones(n_new, n_past + n_new, dtype=torch.bool, device=device).tril(diagonal=n_past)[None, None]


class EagleDrafter(Drafter):
    name = NAME
    free_to_propose = False  # every drafted token is a pass of the head (and a readout)

    def __init__(self, target: LoadedModel, head: EagleHead, target_runner: Runner,
                 note: str | None = None) -> None:
        import torch

        from engine.drafters.eagle_head import decoder_parts, readout_weight
        check_backend(NAME, target.backend)
        _, _, embed, output_head = decoder_parts(target.model)
        dtype = output_head.weight.dtype
        self.head = head.to(device=target.device, dtype=dtype).eval()
        self.head.draft_vocab = self.head.draft_vocab.to(torch.long)
        # a head trained elsewhere may bring its own embedding and readout; ours use the target's
        self.embed = self.head.embed_tokens if self.head.embed_tokens is not None else embed
        self.readout = (self.head.lm_head.weight.detach() if self.head.lm_head is not None
                        else readout_weight(output_head, self.head.draft_vocab))
        self.note = note  # e.g. the model a head without our card was trained for
        self.vocab_size = target.vocab_size
        self.target_runner: Runner | None = None
        self.cache = None
        self.ids: list[int] = []  # x_0…x_L: the head's cache holds entries 0…L−1 (entry i reads f_i, x_{i+1})
        self._sampling = SamplingConfig()
        self._generator: torch.Generator | None = None
        self.attach(target_runner)

    def attach(self, runner: Runner) -> None:
        """Draft from this (the engine's target) runner's hidden states; it keeps them from now on."""
        runner.record_outputs()
        self.target_runner = runner
        self.release()

    def begin(self, sampling: SamplingConfig, generator: torch.Generator) -> None:
        self._sampling = sampling
        self._generator = generator

    def _catch_up(self, context_ids: list[int]) -> torch.Tensor | None:
        """Feed the head every position the target has features for that its cache lacks; the predicted
        features after the last one (1, 1, H), or None where the target runner has no features to give."""
        import torch
        from transformers import DynamicCache

        from engine.backends.device import device_ids
        from engine.backends.transformers import crop_cache
        runner, n = self.target_runner, len(context_ids)
        if runner is None or runner.ids != context_ids[:n - 1] or n < 2:
            return None
        keep = max(0, min(len(self.ids) - 1, common_prefix_length(self.ids, context_ids) - 1, n - 2))
        features = runner.hidden_rows(keep)  # (n − 1 − keep, hidden), None where not kept
        if features is None or features.shape[0] != n - 1 - keep:
            keep, features = 0, runner.hidden_rows(0)
            if features is None or features.shape[0] != n - 1:
                return None
        if self.cache is None or keep == 0:
            self.cache = DynamicCache(config=self.head.config)
        crop_cache(self.cache, keep)
        device = self.readout.device
        tokens = device_ids(context_ids[keep + 1:n], device)
        positions = torch.arange(keep, n - 1, device=device)[None]
        mask = causal_mask(n - 1 - keep, keep, device) if n - 1 - keep > 1 else None
        predicted = self.head(features[None].to(self.readout.dtype), self.embed(tokens), positions, self.cache, mask)
        self.ids = list(context_ids)
        return predicted[:, -1:]

    def _pick(self, predicted: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The drafted id (a 0-d tensor on the device, not read on the host) and its distribution over the target's
        vocabulary (0 outside the draft vocabulary)."""
        import torch

        from engine.core.sampling import probabilities, sample
        logits = torch.full((self.vocab_size,), float("-inf"), device=self.readout.device)
        logits[self.head.draft_vocab] = (predicted[0, -1] @ self.readout.T).float()
        probs = probabilities(logits, self._sampling)
        if self._sampling.greedy:
            return torch.argmax(logits), probs
        return sample(probs, self._generator), probs

    def propose(self, context_ids: list[int], k: int) -> Proposal:
        """Up to k drafted ids. Each step takes the token the step before drafted as a device tensor, so the host
        reads the k ids once, at the end (one sync a round, not one a token)."""
        import torch

        from engine.backends.transformers import crop_cache
        predicted = self._catch_up(context_ids)
        if predicted is None or k < 1:
            return Proposal.empty()
        n = len(context_ids)
        positions = torch.arange(n - 1, n - 2 + k, device=self.readout.device)[None]  # of steps 2…k's inputs
        tokens: list[torch.Tensor] = []
        rows: list[torch.Tensor] = []
        for step in range(k):
            token, probs = self._pick(predicted)
            tokens.append(token)
            rows.append(probs)
            if step + 1 < k:  # the next step reads the predicted features and the drafted token
                predicted = self.head(predicted, self.embed(token.view(1, 1)), positions[:, step:step + 1],
                                      self.cache)
        crop_cache(self.cache, n - 1)  # keep only the entries read from the target's own features
        return Proposal(torch.stack(tokens).tolist(), torch.stack(rows))

    def propose_tree(self, context_ids: list[int], k: int, budget: int) -> Proposal:
        """EAGLE-2's dynamic tree (arXiv 2406.16858; engine.drafters.tree_shapes.DynamicTree) from the head: k
        levels, each one pass of the head over the level's frontier nodes, a node at the position of its depth
        seeing the target's positions and its own ancestors only (a 4D mask); `default_width(budget, k)` children
        a node, reranked to `budget` nodes with the greedy chain kept. Children are picked, never drawn: under
        sampling p_draft is None (one-hot), under greedy each node's row is the distribution it was picked from."""
        import torch

        from engine.backends.transformers import crop_cache
        predicted = self._catch_up(context_ids)
        if predicted is None or k < 1 or budget < 1:
            return Proposal.empty()
        tree, rows = DynamicTree(default_width(budget, k)), []
        features = {-1: predicted[0, -1]}  # node → the head's predicted features after it
        self._offer(tree, -1, features[-1], rows)
        expanded: list[int] = []  # the tree's nodes in the head's cache, in its order
        for depth in range(k - 1):
            frontier = tree.frontier(depth)
            if not frontier:
                break
            out = self._head_pass(tree, expanded, frontier, features, len(context_ids) - 1 + depth)
            for i, node in enumerate(frontier):
                features[node] = out[0, i]
                self._offer(tree, node, features[node], rows)
            expanded += frontier
        crop_cache(self.cache, len(context_ids) - 1)  # keep only the entries read from the target's own features
        shape = tree.reranked(budget)
        p_draft = torch.stack([rows[tree.rows[i]] for i in shape.nodes]) if self._sampling.greedy else None
        return Proposal(shape.ids, p_draft, parents=shape.parents) if shape else Proposal.empty()

    def _head_pass(self, tree: DynamicTree, expanded: list[int], frontier: list[int], features: dict,
                   position: int) -> torch.Tensor:
        """One pass of the head over `frontier` (after the `expanded` nodes in its cache): each node reads its
        parent's predicted features and its own token, at `position`, and sees the cache's target positions and
        its ancestors; the predicted features (1, len(frontier), H)."""
        import torch

        from engine.backends.device import device_ids
        from engine.core.tree import ancestor_mask
        device = self.readout.device
        nodes = expanded + frontier
        index = {node: i for i, node in enumerate(nodes)}
        ancestors = ancestor_mask([index.get(tree.parents[node], -1) for node in nodes])[len(expanded):]
        n_past = self.cache.get_seq_length() - len(expanded)
        allowed = torch.ones((len(frontier), n_past + len(nodes)), dtype=torch.bool, device=device)
        allowed[:, n_past:] = ancestors.to(device)
        inputs = torch.stack([features[tree.parents[node]] for node in frontier])[None]
        tokens = device_ids([tree.ids[node] for node in frontier], device)
        positions = torch.full((1, len(frontier)), position, dtype=torch.long, device=device)
        return self.head(inputs, self.embed(tokens), positions, self.cache, allowed[None, None])

    def _offer(self, tree: DynamicTree, parent: int, predicted: torch.Tensor, rows: list) -> None:
        """`parent`'s children: the top tokens of the head's distribution read from its predicted features
        (H,), under the sampling settings."""
        import torch

        from engine.core.sampling import probabilities
        logits = torch.full((self.vocab_size,), float("-inf"), device=self.readout.device)
        logits[self.head.draft_vocab] = (predicted @ self.readout.T).float()
        probs = probabilities(logits, self._sampling)
        top = torch.topk(probs, min(tree.width, probs.shape[-1]))
        tree.add_children(parent, [(token, prob) for token, prob in zip(top.indices.tolist(), top.values.tolist())
                                   if prob > 0], len(rows))
        rows.append(probs)

    def observe(self, n_accepted: int) -> None:
        pass  # the next propose() syncs by common prefix with the target's kept features

    def release(self) -> None:
        self.cache = None
        self.ids = []


def build(spec: SpecConfig, target: LoadedModel, draft, target_runner) -> EagleDrafter:
    if target_runner is None:
        raise ValueError(f"{NAME} drafts from the target's runner; pass target_runner")
    return make_eagle_drafter(spec, target, target_runner)


METHOD = MethodSpec(
    name=NAME, label="EAGLE head (trained here)",
    description="A one-layer head trained on the target's own replies (specscope drafter train) drafts from the "
                "target's last hidden states; --draft DIR names the head (default: the one trained for the model).",
    reads_head=True, backends=("transformers",),
    why_not="the head reads the target's hidden states and torch modules (embedding, output head), which only "
            "the transformers backend exposes",
    check=lambda spec, target, draft: check_eagle(spec, target), build=build, needs_target_runner=True, branches=True,
    draft_help="a head folder (default: the one trained for the model)")
