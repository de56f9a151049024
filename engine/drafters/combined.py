"""Combined methods `lookup+model` (engine.core.methods.combined_spec): a lookup drafter (prompt lookup, or any
method that drafts from the text alone) proposes where it has a match; the model or head drafter proposes
otherwise. llama.cpp combines its n-gram drafters with a draft model the same way (the n-gram one first).

Each round has one proposer, and the round's drafter is its name (`name` is the last proposer's, read by the loop
after propose), so the transcript, the stats' per-drafter acceptance and the adaptive draft length tell them
apart. A lookup's draft is one-hot, a model's has its distribution: the verifier keeps either exact. The model
drafter's cache catches up by common prefix on the rounds it sat out (its propose syncs it).
"""

from __future__ import annotations

from engine.core.drafting import Drafter, Proposal

MODEL_BUCKET = 1000  # the model drafter's guesses are their own kind for the adaptive draft length


class CombinedDrafter(Drafter):
    free_to_propose = False  # the model drafter costs a pass per token: the adaptive length decides k first

    def __init__(self, lookup, model) -> None:
        self.lookup, self.model = lookup, model
        self.name = lookup.name
        self._last = None  # the drafter of the last proposal

    @property
    def note(self) -> str | None:
        """Both drafters' lines (read at the start of a generation, after begin: a drafter may say something
        new each time)."""
        return _joined(self.lookup.note, self.model.note)

    @property
    def warning(self) -> str | None:
        return _joined(self.lookup.warning, self.model.warning)

    def begin(self, sampling, generator) -> None:
        self.lookup.begin(sampling, generator)
        self.model.begin(sampling, generator)

    def prefill(self, context_ids: list[int]) -> None:
        self.lookup.prefill(context_ids)
        self.model.prefill(context_ids)

    def propose(self, context_ids: list[int], k: int) -> Proposal:
        proposal = self.lookup.propose(context_ids, k)
        if proposal.ids:
            self._last, self.name = self.lookup, self.lookup.name
            return proposal
        self._last, self.name = self.model, self.model.name
        guess = self.model.propose(context_ids, k)
        return Proposal(guess.ids, guess.p_draft, MODEL_BUCKET + guess.bucket, guess.sources)

    def observe(self, n_accepted: int) -> None:
        if self._last is not None:
            self._last.observe(n_accepted)

    def learn(self, reply_ids: list[int]) -> None:
        """A finished reply, for a lookup that learns from past replies (suffix with learning on)."""
        for part in (self.lookup, self.model):
            part.learn(reply_ids)

    def release(self) -> None:
        self.lookup.release()
        self.model.release()


def _joined(*lines: str | None) -> str | None:
    said = [line for line in lines if line]
    return "; ".join(said) if said else None
