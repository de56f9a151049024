"""Method `draft-model`: a smaller model drafts autoregressively, with its own KV cache (Leviathan et al.,
arXiv 2211.17192; Chen et al., arXiv 2302.01318).

`RunnerDrafter` drafts with any engine.backends Runner (early exit reuses it with a view of the target), a chain
or, for a target that verifies trees, EAGLE-2's dynamic tree (engine.drafters.tree_shapes);
`ModelDrafter` is that with a runner of the draft model. A draft of another tokenizer drafts through text
(engine.drafters.cross_tokenizer). Touches only its runner.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

from engine.backends import LoadedModel, Runner
from engine.core.compat import tokenizer_difference
from engine.core.drafting import PickingDrafter, Proposal
from engine.core.errors import ConfigError
from engine.core.runner import take_in
from engine.core.methods import MethodSpec
from engine.drafters.tree_shapes import Calibration, DynamicTree, default_width

if TYPE_CHECKING:
    import torch


class RunnerDrafter(PickingDrafter):
    """Drafts k tokens one forward pass at a time with its own runner (cache synced by common prefix), or, asked
    for a tree, EAGLE-2's dynamic tree with one draft pass a level."""

    name = "draft-model"
    free_to_propose = False  # every drafted token is a forward pass
    note: str | None = None  # nothing to say at the start of a generation

    def __init__(self, runner: Runner, name: str | None = None) -> None:
        super().__init__()
        self.runner = runner
        if name:
            self.name = name
        self._calibration = Calibration()  # what the draft's confidence is worth, from what the target kept
        self._last_tree: tuple | None = None  # (context, ids, parents, ranks, probs) of the last tree proposed

    def prefill(self, context_ids: list[int]) -> None:
        """The prompt into the draft's cache now (all but the last id: the first propose() feeds it)."""
        take_in(self.runner, context_ids)

    def propose(self, context_ids: list[int], k: int) -> Proposal:
        runner = self.runner
        feed = runner.sync(context_ids)
        draft_ids: list[int] = []
        rows: list[torch.Tensor] = []
        for step in range(k):
            # the row is kept past the next pass: a runner may reuse its logits buffer
            token, row = self.pick(runner.forward(feed, 1)[-1].clone())
            draft_ids.append(token)
            rows.append(row)
            feed = [token]
        return self.proposal(draft_ids, rows)

    def propose_tree(self, context_ids: list[int], k: int, budget: int) -> Proposal:
        """EAGLE-2's dynamic tree (arXiv 2406.16858; engine.drafters.tree_shapes.DynamicTree): k levels, each
        one draft pass over its frontier of `default_width(budget, k)` nodes (Runner.grow_tree), up to 10
        children a node, reranked to `budget` nodes by cumulative draft probability, each calibrated by what the
        target kept of this drafter's earlier trees (tree_shapes.Calibration), the greedy chain kept. A draft
        runner that can't hold a tree (a recurrent state) drafts the chain and offers the best siblings from the
        same rows, at no extra pass. Children are picked (top-w), never drawn: under sampling
        p_draft is None (one-hot, EAGLE's rule), under greedy each node's row is the draft's softmax it was
        picked from."""
        import torch
        if k < 1 or budget < 1:
            return Proposal.empty()
        self._learn_from_last_tree(context_ids)
        # children offered a node: EAGLE-2's top-10 (within the budget), for the calibrated scores to choose from;
        # the frontier a level expands (a draft pass over it) stays default_width
        tree = DynamicTree(min(10, budget), factor=self._calibration.factor, expand=default_width(budget, k))
        rows: list[torch.Tensor] = []
        if self.runner.tree_refusal() is None:
            self._grow_levels(tree, rows, context_ids, k)
        else:
            self._grow_chain(tree, rows, context_ids, k)
        shape = tree.reranked(budget)
        if not shape:
            return Proposal.empty()
        self._last_tree = (list(context_ids), shape.ids, shape.parents, [tree.ranks[i] for i in shape.nodes],
                           [tree.probs[i] for i in shape.nodes])
        p_draft = torch.stack([rows[tree.rows[i]] for i in shape.nodes]) if self._sampling.greedy else None
        return Proposal(shape.ids, p_draft, parents=shape.parents)

    def _learn_from_last_tree(self, context_ids: list[int]) -> None:
        """Teach the calibration what the target kept of the last tree, where this context goes on from its."""
        last, self._last_tree = self._last_tree, None
        if last is not None and len(context_ids) > len(last[0]) and context_ids[:len(last[0])] == last[0]:
            self._calibration.learn(*last[1:], committed=context_ids[len(last[0]):])

    def _grow_levels(self, tree: DynamicTree, rows: list, context_ids: list[int], k: int) -> None:
        """The tree level by level on the runner's own tree cache, which then keeps the context only."""
        runner = self.runner
        self._branch(tree, -1, runner.forward_tree(runner.sync(context_ids), [], [])[0], rows)
        expanded: dict[int, int] = {}  # tree node → its index in the runner's tree
        try:
            for depth in range(k - 1):
                frontier = tree.frontier(depth)
                if not frontier:
                    break
                logits = runner.grow_tree([tree.ids[i] for i in frontier],
                                          [expanded.get(tree.parents[i], -1) for i in frontier])
                for node, row in zip(frontier, logits):
                    expanded[node] = len(expanded)
                    self._branch(tree, node, row, rows)
        except BaseException:
            with contextlib.suppress(Exception):  # leave no tree pending, where the runner still holds it
                runner.keep_path([])
            raise
        runner.keep_path([])

    def _grow_chain(self, tree: DynamicTree, rows: list, context_ids: list[int], k: int) -> None:
        """The greedy chain, one forward pass a token; each pass's row offers the chain's siblings too."""
        feed = self.runner.sync(context_ids)
        for _ in range(k):
            self._branch(tree, tree.chain[-1] if tree.chain else -1, self.runner.forward(feed, 1)[-1], rows)
            feed = [tree.ids[tree.chain[-1]]]

    def _branch(self, tree: DynamicTree, parent: int, logits: torch.Tensor, rows: list) -> None:
        """`parent`'s children: the top `width` tokens of the draft's distribution after it (under the sampling
        settings; those it gives probability 0 are left out)."""
        import torch

        from engine.core.sampling import probabilities
        probs = probabilities(logits, self._sampling)
        top = torch.topk(probs, min(tree.width, probs.shape[-1]))
        ranked = [(token, prob) for token, prob in zip(top.indices.tolist(), top.values.tolist()) if prob > 0]
        tree.add_children(parent, ranked, len(rows))
        rows.append(probs)

    def observe(self, n_accepted: int) -> None:
        pass  # the next propose() syncs the cache by common prefix, rolling back rejected positions

    def release(self) -> None:
        self.runner.release()


class ModelDrafter(RunnerDrafter):
    """A separate draft model (any backend) with a runner of its own."""

    def __init__(self, draft: LoadedModel, name: str | None = None) -> None:
        super().__init__(draft.new_runner(), name)


def build(spec, target: LoadedModel, draft: LoadedModel | None, target_runner: Runner | None) -> ModelDrafter:
    if draft is None:
        raise ValueError(f"{spec.method} needs a loaded draft model")
    if tokenizer_difference(target.tokenizer, draft.tokenizer) is not None:
        from engine.drafters.cross_tokenizer import CrossTokenizerDrafter
        return CrossTokenizerDrafter(draft, target, ModelDrafter.name)
    return ModelDrafter(draft)


def hf_kwargs(spec, engine) -> dict:
    """transformers generate()'s assisted generation with the same draft model and a constant k; a draft of
    another tokenizer gets its universal assisted generation (both tokenizers given)."""
    draft = engine.drafts.draft_model(spec.draft)
    kwargs = {"assistant_model": draft.model, "num_assistant_tokens": spec.k,
              "num_assistant_tokens_schedule": "constant", "assistant_confidence_threshold": 0.0}
    if tokenizer_difference(engine.target.tokenizer, draft.tokenizer) is not None:
        kwargs.update(tokenizer=engine.target.tokenizer, assistant_tokenizer=draft.tokenizer)
    return kwargs


def llama_server_args(spec, engine) -> tuple[str, ...]:
    """llama-server's draft-simple with the same draft GGUF (resolved as the engine loads it), k and thread count
    (bench --compare-llama-server): k greedy draft tokens a round, none dropped (n_min 0, p_min 0). Its draft
    context is as long as the target's (it has no option for another). A recurrent (hybrid) target keeps no
    per-token states there under draft-simple, so after a partly rejected draft it restores a checkpoint and runs
    the kept tokens again in a round without a draft: equal outputs, fewer drafted tokens than ours.
    ConfigError where it has no equal: a draft of another tokenizer (llama-server refuses a vocabulary that
    differs), one that is not a GGUF on llama.cpp, or a recurrent draft for a target that is not (llama-server
    can't cut the draft's state back and stops). Sampling has none either: the bench compares greedy decoding."""
    from engine.host import engine_threads
    draft = engine.drafts.draft_model(spec.draft)
    if draft.backend != "llama.cpp" or not draft.source.gguf_file:
        raise ConfigError(f"llama-server drafts with a GGUF on llama.cpp; {draft.label} runs on {draft.backend}")
    difference = tokenizer_difference(engine.target.tokenizer, draft.tokenizer)
    if difference is not None:
        raise ConfigError(f"llama-server refuses a draft of another vocabulary ({draft.label}: {difference}); we "
                          "draft through text there")
    if draft.native.recurrent and not engine.target.native.recurrent:
        raise ConfigError(f"llama-server stops at the first rejected draft of {draft.label}: it keeps a recurrent "
                          f"state, which llama-server cuts back only for a recurrent target ({engine.target.label} "
                          "is not)")
    # --spec-type: a draft with MTP layers would otherwise be taken for an MTP head (llama-server reads its header)
    return ("--spec-type", "draft-simple", "-md", str(Path(draft.source.file).resolve()),
            "--spec-draft-n-max", str(spec.k), "--spec-draft-n-min", "0", "--spec-draft-p-min", "0",
            "-td", str(engine_threads()))


METHOD = MethodSpec(
    name=RunnerDrafter.name, label="draft model",
    description="A smaller model drafts k tokens (through text where its tokenizer differs); the target verifies "
                "them in one pass.",
    build=build, needs_draft=True, cross_tokenizer=True, implied_by_draft=True, hf_generate_kwargs=hf_kwargs,
    llama_server_args=llama_server_args, sweep_rank=2, branches=True,
    draft_help="a draft model: a name, a path or 'default'")
