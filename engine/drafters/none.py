"""Method `none`: plain decoding, the baseline every figure is compared with. Touches nothing."""

from __future__ import annotations

from engine.core.drafting import Drafter, Proposal
from engine.core.methods import MethodSpec


class NoDrafter(Drafter):
    name = "none"
    free_to_propose = True  # it proposes nothing
    note: str | None = None  # nothing to say at the start of a generation

    def begin(self, sampling, generator) -> None:
        pass

    def propose(self, context_ids: list[int], k: int) -> Proposal:
        return Proposal.empty()

    def observe(self, n_accepted: int) -> None:
        pass

    def release(self) -> None:
        pass


METHOD = MethodSpec(
    name=NoDrafter.name, label="none (plain decoding)",
    description="The target model writes every token itself: the baseline.",
    build=lambda spec, target, draft, target_runner: NoDrafter(), plain=True,
    hf_generate_kwargs=lambda spec, engine: {}, llama_reference=lambda spec: {"k": None})
