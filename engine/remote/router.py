"""One model on several backends at once, behind the Engine's interface, so a comparison can put the same method
on both backends side by side (the GUI's compare window: `prompt-lookup:k=4` beside
`prompt-lookup:k=4,backend=transformers`). Each spec runs on the engine of its `backend=` (None: the first
engine's), loaded on first use by the loader it is given; runs still never overlap (engine.measure.compare drives it).
A spec on `backend=remote:url=…` (parse_spec("remote:url=http://HOST:PORT")) runs on that server instead:
a RemoteEngine (engine.remote.engine), connected on first use, beside the local runs.

Holds Engines (engine.core.engine), RemoteEngines and a loader; no Qt, no files of its own.
"""

from __future__ import annotations

from typing import Callable

from engine.core.config import SpecConfig


class BackendRouter:
    """`primary` serves specs without a backend and those on its own; `load(backend)` gives an Engine of the
    same model on another backend (called once per backend, when a spec first asks for it)."""

    def __init__(self, primary, load: Callable[[str], object]) -> None:
        self.primary = primary
        self._load = load
        self.engines: dict[str, object] = {primary.target.backend: primary}

    @property
    def target(self):  # what engine.measure.compare's diagnosis reads: the primary's model
        return self.primary.target

    @property
    def on_status(self):
        return self.primary.on_status

    def engine_for(self, spec: SpecConfig):
        backend = spec.backend or self.primary.target.backend
        if backend not in self.engines:
            if spec.remote_url is not None:
                from engine.remote.engine import load_remote
                engine = load_remote(spec.remote_url, self.primary.on_status)
            else:
                engine = self._load(backend)
                engine.consent = self.primary.consent
            engine.on_status = self.primary.on_status
            self.engines[backend] = engine
        return self.engines[backend]

    def validate(self, spec: SpecConfig) -> None:
        self.engine_for(spec).validate(spec)

    def release(self) -> None:
        for engine in self.engines.values():
            engine.release()

    def prompt_ids(self, conversation, system: str | None = None) -> list[int]:
        return self.primary.prompt_ids(conversation, system)

    def generate(self, conversation, *, spec: SpecConfig = SpecConfig(), **options):
        return self.engine_for(spec).generate(conversation, spec=spec, **options)

    def unload(self) -> None:
        """Free the engines loaded on other backends (the primary stays, as the caller holds it)."""
        for backend in [b for b in self.engines if self.engines[b] is not self.primary]:
            self.engines.pop(backend).release()
