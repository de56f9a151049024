"""Which model the chat has loaded and is loading, in plain Python (no Qt): the loaded model (and the backends it
is loaded on), the one load in flight, the target and draft chosen in the Models window until that target has
loaded, a device chosen for this run only, and the answers to the loader's safety questions given in this session
(the remembered ones are the window's QSettings). The chat session (gui.sessions.chat) holds one of each.

May touch: engine.models.consent (its answer record and question kinds). Never Qt, never a widget.
"""

from __future__ import annotations

from typing import Any

from engine.models.consent import PICKLE, REMOTE_CODE, ConsentAnswers


class ModelLoading:
    """The loaded model (`info`: gui.worker.ModelInfo), the one being loaded, and what waits for a load."""

    def __init__(self) -> None:
        self.info = None  # gui.worker.ModelInfo of the loaded model
        self.loaded_as: dict[str, Any] = {}  # backend -> ModelInfo: the loaded model there (a setting run there)
        self.loading: str | None = None  # the model being loaded
        self.pending_pair: tuple[str, str | None] | None = None  # the Models window's choice, until it loads
        self.device_override: tuple[str, str] | None = None  # (device, dtype) for this run only (--device)

    @property
    def ready(self) -> bool:
        """A model is loaded and none is loading."""
        return self.info is not None and self.loading is None

    def wants_load(self, name: str, force: bool = False) -> str | None:
        """The name to load (and it is now loading), or None when there is nothing to do: it is loading already,
        or it is the loaded model and `force` is off."""
        name = name.strip() or "default"
        if name == self.loading or (not force and self.loading is None and self.info is not None
                                    and name == self.info.requested):
            return None
        self.loading = name
        return name

    def loaded(self, info) -> None:
        self.loading = None
        self.info = info
        self.loaded_as = {info.backend: info}

    def loaded_on(self, info) -> None:
        """The loaded model, loaded on another backend too (for a method its own backend can't serve)."""
        if self.info is not None and info.requested == self.info.requested:
            self.loaded_as[info.backend] = info

    def expect_pair(self, target: str, draft: str | None) -> bool:
        """The Models window chose a target and draft: they wait until that target has loaded (`take_pair`).
        Returns whether it is the loaded one already (nothing to wait for)."""
        self.pending_pair = (target, draft)
        return self.info is not None and self.info.requested == target

    def take_pair(self, loaded: str) -> tuple[str, str | None] | None:
        """The pair chosen for `loaded`, once (None: none chosen, or chosen for another model)."""
        pending, self.pending_pair = self.pending_pair, None
        return pending if pending is not None and pending[0] == loaded else None


class SessionConsents:
    """The user's answers to the loader's safety questions (kind: remote-code | pickle) given in this session."""

    def __init__(self) -> None:
        self.answers: dict[tuple[str, str], bool] = {}  # (kind, model) -> the answer

    def answer(self, kind: str, model: str, answer: bool) -> None:
        self.answers[(kind, model)] = answer

    def get(self, kind: str, model: str, stored: bool | None) -> bool | None:
        """This session's answer, else the one remembered from an earlier run (`stored`)."""
        return self.answers.get((kind, model), stored)

    def merged_with(self, stored: dict[str, dict]) -> ConsentAnswers:
        """Every answer the loader must know: the remembered ones (`stored`: kind -> {model: answer}) with this
        session's on top."""
        def names(kind: str, answer: bool) -> frozenset[str]:
            merged = {**{m: a for m, a in stored.get(kind, {}).items() if isinstance(a, bool)},
                      **{m: a for (k, m), a in self.answers.items() if k == kind}}
            return frozenset(m for m, a in merged.items() if a is answer)

        return ConsentAnswers(remote_code_allowed=names(REMOTE_CODE, True), remote_code_refused=names(REMOTE_CODE, False),
                              pickle_allowed=names(PICKLE, True), pickle_refused=names(PICKLE, False))
