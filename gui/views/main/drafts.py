"""The main window's draft list: the catalog look-ups behind the settings panel's draft choices and the loaded
target's own drafter, run on a background thread (gui.jobs) made on first use.

What is awaited is gui.sessions.drafts.DraftLookups; this module submits the look-ups and hands their answers to
the settings panel. May touch: gui.jobs, the catalog's look-up functions (run on the thread), the settings panel's
public methods, the window's `draft_choices_shown` signal.
"""

from __future__ import annotations

from functools import partial

from engine.backends import is_local_backend
from engine.core.methods import method_spec
from gui.sessions.drafts import DraftLookups


class DraftLists:
    def __init__(self, window) -> None:
        self.window = window
        self.lookups = DraftLookups()
        self.jobs = None  # gui.jobs.BackgroundJobs, made on first use
        self.closed = False  # shut down: a model loaded after the window closed starts no thread

    def refresh(self) -> None:
        """The draft list offers the smaller models installed for the loaded target, those of its tokenizer first,
        then those of another (looked up on a background thread, once per target, when a method needs a draft)."""
        window = self.window
        info = window.session.model_info
        needs_draft = method_spec(window.controls.method_name()).needs_draft
        if self.closed or not self.lookups.wants_choices(info.requested if info is not None else None, needs_draft):
            return
        from gui.sessions.models import draft_choices

        job = self._thread().submit(partial(draft_choices, info.requested, window.settings.added_models()))
        self.lookups.choices_submitted(info.requested, job)

    def look_up_own_drafter(self, info) -> None:
        """The loaded target's catalog entry, described on the drafts' background thread: a model that drafts
        for itself (MTP layers, a Gemma 4 assistant) has its method offered first (a server's model: none)."""
        self.window.controls.set_own_drafter(None)
        self.lookups.own_job = None
        if self.closed or not is_local_backend(info.backend):
            self.window.own_drafter_looked_up.emit(None)
            return
        from engine.models.catalog import describe_name

        self.lookups.own_job = self._thread().submit(partial(describe_name, info.requested))

    def installed_changed(self) -> None:
        """A download finished: the draft list is looked up again."""
        self.lookups.forget_target()
        self.refresh()

    def shutdown(self) -> None:
        self.closed = True
        if self.jobs is not None:
            self.jobs.shutdown()

    def _thread(self):
        if self.jobs is None:
            from gui.jobs import BackgroundJobs

            self.jobs = BackgroundJobs("drafts", self.window)
            self.jobs.finished.connect(self._on_finished)
        return self.jobs

    def _on_finished(self, job_id: int, result) -> None:
        controls = self.window.controls
        if self.lookups.is_own(job_id):
            controls.set_own_drafter(result)
            self.window.own_drafter_looked_up.emit(result)
        if self.lookups.is_choices(job_id):
            controls.set_draft_choices(list(result.names), target_aliases=set(result.target_aliases),
                                       note=result.note, download=result.download,
                                       cross_tokenizer=set(result.cross_tokenizer))
            self.window.draft_choices_shown.emit(result)
