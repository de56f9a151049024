"""The transformers backend's entry point (engine.backends.Backend.load): a model loads as
engine.backends.transformers.load makes it (eager runners on a DynamicCache); with `compile`, its runners are
engine.backends.transformers_static's instead (a static KV cache, torch.compile'd passes) where the model allows
it. Imports both, so that neither imports the other."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from engine.backends import LoadedModel, transformers, transformers_static

if TYPE_CHECKING:
    from engine.backends.source import ModelSource


def load(name: str, source: "ModelSource", *, compile: bool = False, **options) -> LoadedModel:
    loaded = transformers.load(name, source, **options)
    if not compile:
        return loaded
    factory, context_length, _refusal = transformers_static.static_runner_factory(
        loaded.model, loaded.device, loaded.context_length, loaded.label, options["progress"])
    return dataclasses.replace(loaded, runner_factory=factory, context_length=context_length)
