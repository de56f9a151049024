"""One drafter per method. `make_drafter` builds the one a SpecConfig asks for, from LoadedModels (each
drafter that owns a model owns its runner). Imports the drafters and the method-free contract only."""

from __future__ import annotations

from engine.backends import LoadedModel, Runner
from engine.core.config import SpecConfig
from engine.drafters.base import Drafter, Proposal
from engine.drafters.draft_model import ModelDrafter
from engine.drafters.early_exit import EarlyExitDrafter
from engine.drafters.none import NoDrafter
from engine.drafters.prompt_lookup import PromptLookupDrafter

__all__ = ["Drafter", "Proposal", "make_drafter", "check_drafter", "NoDrafter", "ModelDrafter", "EarlyExitDrafter",
           "PromptLookupDrafter", "default_early_exit_layers"]


def default_early_exit_layers(n_layers: int) -> int:
    """Half the target's layers, a common starting point for untrained exits."""
    return max(1, n_layers // 2)


def check_drafter(spec: SpecConfig, target: LoadedModel, draft: LoadedModel | None = None) -> None:
    """ConfigError for what only a method knows it can't do (before anything heavy is loaded): a target without
    MTP layers or k beyond them; an assistant that isn't one, or of another family than the target."""
    if spec.method == "mtp":
        from engine.drafters.mtp import check_mtp
        check_mtp(target, spec.k)
    elif spec.method == "assistant":
        from engine.drafters.assistant import check_assistant
        check_assistant(target, draft)
    elif spec.method == "eagle":
        from engine.drafters.eagle import check_eagle
        check_eagle(spec, target)


def make_drafter(spec: SpecConfig, target: LoadedModel, draft: LoadedModel | None = None,
                 target_runner: Runner | None = None) -> Drafter:
    """The drafter of `spec.method` for `target` (and `draft`, the loaded draft model of draft-model and
    assistant). MTP heads and assistants draft from `target_runner`'s states: the runner the loop verifies on."""
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
    if spec.method in ("mtp", "assistant"):
        if target_runner is None:
            raise ValueError(f"{spec.method} drafts from the target's runner; pass target_runner")
        if spec.method == "mtp":
            from engine.drafters.mtp import MtpDrafter
            return MtpDrafter(target, target_runner)
        from engine.drafters.assistant import AssistantDrafter
        return AssistantDrafter(target, draft, target_runner)
    if spec.method == "eagle":
        if target_runner is None:
            raise ValueError("eagle drafts from the target's runner; pass target_runner")
        from engine.drafters.eagle import make_eagle_drafter
        return make_eagle_drafter(spec, target, target_runner)
    raise ValueError(spec.method)
