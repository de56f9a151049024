"""Method `early-exit`: self-speculation from the target's own first L layers plus its final norm and
head (LayerSkip, arXiv 2404.16710; Draft & Verify, arXiv 2309.08168). The drafter is a view that shares the
target's modules, so it costs no weight memory; it keeps a KV cache of its own for its L layers.

Transformers backend only (the method table says so; the drafter refuses another backend before the
first round). Touches the target's torch modules read-only, and its own runner.

Untrained exits draft poorly (SmolLM2-135M: about 1 % acceptance); models trained for early exit
(e.g. LayerSkip checkpoints) do far better. Output stays lossless either way.
"""

from __future__ import annotations

import copy

from torch import nn

from engine.backends import LoadedModel
from engine.backends.transformers import TransformersRunner
from engine.core.config import check_backend, check_layers
from engine.drafters.draft_model import RunnerDrafter
from engine.core.errors import ConfigError


def shallow_view(model: nn.Module, layers: int) -> tuple[nn.Module, object]:
    """A model object that runs only the first `layers` decoder layers of `model`, sharing every weight."""
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
    name = "early-exit"

    def __init__(self, target: LoadedModel, layers: int) -> None:
        check_backend("early-exit", target.backend)  # a view of torch modules: transformers only
        check_layers(layers, target.n_layers)
        view, config = shallow_view(target.model, layers)
        super().__init__(TransformersRunner(view, config), name="early-exit")
        self.layers = layers
