"""Drafting from the target's own states, as a backend offers it: the methods whose drafter is a head on the
target (its multi-token-prediction layers, a Gemma 4 assistant reading its KV cache) are written once
(engine.drafters.mtp, engine.drafters.assistant) against `HeadDrafting`, which every LoadedModel declares
(`LoadedModel.heads`). A backend that serves them overrides it (engine.backends.transformers_heads,
engine.backends.llama_cpp_heads); the default says they are not available here, and why. So no drafter names
a backend or reads a backend's own model object.

A `HeadContext` is what such a drafter drafts with: `draft(context_ids, k, choose)` runs the head and asks
`choose(logits)` for each token (engine.core.drafting.PickingDrafter.proposal_from).

Types only; imports nothing heavy. No Qt.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Protocol

from engine.core.errors import ConfigError

if TYPE_CHECKING:
    import torch

    from engine.core.runner import Runner


class HeadContext(Protocol):
    """A head drafting for one target runner, from that runner's states."""

    note: str | None  # one line for the start of a generation (how the head drafts here), or None

    def begin(self) -> None:
        """A generation starts: read the target runner's states from its first pass (again after a release)."""

    def prefill(self, context_ids: list[int]) -> None:
        """The target runner has just taken in all but the last of `context_ids` (the prompt): take in its states
        now rather than in the first draft() (by default, nothing to take in)."""

    def draft(self, context_ids: list[int], k: int, choose: Callable[["torch.Tensor"], int]
              ) -> tuple[list[int], list["torch.Tensor"]]:
        """Up to k ids after `context_ids` (the target runner holds all but the last), each chosen by `choose`
        from the head's float32 logits (vocab,), with those logits (copies: the caller may keep them)."""

    def release(self) -> None:
        """Free what is kept between conversations (begin() takes it up again)."""


class HeadDrafting:
    """What a backend offers the head-based methods: by default nothing, saying so. `target` and `draft` are the
    LoadedModels (engine.backends) the method was given."""

    def __init__(self, backend: str = "this backend") -> None:
        self.backend = backend

    def _not_here(self, what: str) -> ConfigError:
        return ConfigError(f"{what} does not run on {self.backend}: it reads the target's own hidden states or "
                           "cache, which this backend does not hand to a drafter")

    def check_mtp(self, target, k: int, draft: str | None) -> int:
        """How many MTP layers (heads) `target` drafts with; ConfigError where it can't, or k is beyond them."""
        raise self._not_here("method mtp")

    def mtp(self, target, target_runner: "Runner", draft: str | None) -> HeadContext:
        """The target's MTP layers drafting from `target_runner`'s states (`draft`: a head file, where one is given)."""
        raise self._not_here("method mtp")

    def check_assistant(self, target, draft) -> None:
        """ConfigError where `draft` is not an assistant that can read `target`'s states."""
        raise self._not_here("method assistant")

    def assistant(self, target, draft, target_runner: "Runner") -> HeadContext:
        """The assistant `draft` drafting from `target_runner`'s states (checked by check_assistant first)."""
        raise self._not_here("method assistant")
