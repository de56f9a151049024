"""Which catalog look-ups the chat's draft list waits for, in plain Python (no Qt).

The settings panel's draft list offers the installed models that can draft for the loaded target, and a target
that drafts for itself has its method offered first; both are looked up on a background thread
(gui.views.main.drafts runs them). `DraftLookups` remembers the target the list was made for and the job whose
answer is awaited, so an answer for a model no longer loaded is dropped.

May touch: nothing but its own fields. Never Qt.
"""

from __future__ import annotations


class DraftLookups:
    def __init__(self) -> None:
        self.target: str | None = None  # the target the draft list was made for
        self.choices_job: int | None = None  # the draft list's look-up in flight
        self.own_job: int | None = None  # the loaded target's catalog entry, for its own drafter

    def wants_choices(self, target: str | None, needs_draft: bool) -> bool:
        """A draft list is to be looked up: a target is loaded, its list was not made yet, a method needs one."""
        return target is not None and target != self.target and needs_draft

    def choices_submitted(self, target: str, job_id: int) -> None:
        self.target, self.choices_job = target, job_id

    def forget_target(self) -> None:
        """The installed models changed (a download finished): the next list is looked up again."""
        self.target = None

    def is_choices(self, job_id: int) -> bool:
        return job_id == self.choices_job

    def is_own(self, job_id: int) -> bool:
        return job_id == self.own_job
