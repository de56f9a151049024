"""Which methods a model can use, and on which backend: the one table the settings panel's method list, its
refusals and the tests read. For each registered method, the model's own refusal (MethodSpec.why_unusable on
its catalog entry: no MTP layers, no Gemma 4 model), else the backend engine.backends.resolve_backend chooses
by the model and the method (with its note when the method moves the model to another backend), else that
function's refusal.

Names no method. Reads the method registry (populated once engine.drafters is imported), the backend registry
and catalog entries' facts; opens no file, loads nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.backends import resolve_backend
from engine.backends.source import ModelSource
from engine.core.errors import ConfigError
from engine.core.methods import method_spec, methods
from engine.models.catalog import CatalogEntry, entry_source
from engine.models.pairs import pairs_for


@dataclass(frozen=True, slots=True)
class MethodChoice:
    """Where one method runs for one model, or why it can't."""

    method: str
    backend: str | None = None  # None: refused
    note: str = ""  # why it runs there, where the method moves the model to another backend
    refusal: str = ""  # why the model can't use it (None backend)

    @property
    def usable(self) -> bool:
        return self.backend is not None


def method_choice(method_name: str, source: ModelSource, entry: CatalogEntry | None = None,
                  requested: str | None = "auto", loaded: str | None = None) -> MethodChoice:
    """Method `method_name` for the model at `source` (described by `entry`, when known) with the backend
    `requested` ("auto" or a name). `loaded`: the backend the model runs on now; under "auto" a method it serves
    stays there, one it can't serve goes where resolve_backend sends it."""
    spec = method_spec(method_name)
    if entry is not None and spec.why_unusable is not None:
        why = spec.why_unusable(entry, pairs_for(entry.name, entry.label, entry.repo_id))
        if why:
            return MethodChoice(spec.name, refusal=why)
    if requested in (None, "auto") and loaded is not None and spec.supports(loaded):
        return MethodChoice(spec.name, loaded)
    try:
        choice = resolve_backend(source, spec.name, requested)
    except ConfigError as exc:
        return MethodChoice(spec.name, refusal=str(exc))
    return MethodChoice(spec.name, choice.name, note=choice.note)


def method_choices(source: ModelSource, entry: CatalogEntry | None = None, requested: str | None = "auto",
                   loaded: str | None = None) -> tuple[MethodChoice, ...]:
    """`method_choice` for every registered method, in the registry's order."""
    return tuple(method_choice(m.name, source, entry, requested, loaded) for m in methods())


def entry_choices(entry: CatalogEntry, requested: str | None = "auto",
                  loaded: str | None = None) -> tuple[MethodChoice, ...]:
    """The table for a described model (its files make the source)."""
    return method_choices(entry_source(entry), entry, requested, loaded)


__all__ = ["MethodChoice", "method_choice", "method_choices", "entry_choices"]
