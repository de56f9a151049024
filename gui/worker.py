"""EngineWorker: the one long-lived thread that holds the models and runs the engine's generator.

The window asks through queued signals (`load_requested`, `generation_requested` on its side, connected to
the slots here; the compare window's `comparison_requested`), so requests run one at a time, in order, on the
worker thread: a comparison's runs never overlap a chat reply or each other. Stop is a
`threading.Event` set directly from the GUI thread: the worker is busy inside the generator, and the engine
checks it between rounds. Every event goes back to the GUI thread by a queued signal, tagged with the id of
the request it belongs to, so the window can drop what a cancelled request still sends.
"""

from __future__ import annotations

import inspect
import os
import sys
import threading
import traceback
from dataclasses import dataclass, field
from typing import Callable

from PySide6.QtCore import QObject, QThread, Signal, Slot

from engine.config import SamplingConfig, SpecConfig
from engine.errors import SpecScopeError
from engine.events import GenerationFinished, GenerationStarted, RoundVerified


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """What the GUI knows of a loaded model (it never touches the model itself)."""

    name: str  # what the model calls itself
    requested: str  # what it was loaded as ("default", a path, a hub id)
    device: str
    dtype: str
    n_layers: int | None
    context_length: int | None

    def describe(self) -> str:
        parts = [self.name, self.device, self.dtype]
        if self.n_layers:
            parts.append(f"{self.n_layers} layers")
        return " · ".join(parts)


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    request_id: int
    model: str
    conversation: list
    spec: SpecConfig = field(default_factory=SpecConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    max_new_tokens: int = 256
    purpose: str = "chat"  # chat | baseline (a hidden plain-decoding run that measures the reference tok/s)


@dataclass(frozen=True, slots=True)
class ComparisonRequest:
    """Plain decoding, then each spec in turn, on one prompt (engine.compare.comparison_events)."""

    request_id: int
    model: str
    prompt: str
    specs: tuple[SpecConfig, ...]
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    max_new_tokens: int = 128
    system: str | None = None


Progress = Callable[[str], None]
# (model name, progress[, device=, dtype=, trust_remote_code=]) -> engine with .target, .generate(). A loader that
# takes no keyword arguments is called with the name and progress only.
EngineLoader = Callable[..., object]
REMOTE_CODE, PICKLE = "remote-code", "pickle"


@dataclass(frozen=True, slots=True)
class LoadOptions:
    """How models are loaded: device, dtype, and the user's per-model answers to the two safety questions
    (run the model's own code? load pickle weights?). Names missing from both sets of a question: not asked."""

    device: str = "auto"
    dtype: str = "auto"
    remote_code_allowed: frozenset[str] = frozenset()
    remote_code_refused: frozenset[str] = frozenset()
    pickle_allowed: frozenset[str] = frozenset()
    pickle_refused: frozenset[str] = frozenset()

    def loader_kwargs(self, name: str) -> dict:
        return {"device": self.device, "dtype": None if self.dtype == "auto" else self.dtype,
                "trust_remote_code": name in self.remote_code_allowed}

    def key(self, name: str) -> tuple:
        """What makes a loaded model the one asked for."""
        return name, self.device, self.dtype, name in self.remote_code_allowed


class ConsentNeeded(SpecScopeError):
    """Loading `model` needs the user's answer to a safety question first (`kind`: remote-code | pickle)."""

    def __init__(self, kind: str, model: str, message: str) -> None:
        super().__init__(message)
        self.kind, self.model = kind, model


def safety_check(name: str, options: LoadOptions) -> None:
    """Before loading a folder or cached hub model: ask (ConsentNeeded) when it names its own Python code and
    the user was never asked about it, or when its weights are pickle checkpoints only; refuse pickle weights
    the user declined. Cheap (reads config files); names it cannot resolve are left to the loader."""
    from engine.catalog import needs_remote_code, weight_files
    from engine.errors import UnsafeCheckpointError
    from engine.models import resolve_source

    try:
        source = resolve_source(name)
    except SpecScopeError:
        return
    if source.gguf_file or not source.path.is_dir():
        return
    label = source.label
    if needs_remote_code(source.path) and name not in options.remote_code_allowed \
            and name not in options.remote_code_refused:
        raise ConsentNeeded(REMOTE_CODE, name,
                            f"{label} comes with its own Python code (trust_remote_code). Running it means "
                            f"running code from {label}'s authors on this computer. Run it for this model?")
    try:
        _present, _missing, weights_format = weight_files(source.path)
    except OSError:
        return
    if weights_format == "pickle":
        if name in options.pickle_refused:
            raise UnsafeCheckpointError(f"{label} has its weights only as pickle checkpoints, and you chose not "
                                        "to load them (they can run code when loaded)")
        if name not in options.pickle_allowed:
            raise ConsentNeeded(PICKLE, name,
                                f"{label} has its weights only as pickle checkpoints (.bin/.pt), which can run "
                                "any code on this computer when loaded. Load them only if you trust its "
                                "authors. Load them?")


def load_real_engine(name: str, progress: Progress | None = None, device: str = "auto", dtype: str | None = None,
                     trust_remote_code: bool = False):
    """Load `name` with engine.models and wrap it in the speculative engine (runs on the worker thread)."""
    limit_torch_threads(import_torch=True)
    _quiet_libraries()
    from engine.models import load_model  # imports torch and transformers: only ever on the worker thread
    from engine.speculative import Engine

    return Engine(load_model(name, device=device, dtype=dtype, progress=progress,
                             trust_remote_code=trust_remote_code))


def _takes_options(loader) -> bool:
    try:
        parameters = inspect.signature(loader).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind is p.VAR_KEYWORD or p.name == "device" for p in parameters)


def _quiet_libraries() -> None:
    """No library progress bars or warnings on the terminal; the window shows the loader's own messages."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def limit_torch_threads(import_torch: bool = False) -> int | None:
    """Leave one core to the interface: at most (cores − 1) torch threads. Call on the worker thread."""
    if "torch" not in sys.modules and not import_torch:
        return None
    import torch

    n = max(1, (os.cpu_count() or 2) - 1)
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n


def model_info(engine, fallback_name: str) -> ModelInfo:
    target = getattr(engine, "target", None)

    def attr(name, default=None):
        return getattr(target, name, default) if target is not None else default

    return ModelInfo(name=str(attr("label", None) or attr("name", fallback_name) or fallback_name), requested=fallback_name, device=str(attr("device", "cpu")),
                     dtype=str(attr("dtype", "")).replace("torch.", ""), n_layers=attr("n_layers"),
                     context_length=attr("context_length"))


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
    consent_needed = Signal(str, str, str)  # model name, kind (remote-code | pickle), the question
    model_loaded = Signal(object)  # ModelInfo
    load_failed = Signal(str, str)  # model name, message
    generation_started = Signal(int, object)  # request id, GenerationStarted
    round_verified = Signal(int, object)  # request id, RoundVerified
    generation_finished = Signal(int, object)  # request id, GenerationFinished
    generation_failed = Signal(int, str)  # request id, message
    comparison_advanced = Signal(int, int, object)  # request id, run index (0: plain), event
    comparison_finished = Signal(int)  # request id (also after Stop: the runs that finished stand)
    comparison_failed = Signal(int, str)  # request id, message

    def __init__(self, loader: EngineLoader | None = None) -> None:
        super().__init__()
        self._loader = loader or load_real_engine
        self._loader_takes_options = _takes_options(self._loader)
        self._engine = None
        self._info: ModelInfo | None = None
        self._requested_name: str | None = None
        self._loaded_key: tuple | None = None
        # set from the GUI thread (one reference assignment of a frozen value), read here before each load
        self.load_options = LoadOptions()
        self.cancel = threading.Event()
        self.closing = threading.Event()

    @property
    def info(self) -> ModelInfo | None:
        return self._info

    # ------------------------------------------------------------------ slots (worker thread)
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
            limit_torch_threads()
            events = self._engine.generate(request.conversation, spec=request.spec, sampling=request.sampling,
                                           max_new_tokens=request.max_new_tokens, cancel=self.cancel)
            for event in events:
                if isinstance(event, RoundVerified):
                    self.round_verified.emit(rid, event)
                elif isinstance(event, GenerationStarted):
                    self.generation_started.emit(rid, event)
                elif isinstance(event, GenerationFinished):
                    self.generation_finished.emit(rid, event)
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
        from engine.compare import comparison_events

        try:
            limit_torch_threads()
            validate = getattr(self._engine, "validate", None)
            for spec in request.specs:
                try:
                    if validate is not None:
                        validate(spec)
                except SpecScopeError as exc:
                    self.comparison_failed.emit(rid, f"{spec.label()}: {error_message(exc)}")
                    return
            for index, event in comparison_events(self._engine, request.prompt, list(request.specs),
                                                  max_new_tokens=request.max_new_tokens, sampling=request.sampling,
                                                  cancel=self.cancel, system=request.system):
                self.comparison_advanced.emit(rid, index, event)
        except Exception as exc:  # noqa: BLE001 — shown as a message, never a crash
            if not isinstance(exc, SpecScopeError):
                traceback.print_exc()
            self.comparison_failed.emit(rid, error_message(exc))
            return
        self.comparison_finished.emit(rid)

    # ------------------------------------------------------------------ helpers
    def _ensure_loaded(self, name: str) -> bool:
        options = self.load_options
        if self._engine is not None and options.key(name) == self._loaded_key:
            return True
        self.model_load_started.emit(name)
        try:
            safety_check(name, options)
            if self._loader_takes_options:
                engine = self._loader(name, self.model_load_progressed.emit, **options.loader_kwargs(name))
            else:
                engine = self._loader(name, self.model_load_progressed.emit)
            limit_torch_threads()
        except ConsentNeeded as exc:
            self.consent_needed.emit(name, exc.kind, str(exc))
            return False
        except Exception as exc:  # noqa: BLE001
            if not isinstance(exc, SpecScopeError):
                traceback.print_exc()
            self.load_failed.emit(name, error_message(exc))
            return False
        self._engine = engine
        self._requested_name = name
        self._loaded_key = options.key(name)
        self._info = model_info(engine, name)
        self.model_loaded.emit(self._info)
        return True


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
