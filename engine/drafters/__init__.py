"""One drafter per method. `make_drafter` builds the one a SpecConfig asks for."""

from __future__ import annotations

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


def make_drafter(spec: SpecConfig, target_model, draft_model=None) -> Drafter:
    if spec.method == "none":
        return NoDrafter()
    if spec.method == "prompt-lookup":
        return PromptLookupDrafter(spec.ngram_max, spec.ngram_min)
    if spec.method == "early-exit":
        n_layers = target_model.config.get_text_config().num_hidden_layers
        return EarlyExitDrafter(target_model, spec.layers or default_early_exit_layers(n_layers))
    if spec.method == "draft-model":
        if draft_model is None:
            raise ValueError("draft-model needs a loaded draft model")
        return ModelDrafter(draft_model, name="draft-model")
    raise ValueError(spec.method)
