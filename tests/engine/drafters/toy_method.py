"""A method that exists only in the tests: its drafter proposes one fixed token k times (`toy_token`, a
parameter of its own). Registering its MethodSpec is all it takes to run it everywhere; nothing in engine/ or
gui/ names it. Run as a script, it registers itself and runs the GUI's scripted mode with the arguments given.
"""

from __future__ import annotations

import sys

from engine.core.drafting import Drafter, Proposal
from engine.core.methods import MethodSpec, ParamSpec


class FixedTokenDrafter(Drafter):
    name = "toy-fixed"
    free_to_propose = True
    note: str | None = None

    def __init__(self, token: int) -> None:
        self.token = token
        self.proposals = 0

    def begin(self, sampling, generator) -> None:
        pass

    def propose(self, context_ids: list[int], k: int) -> Proposal:
        self.proposals += 1
        return Proposal([self.token] * k, None)

    def observe(self, n_accepted: int) -> None:
        pass

    def release(self) -> None:
        pass


METHOD = MethodSpec(
    name=FixedTokenDrafter.name, label="toy: one fixed token",
    description="Drafts the same token k times (a test of the method registry).",
    params=(ParamSpec("toy_token", int, 0, "toy-fixed: the token id it drafts", min=0),),
    cache_params=("toy_token",),
    build=lambda spec, target, draft, target_runner: FixedTokenDrafter(spec.param("toy_token")))


if __name__ == "__main__":
    import engine.drafters  # noqa: F401  (the shipped methods first, as every entry point has them)
    from engine.core.methods import register
    from gui import app

    register(METHOD)
    sys.exit(app.main(sys.argv[1:]))
