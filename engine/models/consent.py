"""The two safety questions asked before a model loads: run the model's own Python code (trust_remote_code)?
load weights that are pickle checkpoints only (they can run code)? The check lives in the engine so that
every front end that can ask the user shares it: the app's worker thread (gui.worker) asks in a dialog; the
CLI and the GUI's scripted mode never ask: `require` stops them at once with the flag that answers the
question (--trust-remote-code, --allow-pickle). The loader itself (engine.models.load.load_model) refuses pickle
weights it was not allowed, whoever calls it, and transformers always gets trust_remote_code explicitly.

`safety_check` reads config and weight file names only (cheap, no model is loaded). It raises ConsentNeeded
when the user must be asked first and UnsafeCheckpointError when they already said no. Touches the files
of the model's folder (read only); no Qt, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.core.errors import SpecScopeError, UnsafeCheckpointError

REMOTE_CODE, PICKLE = "remote-code", "pickle"
FLAGS = {REMOTE_CODE: "--trust-remote-code", PICKLE: "--allow-pickle"}


@dataclass(frozen=True, slots=True)
class ConsentAnswers:
    """The user's per-model answers to the two questions. A name in neither set of a question: not asked."""

    remote_code_allowed: frozenset[str] = frozenset()
    remote_code_refused: frozenset[str] = frozenset()
    pickle_allowed: frozenset[str] = frozenset()
    pickle_refused: frozenset[str] = frozenset()

    @classmethod
    def from_flags(cls, names, *, trust_remote_code: bool, allow_pickle: bool) -> "ConsentAnswers":
        """The answers a command line gives for `names` (target and draft): yes where its flag is set, else
        not asked (so `require` stops and names the flag)."""
        chosen = frozenset(name for name in names if name)
        return cls(remote_code_allowed=chosen if trust_remote_code else frozenset(),
                   pickle_allowed=chosen if allow_pickle else frozenset())


class ConsentNeeded(SpecScopeError):
    """Loading `model` needs the user's answer to a safety question first (`kind`: REMOTE_CODE | PICKLE)."""

    def __init__(self, kind: str, model: str, message: str) -> None:
        super().__init__(message)
        self.kind, self.model = kind, model

    @property
    def flag(self) -> str:
        return FLAGS[self.kind]

    def unattended(self) -> str:
        """The one line a run that can't ask (CLI, scripted GUI) stops with: what is at stake, and the flag."""
        what = ("comes with its own Python code (auto_map), which SpecScope does not run unless you say so"
                if self.kind == REMOTE_CODE else
                "has its weights only as pickle checkpoints (.bin/.pt), which can run code when loaded")
        return f"{self.model} {what}; if you trust its authors, run again with {self.flag}"


def _model_folder(name: str):
    """(folder, label) of a model that is a folder of files, else None (a GGUF file, a name that does not
    resolve: the loader reports those)."""
    from engine.models.sources import resolve_source

    try:
        source = resolve_source(name)
    except SpecScopeError:
        return None
    if source.gguf_file or not source.path.is_dir():
        return None
    return source.path, source.label


def safety_check(name: str, answers: ConsentAnswers) -> None:
    """Before loading a folder or cached hub model: ask (ConsentNeeded) when it names its own Python code and
    the user was never asked about it, or when its weights are pickle checkpoints only; refuse pickle weights
    the user declined."""
    from engine.backends.source import weight_files
    from engine.models.folder_facts import needs_remote_code

    found = _model_folder(name)
    if found is None:
        return
    folder, label = found
    if needs_remote_code(folder) and name not in answers.remote_code_allowed \
            and name not in answers.remote_code_refused:
        raise ConsentNeeded(REMOTE_CODE, name,
                            f"{label} comes with its own Python code (trust_remote_code). Running it means "
                            f"running code from {label}'s authors on this computer. Run it for this model?")
    try:
        _present, _missing, weights_format = weight_files(folder)
    except OSError:
        return
    if weights_format != "pickle":
        return
    if name in answers.pickle_refused:
        raise UnsafeCheckpointError(f"{label} has its weights only as pickle checkpoints, and you chose not "
                                    "to load them (they can run code when loaded)")
    if name not in answers.pickle_allowed:
        raise ConsentNeeded(PICKLE, name,
                            f"{label} has its weights only as pickle checkpoints (.bin/.pt), which can run "
                            "any code on this computer when loaded. Load them only if you trust its "
                            "authors. Load them?")


def require(names, *, trust_remote_code: bool = False, allow_pickle: bool = False) -> None:
    """For a run that can't ask (CLI, scripted GUI): every model of `names` (target, draft; None skipped)
    passes safety_check with the flags' answers, else ConsentNeeded is raised (its `unattended()` line names
    the flag)."""
    names = [name for name in names if name]
    answers = ConsentAnswers.from_flags(names, trust_remote_code=trust_remote_code, allow_pickle=allow_pickle)
    for name in names:
        safety_check(name, answers)


def is_pickle_only(name: str) -> bool:
    """Whether `name` is a folder whose weights are pickle checkpoints only (engine.backends.source.weight_files)."""
    from engine.backends.source import weight_files

    found = _model_folder(name)
    if found is None:
        return False
    try:
        return weight_files(found[0])[2] == "pickle"
    except OSError:
        return False


__all__ = ["ConsentAnswers", "ConsentNeeded", "safety_check", "require", "is_pickle_only", "REMOTE_CODE",
           "PICKLE", "FLAGS"]
