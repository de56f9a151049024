"""Method `early-exit`: self-speculation from the target's own first L layers plus its final norm and
head (LayerSkip, arXiv 2404.16710; Draft & Verify, arXiv 2309.08168). The drafter is a view that shares the
target's modules, so it costs no weight memory; it keeps a KV cache of its own for its L layers.

Transformers backend only (its MethodSpec says so; the drafter refuses another backend before the first
round). Touches the target's torch modules read-only, and its own runner.

Untrained exits draft poorly; models trained for early exit (e.g. LayerSkip checkpoints) do far better. Output stays lossless either way.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

from engine.backends import LoadedModel
from engine.core.config import check_backend
from engine.core.drafting import Proposal
from engine.core.errors import ConfigError
from engine.core.methods import MethodSpec, ModelFacts, ParamSpec
from engine.drafters.draft_model import RunnerDrafter

if TYPE_CHECKING:
    import torch
    from torch import nn

NAME = "early-exit"


def default_layers(n_layers: int) -> int:
    """Half the target's layers, a common starting point for untrained exits."""
    return max(1, n_layers // 2)


def check_layers(layers: int | None, n_layers: int | None) -> int | None:
    """`layers` (None: auto) is below the target's layer count (when known): drafting with every layer is the
    target."""
    if layers is not None and n_layers is not None and layers > n_layers - 1:
        raise ConfigError(f"{NAME} layers must be from 1 to {n_layers - 1} for this model "
                          f"({n_layers} layers), got {layers}")
    return layers


def shallow_view(model: "nn.Module", layers: int) -> tuple["nn.Module", object]:
    """A model object that runs only the first `layers` decoder layers of `model`, sharing every weight."""
    from torch import nn
    base_name = getattr(model, "base_model_prefix", "model")
    base = getattr(model, base_name, None)
    decoder_layers = getattr(base, "layers", None)
    if base is None or not isinstance(decoder_layers, nn.ModuleList):
        raise ConfigError(f"early-exit needs a decoder with a `layers` list; {type(model).__name__} has none")
    config = copy.deepcopy(base.config)
    config.num_hidden_layers = layers
    if isinstance(getattr(config, "layer_types", None), list):
        config.layer_types = config.layer_types[:layers]
    view_base = copy.copy(base)
    view_base._modules = dict(base._modules)
    view_base._modules["layers"] = nn.ModuleList(list(decoder_layers)[:layers])
    view_base.config = config
    view = copy.copy(model)
    view._modules = dict(model._modules)
    view._modules[base_name] = view_base
    view.config = config
    return view, config


class EarlyExitDrafter(RunnerDrafter):
    name = NAME

    def __init__(self, target: LoadedModel, layers: int) -> None:
        from engine.backends.transformers import TransformersRunner
        check_backend(NAME, target.backend)  # a view of torch modules: transformers only
        check_layers(layers, target.n_layers)
        view, config = shallow_view(target.model, layers)
        super().__init__(TransformersRunner(view, config), name=NAME)  # forward_unread: its own ability
        self.layers = layers

    def propose(self, context_ids: list[int], k: int) -> Proposal:
        """RunnerDrafter.propose with the drafted tokens left on the device: each pass takes the token the pass
        before chose as a tensor (TransformersRunner.forward_unread), and the host reads the k ids once, at the
        end: one sync a round instead of one a drafted token."""
        import torch
        runner = self.runner
        feed = runner.sync(context_ids)
        if k < 1:
            return Proposal.empty()
        tokens: list[torch.Tensor] = []
        rows: list[torch.Tensor] = []
        try:
            logits = runner.forward(feed, 1)[-1]  # a new tensor each pass: kept without a copy
            for step in range(k):
                token, row = self.choose(logits)
                tokens.append(token)
                rows.append(row)
                if step + 1 < k:
                    logits = runner.forward_unread(token.view(1), 1)[-1]
            draft_ids = torch.stack(tokens).tolist()
        except BaseException:
            runner.reset()  # its cache holds positions `ids` can't name
            raise
        runner.read_unread(draft_ids[:-1])
        return self.proposal(draft_ids, rows)

    def choose(self, logits: "torch.Tensor") -> tuple["torch.Tensor", "torch.Tensor"]:
        """pick() with the token left on the device (a 0-d tensor): the argmax when greedy, else a draw."""
        import torch

        from engine.core.sampling import probabilities, sample
        if self._sampling.greedy:
            return torch.argmax(logits), logits
        probs = probabilities(logits, self._sampling)
        return sample(probs, self._generator), probs


def check_facts(spec, facts: ModelFacts) -> None:
    check_layers(spec.param("layers"), facts.n_layers)


def check_attention_in_view(target: LoadedModel, layers: int) -> None:
    """A hybrid target's first layers must include a full-attention one: transformers' cache asks every view for
    its length through an attention layer, and a view of linear-attention layers only has none."""
    types = getattr(target.model.config.get_text_config(), "layer_types", None) if target.model is not None \
        else None
    if not types or any(kind != "linear_attention" for kind in types[:layers]):
        return
    first = next((i for i, kind in enumerate(types) if kind != "linear_attention"), None)
    fix = f"use layers ≥ {first + 1}" if first is not None and first + 1 < len(types) else "use another method"
    raise ConfigError(f"{NAME}: the first {layers} layer{'s' if layers > 1 else ''} of {target.label} "
                      f"{'are' if layers > 1 else 'is'} linear attention only, which transformers can't run as a "
                      f"model of its own; {fix}")


def check(spec, target: LoadedModel, draft: LoadedModel | None) -> None:
    check_backend(NAME, target.backend)
    check_facts(spec, ModelFacts(n_layers=target.n_layers, backend=target.backend))
    check_attention_in_view(target, spec.param("layers") or default_layers(target.n_layers))


def build(spec, target: LoadedModel, draft, target_runner) -> EarlyExitDrafter:
    return EarlyExitDrafter(target, spec.param("layers") or default_layers(target.n_layers))


def hf_kwargs(spec, engine) -> dict:
    """transformers generate()'s assisted generation with its own early exit at the same layer and k."""
    return {"assistant_early_exit": spec.param("layers") or default_layers(engine.target.n_layers),
            "num_assistant_tokens": spec.k, "num_assistant_tokens_schedule": "constant",
            "assistant_confidence_threshold": 0.0}


METHOD = MethodSpec(
    name=NAME, label="early exit (self-speculative)",
    description="The target's first layers draft (self-speculation); the full model verifies.",
    params=(ParamSpec("layers", int, None, "early-exit: target layers that draft (default: the method's own "
                      "choice)", min=1),),
    backends=("transformers",), cache_params=("layers",), check=check, check_facts=check_facts, build=build,
    hf_generate_kwargs=hf_kwargs, branches=True,
    sweep_rank=1)
