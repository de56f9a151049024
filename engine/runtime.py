"""The one assembly point: a loaded target plus what its methods need (draft models, drafters from the method
registry, the measured verify-cost curve) → an Engine; a server's address → a RemoteEngine; one model on
several backends → a BackendRouter. Used by `specscope generate`/`bench` (engine.cli, engine.measure) and the
GUI's worker thread (gui.worker) alike, so both get the same engine.

Touches torch's thread settings, transformers' logging and os.environ (TOKENIZERS_PARALLELISM), and loads
models through engine.models.load; no Qt. Nothing happens at import time: torch and transformers are imported
by the functions that need them.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Callable

from engine.backends import Note, backend_named, compile_note
from engine.core.compat import check_tokenizers
from engine.core.config import SpecConfig, check_backend
from engine.core.drafting import Drafter
from engine.core.engine import Engine
from engine.core.errors import ConfigError
from engine.core.stats import VerifyCost
from engine.drafters import check_drafter, drafter_cache_key, make_drafter
from engine.host import engine_threads, limit_torch_threads
from engine.models.consent import ConsentAnswers, safety_check
from engine.models.cost_cache import cached_verify_cost
from engine.models.load import LoadedModel, load_model
from engine.models.sources import resolve_source

Progress = Callable[[str], None]
Consent = Callable[[], ConsentAnswers]


def check_draft_backend(target: LoadedModel, draft_source, draft_name: str) -> None:
    """A draft runs on its target's backend: a GGUF target on llama.cpp needs a GGUF draft, and a GGUF draft
    does not draft for a Hugging Face target. ConfigError with the way out otherwise."""
    if not backend_named(target.backend).serves(draft_source):
        raise ConfigError(f"{draft_name} is a Hugging Face model, but {target.label} runs on {target.backend}, "
                          "where a draft must be a .gguf file too (or run both with --backend transformers)")
    if draft_source.gguf_file and target.source.kind in ("folder", "hub"):
        raise ConfigError(f"{draft_name} is a GGUF file, but {target.label} is a Hugging Face model: pick a "
                          "Hugging Face draft (a GGUF draft drafts for a GGUF target)")


class DraftProvider:
    """What a target's methods need, for one Engine (engine.core.engine.DraftSource): the draft model (loaded
    once, after the user's safety answers, on the target's backend and device, its tokenizer checked), the
    drafter of a setting (built from the method registry, rebuilt when a key of it changes) and the target's
    verify-cost curves (chains, tree passes) from its cache. `consent` gives the user's answers as they stand when
    a draft loads; `draft_loader` and `drafter_factory` are the real ones unless a test scripts them."""

    def __init__(self, target: LoadedModel, *, consent: Consent | None = None, on_status: Progress | None = None,
                 draft_loader=load_model, drafter_factory=make_drafter) -> None:
        self.target = target
        self.consent = consent or ConsentAnswers
        self.on_status = on_status
        self._draft_loader, self._drafter_factory = draft_loader, drafter_factory
        self._draft: LoadedModel | None = None
        self._drafter: Drafter | None = None
        self._drafter_key: tuple | None = None
        self._curves: dict[int, VerifyCost] = {}
        self._tree_curves: dict[int, VerifyCost] = {}

    def _status(self, message: str) -> None:
        if self.on_status is not None:
            self.on_status(message)

    def validate(self, spec: SpecConfig) -> None:
        check_backend(spec.method, self.target.backend)
        if spec.backend is not None and spec.backend != self.target.backend:
            raise ConfigError(f"{spec.label()} asks for the {spec.backend} backend, but {self.target.label} runs on "
                              f"{self.target.backend} (load it with --backend {spec.backend})")
        draft = self.draft_model(spec.draft) if spec.info.needs_draft else None
        self._check_pair(spec, draft)
        check_drafter(spec, self.target, draft)  # what only the method knows (layers, MTP layers, an assistant)

    def _check_pair(self, spec: SpecConfig, draft: LoadedModel | None) -> None:
        """A draft of another tokenizer only for a method that drafts across tokenizers."""
        if draft is not None and not spec.info.cross_tokenizer:
            check_tokenizers(self.target.tokenizer, draft.tokenizer, self.target.label, draft.label)

    def draft_model(self, name: str) -> LoadedModel:
        """Load (once) and check a draft model. The target itself is reused when named again."""
        if self._draft is not None and self._draft.name == name:
            return self._draft
        draft = self._new_draft(name)
        self._forget_drafter()
        self._draft = draft
        return draft

    def _new_draft(self, name: str) -> LoadedModel:
        """The target itself where it is named again (same weights: shared, the drafter still keeps its own cache),
        else the draft loaded on the target's backend, where the target's layers run (a llama.cpp target's logits
        are on the CPU even when offloaded)."""
        target = self.target
        if name == target.name or resolve_source(name) == resolve_source(target.name):
            return target
        check_draft_backend(target, resolve_source(name), name)
        return self._load_draft(name, device=target.placement or str(target.device), dtype=target.dtype,
                                backend=target.backend)

    def _load_draft(self, name: str, **where) -> LoadedModel:
        """Load a draft after the user's answers (a draft gets the target's two questions: ConsentNeeded)."""
        answers = self.consent()
        safety_check(name, answers)
        self._status(f"Loading draft model {name}…")
        return self._draft_loader(name, progress=self._status, trust_remote_code=name in answers.remote_code_allowed,
                                  allow_pickle=name in answers.pickle_allowed, **where)

    def _forget_drafter(self) -> None:
        if self._drafter is not None:
            self._drafter.release()
        self._drafter, self._drafter_key = None, None

    def drafter(self, spec: SpecConfig, target_runner) -> Drafter:
        key = drafter_cache_key(spec)
        if key != self._drafter_key:
            draft = self.draft_model(spec.draft) if spec.info.needs_draft else None
            self._check_pair(spec, draft)
            self._forget_drafter()
            self._drafter = self._drafter_factory(spec, self.target, draft, target_runner=target_runner)
            self._drafter_key = key
        return self._drafter

    def verify_curve(self, k: int) -> VerifyCost | None:
        """The target's measured cost of verifying 1…k+1 tokens, read from its cache (kept once found); None
        where it has not been measured (`specscope bench` measures and caches it): the theory then assumes
        verification free. Never measures: a generation's start stays as fast."""
        if k not in self._curves:
            curve = cached_verify_cost(self.target, k + 1, threads=engine_threads())
            if curve is None:
                return None
            self._curves[k] = curve
        return self._curves[k]

    def tree_curve(self, budget: int) -> VerifyCost | None:
        """The target's measured cost of a tree pass over 0…budget nodes (seconds[n − 1]: n − 1 nodes), read from
        its cache like verify_curve; None where not measured (`specscope bench --sweep-tree` measures it)."""
        if budget not in self._tree_curves:
            curve = cached_verify_cost(self.target, budget + 1, threads=engine_threads(), tree=True)
            if curve is None:
                return None
            self._tree_curves[budget] = curve
        return self._tree_curves[budget]

    def release(self) -> None:
        if self._drafter is not None:
            self._drafter.release()


def local_engine(target: LoadedModel, *, consent: Consent | None = None, on_status: Progress | None = None,
                 draft_loader=load_model, drafter_factory=make_drafter) -> Engine:
    """An Engine on a loaded target, its drafts provided as above."""
    drafts = DraftProvider(target, consent=consent, on_status=on_status, draft_loader=draft_loader,
                           drafter_factory=drafter_factory)
    return Engine(target, drafts, on_status=on_status)


class ServerDrafts(DraftProvider):
    """What a target on a server gets (engine.remote.verify): drafters that draft from the text alone (the lookup
    methods) or with a draft model loaded here (on its own best backend and device) of the server model's tokenizer;
    none that reads the target's own states, which stay on the server. No verify-cost curve (its passes are the
    server's)."""

    def validate(self, spec: SpecConfig) -> None:
        info = spec.info
        if not info.lookup and (not info.needs_draft or info.needs_target_runner or info.reads_head):
            from engine.core.methods import methods
            lookups = ", ".join(m.name for m in methods() if m.lookup)
            raise ConfigError(f"{spec.label()} drafts from the target's own states, which are on the server; with "
                              f"{self.target.label} SpecScope drafts from the text alone ({lookups}) or with a "
                              "draft model here (draft-model)")
        draft = self.draft_model(spec.draft) if info.needs_draft else None
        if draft is not None:  # the same tokenizer: a draft through text would ask the server to tokenize each round
            check_tokenizers(self.target.tokenizer, draft.tokenizer, self.target.label, draft.label)
        if info.check is not None:
            info.check(spec, self.target, draft)

    def _new_draft(self, name: str) -> LoadedModel:
        """A draft loaded here, where it runs best (its own backend and device: the target's are the server's)."""
        return self._load_draft(name)

    def verify_curve(self, k: int) -> VerifyCost | None:
        return None

    def tree_curve(self, budget: int) -> VerifyCost | None:
        return None


def drafting_on_server(remote, consent: Consent | None = None) -> Engine:
    """The Engine that drafts here and verifies each round on `remote`'s server (a RemoteEngine that can verify);
    `consent`: the user's answers for a draft model."""
    from engine.remote.verify import server_target
    info, target = remote.server, remote.target
    model = server_target(remote.client, info, target.model_id, target.name, target.label,
                          f"{info.kind} at {target.address.url}")
    return Engine(model, ServerDrafts(model, consent=consent, on_status=remote.on_status), on_status=remote.on_status)


def quiet_libraries() -> None:
    """No library progress bars or warnings on the terminal: the loader's own messages say what happens."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def terminal_progress(quiet: bool = False) -> Progress:
    """Loading messages on stderr where someone watches (a terminal, and not `quiet`); silent when piped, so
    errors stay the only line there, but for the notes on options left unused (engine.backends.Note), which
    are said always, as `specscope: note: …`."""
    shown = sys.stderr.isatty() and not quiet

    def progress(message: str) -> None:
        if isinstance(message, Note):
            print(f"specscope: note: {message}", file=sys.stderr)
        elif shown:
            print(message, file=sys.stderr)
    return progress


def load_engine(name: str, progress: Progress | None = None, *, device: str = "auto", dtype: str | None = None,
                trust_remote_code: bool = False, allow_pickle: bool = False, backend: str | None = "auto",
                method: str | None = None, consent: Consent | None = None, on_status: Progress | None = None,
                compile: bool = False):
    """Load the target `name` (engine.models.load.load_model) on `backend` ("auto", "transformers", "llama.cpp";
    None is "auto", decided by the model and the `method` it will run first, if known) and wrap it in the Engine, with the thread limit set and the libraries
    quiet; a server's address gives a RemoteEngine instead. `progress` hears the loader's lines, `on_status`
    the engine's own slow steps later on (loading a draft), `consent` the user's answers for drafts.
    `trust_remote_code` and `allow_pickle` only ever after the user agreed. `compile`: the target and its draft
    model on torch.compile'd static-cache runners (engine.backends.transformers_static)."""
    from engine.models.sources import is_server_url
    if is_server_url(name):  # a model on an inference server: nothing loads here (engine.remote.engine)
        from engine.remote.engine import load_remote
        remote = load_remote(name, progress, on_status=on_status,
                             local_drafts=functools.partial(drafting_on_server, consent=consent))
        if compile and progress is not None:
            progress(compile_note(remote.target.backend))
        return remote
    limit_torch_threads()
    quiet_libraries()
    target = load_model(name, device=device, dtype=dtype, progress=progress, trust_remote_code=trust_remote_code,
                        allow_pickle=allow_pickle, backend=backend or "auto", method=method, compile=compile)
    draft_loader = functools.partial(load_model, compile=True) if compile else load_model
    return local_engine(target, consent=consent, on_status=on_status, draft_loader=draft_loader)


class BackendRouter:
    """One model on several backends at once, behind the Engine's interface, so a comparison can put the same
    method on both backends side by side. Each spec runs on the engine of its `backend=` (None: the primary's),
    loaded on first use by `load(backend)`; a spec on `backend=remote:url=…` runs on that server (a
    RemoteEngine, connected on first use). Runs never overlap (engine.measure.compare drives them)."""

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
                self.engines[backend] = load_remote(spec.remote_url, self.primary.on_status,
                                                    on_status=self.primary.on_status,
                                                    local_drafts=drafting_on_server)
            else:
                self.engines[backend] = self._load(backend)
        return self.engines[backend]

    def validate(self, spec: SpecConfig) -> None:
        self.engine_for(spec).validate(spec)

    def release(self) -> None:
        for engine in self.engines.values():
            engine.release()

    def prompt_ids(self, conversation, system: str | None = None) -> list[int]:
        return self.primary.prompt_ids(conversation, system)

    def generate(self, conversation, *, spec: SpecConfig | None = None, **options):
        spec = SpecConfig() if spec is None else spec
        return self.engine_for(spec).generate(conversation, spec=spec, **options)


__all__ = ["load_engine", "local_engine", "DraftProvider", "BackendRouter", "check_draft_backend",
           "limit_torch_threads", "engine_threads", "quiet_libraries", "terminal_progress", "Progress"]
