"""EngineWorker: the one long-lived thread that holds the models and runs the engine's generator.

The window asks through queued signals (`load_requested`, `generation_requested` on its side, connected to
the slots here; the compare window's `comparison_requested`; the load options by `set_load_options`, never by
writing a field from the GUI thread), so requests run one at a time, in order, on the worker thread: a
comparison's runs never overlap a chat reply or each other. Stop is a `threading.Event` set directly from the
GUI thread: the worker is busy inside the generator, and the engine checks it between rounds. Every event goes back to the GUI thread by a queued signal, tagged with the id of
the request it belongs to, so the window can drop what a cancelled request still sends.

Models load through a loader (engine.runtime.load_engine in the app) after engine.models.consent's safety check;
slow steps (loading a model, a draft model) are reported by `status_reported`. A setting whose `backend=` is
not the loaded model's (a compared row's, or a method only that backend serves) runs on the same model loaded
there too (engine.runtime.BackendRouter, kept with the model; `model_loaded_on` says so). Touches QtCore only (a
QObject and a QThread), no widgets; the engine is driven only through its generator and `validate`.
"""

from __future__ import annotations

import dataclasses
import threading
import traceback
from dataclasses import dataclass, field
from typing import Callable

from PySide6.QtCore import QObject, QThread, Signal, Slot

from engine.backends import is_local_backend
from engine.backends.device import free_cached_memory
from engine.core.config import SamplingConfig, SpecConfig
from engine.models.consent import PICKLE, REMOTE_CODE  # noqa: F401 -- the window asks these questions by kind
from engine.models.consent import ConsentAnswers, ConsentNeeded, safety_check
from engine.core.errors import SpecScopeError
from engine.core.events import GenerationFinished, GenerationStarted, RoundsRevised, RoundVerified
from engine.runtime import limit_torch_threads, load_engine
from gui.sessions.purpose import Purpose


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """What the GUI knows of a loaded model (it never touches the model itself)."""

    name: str  # what the model calls itself
    requested: str  # what it was loaded as ("default", a path, a hub id)
    device: str
    dtype: str
    n_layers: int | None
    context_length: int | None
    backend: str = "transformers"  # transformers | llama.cpp | remote (engine.backends.BACKENDS, or a server)

    def describe(self) -> str:
        parts = [self.name, self.backend, self.device, self.dtype]
        if self.n_layers:
            parts.append(f"{self.n_layers} layers")
        return " · ".join(parts)


@dataclass(frozen=True, slots=True)
class CostCurve:
    """The measured cost of one target pass over n = 1…N tokens (engine.measure.verify_cost), for the window."""

    model: str
    backend: str
    device: str
    cost: object  # engine.core.stats.VerifyCost: seconds[n − 1] for one pass over n tokens, relative(n)


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    request_id: int
    model: str
    conversation: list
    spec: SpecConfig = field(default_factory=SpecConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    max_new_tokens: int = 256
    purpose: Purpose = Purpose.CHAT  # or BASELINE: a hidden plain-decoding run that measures the reference tok/s
    record: bool = False  # every round's tree too (engine generate(record=True): the round views' detail)


@dataclass(frozen=True, slots=True)
class ComparisonRequest:
    """Plain decoding, then each spec in turn, on one prompt (engine.measure.compare.comparison_events)."""

    request_id: int
    model: str
    prompt: str
    specs: tuple[SpecConfig, ...]
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    max_new_tokens: int = 128
    system: str | None = None
    strict: bool = False  # in float32 on the CPU with transformers (engine.measure.compare.strict_engine)


Progress = Callable[[str], None]
# loader(model name, progress, *, device, dtype, trust_remote_code) -> an engine (.target, .validate, .generate,
# .release, .on_status); engine.runtime.load_engine is the real one, tests pass their own.
EngineLoader = Callable[..., object]
load_real_engine: EngineLoader = load_engine  # the loader the app uses (gui.app, gui.benchmark)


@dataclass(frozen=True, slots=True)
class LoadOptions:
    """How models are loaded: device, dtype, and the user's per-model answers to the two safety questions
    (run the model's own code? load pickle weights?). Names missing from both sets of a question: not asked."""

    device: str = "auto"
    dtype: str = "auto"
    backend: str = "auto"  # auto | transformers | llama.cpp (engine.runtime.load_engine's backend)
    compile: bool = False  # torch.compile'd runners on a static KV cache (transformers; engine.runtime.load_engine)
    remote_code_allowed: frozenset[str] = frozenset()
    remote_code_refused: frozenset[str] = frozenset()
    pickle_allowed: frozenset[str] = frozenset()
    pickle_refused: frozenset[str] = frozenset()

    def loader_kwargs(self, name: str) -> dict:
        kwargs = {"device": self.device, "dtype": None if self.dtype == "auto" else self.dtype, "backend": self.backend,
                  "trust_remote_code": name in self.remote_code_allowed, "allow_pickle": name in self.pickle_allowed}
        return {**kwargs, "compile": True} if self.compile else kwargs

    def key(self, name: str) -> tuple:
        """What makes a loaded model the one asked for."""
        return (name, self.device, self.dtype, self.backend, self.compile, name in self.remote_code_allowed,
                name in self.pickle_allowed)

    def consent(self) -> ConsentAnswers:
        return ConsentAnswers(self.remote_code_allowed, self.remote_code_refused, self.pickle_allowed,
                              self.pickle_refused)


def model_info(engine, requested: str) -> ModelInfo:
    """What the window shows of the engine's loaded target (engine.models.load.LoadedModel)."""
    target = engine.target
    return ModelInfo(name=target.label, requested=requested, device=str(target.device), dtype=target.dtype_label,
                     n_layers=target.n_layers, context_length=target.context_length, backend=target.backend)


def error_message(exc: BaseException) -> str:
    """One clear sentence for the user; our own errors carry one, anything else is named."""
    if isinstance(exc, SpecScopeError):
        return str(exc) or type(exc).__name__
    if isinstance(exc, MemoryError):
        return "out of memory"
    return f"unexpected error ({type(exc).__name__}: {exc})"


class EngineWorker(QObject):
    """Lives on its own QThread; holds the loaded engine between messages."""

    model_load_started = Signal(str)
    model_load_progressed = Signal(str)  # a line from the loader (GGUF conversion, device, dtype)
    status_reported = Signal(str)  # a slow step begins: "Loading default…", "Loading draft model …"
    consent_needed = Signal(str, str, str)  # model name, kind (remote-code | pickle), the question
    draft_consent_needed = Signal(str, str, str)  # the same for a draft model, asked when a reply needs it
    model_loaded = Signal(object)  # ModelInfo
    model_loaded_on = Signal(object)  # ModelInfo: the loaded model on another backend too (for a setting run there)
    load_failed = Signal(str, str)  # model name, message
    generation_started = Signal(int, object)  # request id, GenerationStarted
    round_verified = Signal(int, object)  # request id, RoundVerified
    rounds_revised = Signal(int, object)  # request id, RoundsRevised: the reply's rounds as they really were
    generation_finished = Signal(int, object)  # request id, GenerationFinished
    generation_failed = Signal(int, str)  # request id, message
    comparison_advanced = Signal(int, int, object)  # request id, run index (-1: the plan, then its runs), event
    comparison_finished = Signal(int)  # request id (also after Stop: the runs that finished stand)
    comparison_failed = Signal(int, str)  # request id, message
    cost_measured = Signal(object)  # CostCurve: the loaded target's verify-cost curve on this machine
    cost_failed = Signal(str)  # why there is no curve (a model on a server, ...)

    def __init__(self, loader: EngineLoader | None = None) -> None:
        super().__init__()
        self._loader = loader or load_real_engine
        self._engine = None
        self._loaded_key: tuple | None = None
        self._loaded: tuple[str, LoadOptions] | None = None  # the loaded model's name and options
        self._router = None  # engine.runtime.BackendRouter: the loaded model on other backends too
        self.load_options = LoadOptions()  # the window's, given by `set_load_options` (a queued slot) before a load
        self.cancel = threading.Event()
        self.closing = threading.Event()

    # ------------------------------------------------------------------ slots (worker thread)
    @Slot(object)
    def set_load_options(self, options: LoadOptions) -> None:
        """How the next loads run (device, dtype, backend, the safety answers): the window's, sent by signal."""
        self.load_options = options

    @Slot(str)
    def load(self, name: str) -> None:
        if self.closing.is_set():
            return
        self._ensure_loaded(name)

    @Slot(object)
    def generate(self, request: GenerationRequest) -> None:
        if self.closing.is_set():
            return
        self.cancel.clear()
        if not self._ensure_loaded(request.model):
            self.generation_failed.emit(request.request_id, f"model {request.model!r} is not loaded")
            return
        rid = request.request_id
        try:
            limit_torch_threads(import_torch=False)
            spec = self._place(request.spec)
            engine = self._engine_for((spec,), request.model)
            events = engine.generate(request.conversation, spec=spec, sampling=request.sampling,
                                     max_new_tokens=request.max_new_tokens, cancel=self.cancel,
                                     record=request.record)
            for event in events:
                if isinstance(event, RoundVerified):
                    self.round_verified.emit(rid, event)
                elif isinstance(event, GenerationStarted):
                    self.generation_started.emit(rid, event)
                elif isinstance(event, RoundsRevised):
                    self.rounds_revised.emit(rid, event)
                elif isinstance(event, GenerationFinished):
                    self.generation_finished.emit(rid, event)
        except ConsentNeeded as exc:  # the draft model: ask, then the user sends again
            self.draft_consent_needed.emit(exc.model, exc.kind, str(exc))
            self.generation_failed.emit(rid, f"the draft model {exc.model} needs your answer first: answer, then send again")
        except Exception as exc:  # noqa: BLE001 — the GUI shows every failure as a message, never crashes
            if not isinstance(exc, SpecScopeError):
                traceback.print_exc()
            self.generation_failed.emit(rid, error_message(exc))

    @Slot(object)
    def compare(self, request: ComparisonRequest) -> None:
        """Every spec is checked before the first run, so a refused one costs no waiting; Stop ends the
        comparison at the next round boundary."""
        if self.closing.is_set():
            return
        self.cancel.clear()
        rid = request.request_id
        if not self._ensure_loaded(request.model):
            self.comparison_failed.emit(rid, f"model {request.model!r} is not loaded")
            return
        from engine.measure.compare import comparison_events

        try:
            limit_torch_threads(import_torch=False)
            specs = self.placed(request.specs)
            engine = self._engine_for(specs, request.model)
            refused = self._refused(specs, engine)
            if refused:
                self.comparison_failed.emit(rid, refused)
                return
            for index, event in comparison_events(engine, request.prompt, list(specs),
                                                  max_new_tokens=request.max_new_tokens, sampling=request.sampling,
                                                  cancel=self.cancel, system=request.system,
                                                  strict=request.strict):
                self.comparison_advanced.emit(rid, index, event)
        except ConsentNeeded as exc:
            self.draft_consent_needed.emit(exc.model, exc.kind, str(exc))
            self.comparison_failed.emit(rid, f"the draft model {exc.model} needs your answer first: answer, then send again")
            return
        except Exception as exc:  # noqa: BLE001 — shown as a message, never a crash
            if not isinstance(exc, SpecScopeError):
                traceback.print_exc()
            self.comparison_failed.emit(rid, error_message(exc))
            return
        self.comparison_finished.emit(rid)

    @Slot(int)
    def measure_cost(self, n_max: int) -> None:
        """The loaded target's cost of verifying 1…n_max tokens in one pass (engine.measure.verify_cost: cached per
        model file, backend, device and threads; measured in about a second when not)."""
        if self.closing.is_set() or self._engine is None:
            return
        from gui.demo_engine import DemoTarget

        target = self._engine.target
        if isinstance(target, DemoTarget):
            self.cost_failed.emit("no verify-cost curve in the demo: it replays a recording, no model is loaded")
            return
        if not is_local_backend(target.backend):
            self.cost_failed.emit(f"no verify-cost curve for a model on {target.backend}: its passes are not ours")
            return
        from engine.host import engine_threads
        from engine.measure.verify_cost import verify_cost

        try:
            limit_torch_threads(import_torch=False)
            cost = verify_cost(target, n_max, threads=engine_threads())
        except Exception as exc:  # noqa: BLE001 — shown as a message, never a crash
            self.cost_failed.emit(error_message(exc))
            return
        self.cost_measured.emit(CostCurve(target.label, target.backend, str(target.device), cost))

    # ------------------------------------------------------------------ helpers
    def _engine_for(self, specs, model: str):
        """The loaded engine, or, when a spec asks for another backend (`backend=`: a compared row's, or a
        method the loaded backend can't serve), a router that runs each spec on the same model loaded on its
        backend (loaded once, kept with the target, and said by `model_loaded_on`)."""
        own = self._engine.target.backend
        if all(spec.backend in (None, own) for spec in specs):
            return self._engine
        if self._router is None:
            from engine.runtime import BackendRouter

            def load_on(backend: str):
                self.status_reported.emit(f"Loading {model} on {backend}…")
                kwargs = {**self.load_options.loader_kwargs(model), "backend": backend}
                engine = self._loader(model, self.model_load_progressed.emit, **kwargs, **self._callbacks())
                self.model_loaded_on.emit(model_info(engine, model))
                return engine
            self._router = BackendRouter(self._engine, load_on)
        return self._router

    def placed(self, specs) -> tuple:
        """The specs with auto's backend filled in where the loaded backend can't serve a method (a compared early
        exit on a GGUF runs on transformers, as in the chat: engine.backends.resolve_backend); an explicit
        backend, or a method no backend can run here, is left as it is (validate says why)."""
        return tuple(self._place(spec) for spec in specs)

    def _place(self, spec):
        if spec.backend is not None or self.load_options.backend not in (None, "auto") or self._engine is None:
            return spec
        from engine.backends import resolve_backend
        from engine.core.methods import method_spec

        target = self._engine.target
        if not is_local_backend(target.backend) or target.source is None:  # a server's model; the demo's replay
            return spec
        try:
            if target.backend in method_spec(spec.method).backends:
                return spec
            choice = resolve_backend(target.source, spec.method, "auto")
        except SpecScopeError:
            return spec
        return dataclasses.replace(spec, backend=choice.name) if choice.name != target.backend else spec

    def _callbacks(self) -> dict:
        """What an engine is built with: where its slow steps are reported (loading a draft model) and the
        user's safety answers as they stand when a draft loads (a draft gets the target's two questions)."""
        return {"on_status": self.status_reported.emit, "consent": lambda: self.load_options.consent()}

    def _refused(self, specs, engine=None) -> str | None:
        """The first spec the engine can't run, as "label: reason"; None when all can run."""
        engine = engine or self._engine
        for spec in specs:
            try:
                engine.validate(spec)
            except ConsentNeeded:
                raise
            except SpecScopeError as exc:
                return f"{spec.label()}: {error_message(exc)}"
        return None

    def _ensure_loaded(self, name: str) -> bool:
        options = self.load_options
        if self._engine is not None and options.key(name) == self._loaded_key:
            return True
        try:
            safety_check(name, options.consent())
        except ConsentNeeded as exc:
            self.consent_needed.emit(name, exc.kind, str(exc))
            return False
        except SpecScopeError as exc:  # refused by the user's own answer: the loaded model stays
            self.model_load_started.emit(name)
            self.load_failed.emit(name, error_message(exc))
            return False
        previous = self._loaded
        self._unload()  # the old model's memory is free before the new one asks for it (a GPU holds one, not two)
        if self._load(name, options):
            return True
        if previous is not None and previous[0] != name:  # back to the model that was loaded: nothing is lost
            self.status_reported.emit(f"Loading {previous[0]} again…")
            self._load(*previous)
        return False

    def _load(self, name: str, options: LoadOptions) -> bool:
        self.model_load_started.emit(name)
        self.status_reported.emit(f"Loading {name}…")
        try:
            engine = self._loader(name, self.model_load_progressed.emit, **options.loader_kwargs(name),
                                  **self._callbacks())
            limit_torch_threads(import_torch=False)
        except ConsentNeeded as exc:
            self.consent_needed.emit(name, exc.kind, str(exc))
            return False
        except Exception as exc:  # noqa: BLE001
            if not isinstance(exc, SpecScopeError):
                traceback.print_exc()
            free_cached_memory()  # what the failed load allocated
            self.load_failed.emit(name, error_message(exc))
            return False
        self._engine = engine
        self._router = None  # a comparison on another backend loads the new model there
        self._loaded_key = options.key(name)
        self._loaded = (name, options)
        self.model_loaded.emit(model_info(engine, name))
        return True

    def _unload(self) -> None:
        """Drop the loaded engine (and the same model on other backends) and hand its memory back to the device."""
        engine, router = self._engine, self._router
        self._engine = self._router = None
        self._loaded_key = self._loaded = None
        if engine is None:
            return
        for held in (router, engine):
            if held is not None:
                try:
                    held.release()
                except Exception:  # noqa: BLE001 — a cache that can't be freed is dropped with its engine anyway
                    traceback.print_exc()
        del engine, router, held
        free_cached_memory()


class WorkerThread:
    """Owns the QThread and the worker on it; `shutdown()` stops the generator and joins the thread."""

    def __init__(self, loader: EngineLoader | None = None) -> None:
        self.thread = QThread()
        self.thread.setObjectName("engine")
        self.worker = EngineWorker(loader)
        self.worker.moveToThread(self.thread)
        self.thread.start()

    def stop_generation(self) -> None:
        self.worker.cancel.set()

    def shutdown(self) -> None:
        """Stop at the next round, finish the thread's event loop and wait for it. Safe to call twice."""
        self.worker.closing.set()
        self.worker.cancel.set()
        if self.thread.isRunning():
            self.thread.quit()
            self.thread.wait()
