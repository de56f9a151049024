"""The METHOD REGISTRY: one drafter module per method, each declaring its `METHOD` (engine.core.methods.MethodSpec),
registered here one line each, in the order menus list them. `make_drafter`, `check_drafter` and
`drafter_cache_key` read a SpecConfig's MethodSpec, so they name no method. Importing this package costs no
torch: each MethodSpec's build and check import their drafter's heavy modules themselves.
"""

from __future__ import annotations

import dataclasses

from engine.backends import LoadedModel, Runner
from engine.core.config import SpecConfig, check_backend
from engine.core.drafting import Drafter, Proposal
from engine.core.methods import combined_spec, method_spec, register, register_combiner
from engine.drafters import (assistant, combined, draft_model, eagle, early_exit, mtp, ngram_map, ngram_mod,
                             none, prompt_lookup, suffix)

register(none.METHOD)
register(draft_model.METHOD)
register(prompt_lookup.METHOD)
register(early_exit.METHOD)
register(mtp.METHOD)
register(assistant.METHOD)
register(eagle.METHOD)
register(suffix.METHOD)
register(ngram_mod.METHOD)
register(ngram_map.METHOD)
register_combiner(combined.CombinedDrafter)
# combinations a menu offers (any lookup+model one parses on demand: engine.core.methods.combined_spec)
register(dataclasses.replace(combined_spec(prompt_lookup.METHOD, draft_model.METHOD), offered=True))
register(dataclasses.replace(combined_spec(prompt_lookup.METHOD, early_exit.METHOD), offered=True))

__all__ = ["Drafter", "Proposal", "make_drafter", "check_drafter", "drafter_cache_key"]


def check_drafter(spec: SpecConfig, target: LoadedModel, draft: LoadedModel | None = None) -> None:
    """ConfigError for what the method can't do with this target (and draft) before anything heavy is loaded:
    a backend that can't serve it, then the method's own check (MTP layers, an assistant's family, an eagle
    head, early-exit layers within the target's)."""
    info = method_spec(spec.method)
    check_backend(spec.method, target.backend)
    if info.check is not None:
        info.check(spec, target, draft)


def make_drafter(spec: SpecConfig, target: LoadedModel, draft: LoadedModel | None = None,
                 target_runner: Runner | None = None) -> Drafter:
    """The drafter of `spec.method` for `target` (and `draft`, the loaded draft model of a method that needs
    one). Methods that draft from the target's states read `target_runner`: the runner the loop verifies on."""
    return method_spec(spec.method).build(spec, target, draft, target_runner)


def drafter_cache_key(spec: SpecConfig) -> tuple:
    """What a built drafter depends on: the method, its draft and the parameters its MethodSpec names in
    `cache_params`. Equal keys may reuse the drafter; a changed one needs a new drafter."""
    info = method_spec(spec.method)
    return (spec.method, spec.draft, *((name, spec.param(name)) for name in info.cache_params))
