"""Heads on a llama.cpp target (engine.backends.heads): its MTP layers (inside its GGUF, or an mtp-*.gguf head
beside it: engine.backends.llama_cpp_mtp) and a Gemma 4 assistant GGUF reading its KV cache
(engine.backends.llama_cpp_assistant), as llama.cpp's own `--spec-type draft-mtp` runs them. Each drafter's
context is attached to the target runner when made, and again at the start of a generation after a release
(before the prefill, so that the head sees every pass's hidden states).

Touches the heads' llama.cpp models and contexts (through those modules) and keeps the one MTP head loaded
(a sidecar's weights, checked once, shared by the check and the drafter). No Qt.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from engine.backends.heads import HeadDrafting
from engine.backends.llama_cpp_assistant import (ASSISTANT_ARCHITECTURE, TARGET_ARCHITECTURES, AssistantContext,
                                                 AssistantWeights)
from engine.backends.llama_cpp_library import BACKEND, mtp_bindings
from engine.backends.llama_cpp_mtp import MtpContext, MtpHead
from engine.core.errors import ConfigError

if TYPE_CHECKING:
    import torch

    from engine.backends import LoadedModel
    from engine.backends.llama_cpp_runner import LlamaCppRunner


def check_chained_k(head: MtpHead, k: int) -> int:
    """Chained heads draft one token each: k ≤ heads. The head count."""
    if head.chained and k > head.n_heads:
        raise ConfigError(f"method mtp: {head.label} chains {head.n_heads} MTP heads, one drafted token each, "
                          f"so k is at most {head.n_heads}, got k={k}")
    return head.n_heads


class AttachedContext:
    """A HeadContext whose llama.cpp context (`attached`, None while released) is made by `_attach` when the
    drafter is built and again by begin() after a release; drafting goes to it."""

    attached = None

    def _attach(self) -> None:
        raise NotImplementedError

    def begin(self) -> None:
        if self.attached is None:  # released since the last generation: attached again before the prefill
            self._attach()

    def prefill(self, context_ids: list[int]) -> None:
        self.attached.prefill(context_ids)

    def draft(self, context_ids: list[int], k: int, choose: Callable[["torch.Tensor"], int]
              ) -> tuple[list[int], list["torch.Tensor"]]:
        return self.attached.draft(context_ids, k, choose)

    def release(self) -> None:
        if self.attached is not None:
            self.attached.release()
            self.attached = None


class LlamaMtpLayers(AttachedContext):
    """The target's MTP head drafting from the llama.cpp target runner's hidden states
    (engine.backends.heads.HeadContext). `attached`: the head's context, None while released."""

    def __init__(self, heads: "LlamaCppHeads", target: "LoadedModel", target_runner: "LlamaCppRunner",
                 draft: str | None) -> None:
        self._heads, self._target, self._runner, self._draft = heads, target, target_runner, draft
        self.attached: MtpContext | None = None
        self._attach()
        head = self.attached.head
        where = f"{head.sidecar.name} beside the model" if head.sidecar else "inside the model"
        self.note = (f"MTP on llama.cpp: {head.n_heads} chained heads ({where}), one drafted token each"
                     if head.chained else
                     f"MTP on llama.cpp: 1 head ({where}), re-applied on its own guess for each drafted "
                     "token after the first")

    def _attach(self) -> None:
        """The head and its context, reading every pass's states of the target runner from now on."""
        self.attached = MtpContext(self._heads.head(self._target, self._draft), self._runner)

    def release(self) -> None:
        """Free the head's context (and a sidecar's weights) and stop reading the target's states."""
        super().release()
        self._heads.forget()


class LlamaAssistant(AttachedContext):
    """A Gemma 4 assistant GGUF drafting from the llama.cpp target runner's cache and states
    (engine.backends.heads.HeadContext). `attached`: its context, None while released."""

    note = ("Gemma 4 assistant on llama.cpp: it reads the target's KV cache (shared memory), one pass per drafted "
            "token at the last token's position")

    def __init__(self, weights: AssistantWeights, target: "LoadedModel", target_runner: "LlamaCppRunner") -> None:
        self._weights, self._target, self._runner = weights, target, target_runner
        self.attached: AssistantContext | None = None
        self._attach()

    def _attach(self) -> None:
        """The assistant's context, reading the target runner's cache and states from now on."""
        self.attached = AssistantContext(self._weights, self._target.native, self._runner)

    def release(self) -> None:
        """Free the context and stop reading the target (the weights are the draft model's)."""
        super().release()


class LlamaCppHeads(HeadDrafting):
    """MTP heads and Gemma 4 assistants on a llama.cpp target. Keeps the one MTP head loaded: one target at a
    time, so an earlier one's head (and a sidecar's weights) go when another is asked for."""

    def __init__(self) -> None:
        super().__init__(BACKEND)
        self._loaded: dict[tuple, MtpHead] = {}  # (target, sidecar) → its head

    def head(self, target: "LoadedModel", draft: str | None) -> MtpHead:
        """The target's MTP head (its own layers, the sidecar beside it or `draft`), loaded once."""
        mtp_bindings()  # the bindings, checked every time: one line naming the version where they are missing
        key = (id(target.native), draft)
        head = self._loaded.get(key)
        if head is None or head.target is not target.native:
            head = MtpHead(target.native, draft)
            self._loaded.clear()
            self._loaded[key] = head
        return head

    def forget(self) -> None:
        """Let the loaded head go (its sidecar's weights are freed with it)."""
        self._loaded.clear()

    def check_mtp(self, target: "LoadedModel", k: int, draft: str | None) -> int:
        head = self.head(target, draft)
        return head.n_heads if k <= 1 else check_chained_k(head, k)

    def mtp(self, target: "LoadedModel", target_runner: "LlamaCppRunner", draft: str | None) -> LlamaMtpLayers:
        return LlamaMtpLayers(self, target, target_runner, draft)

    def check_assistant(self, target: "LoadedModel", draft: "LoadedModel | None") -> None:
        """The draft must be a Gemma 4 assistant GGUF, the target a Gemma 4 GGUF whose cache it can read (the size
        it was made for)."""
        if draft is None or not isinstance(draft.native, AssistantWeights):
            kind = "no draft" if draft is None else \
                f"{draft.label} (a {draft.native.header.architecture!r} model)" if draft.native is not None else \
                draft.label
            raise ConfigError(f"method assistant on llama.cpp needs a Gemma 4 assistant GGUF as --draft "
                              f"({ASSISTANT_ARCHITECTURE}, converted from google/gemma-4-…-it-assistant), got "
                              f"{kind}; use draft-model for other drafts")
        architecture = target.native.header.architecture
        if architecture not in TARGET_ARCHITECTURES:
            raise ConfigError(f"{draft.label} is a Gemma 4 assistant: it drafts only for a Gemma 4 target, and "
                              f"{target.label} is a {architecture!r} model")
        problem = draft.native.mismatch(target.native)
        if problem:
            raise ConfigError(problem)

    def assistant(self, target: "LoadedModel", draft: "LoadedModel", target_runner: "LlamaCppRunner"
                  ) -> LlamaAssistant:
        self.check_assistant(target, draft)
        return LlamaAssistant(draft.native, target, target_runner)


LLAMA_CPP_HEADS = LlamaCppHeads()
