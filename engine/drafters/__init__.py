"""One drafter per method. `make_drafter` builds the one a SpecConfig asks for, from LoadedModels (each
drafter that owns a model owns its runner). Imports the drafters and the method-free contract only."""

from __future__ import annotations

from engine.backends import LoadedModel
from engine.config import SpecConfig
from engine.drafters.base import Drafter, Proposal
from engine.drafters.draft_model import ModelDrafter
from engine.drafters.early_exit import EarlyExitDrafter
from engine.drafters.none import NoDrafter
from engine.drafters.prompt_lookup import PromptLookupDrafter

__all__ = ["Drafter", "Proposal", "make_drafter", "NoDrafter", "ModelDrafter", "EarlyExitDrafter",
           "PromptLookupDrafter", "default_early_exit_layers"]


def default_early_exit_layers(n_layers: int) -> int:
    """Half the target's layers, a common starting point for untrained exits."""
    return max(1, n_layers // 2)


def make_drafter(spec: SpecConfig, target: LoadedModel, draft: LoadedModel | None = None) -> Drafter:
    """The drafter of `spec.method` for `target` (and `draft`, the loaded draft model of draft-model)."""
    if spec.method == "none":
        return NoDrafter()
    if spec.method == "prompt-lookup":
        return PromptLookupDrafter(spec.ngram_max, spec.ngram_min)
    if spec.method == "early-exit":
        return EarlyExitDrafter(target, spec.layers or default_early_exit_layers(target.n_layers))
    if spec.method == "draft-model":
        if draft is None:
            raise ValueError("draft-model needs a loaded draft model")
        return ModelDrafter(draft)
    raise ValueError(spec.method)
