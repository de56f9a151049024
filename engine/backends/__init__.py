"""Inference backends, one file each, each giving a `Runner`: one loaded model's KV cache and the ids in it,
and the BACKEND REGISTRY: which backends there are, what each needs and runs, and the one place "auto" is
decided (`resolve_backend`, by the model and the method).

The round loop and the drafters see only the Runner Protocol, so a method written once runs on every backend
that serves it (which ones do is the method's MethodSpec's to say, engine.core.methods). A backend module
provides `load(name, source, *, device, dtype, progress, trust_remote_code) -> LoadedModel`; the registry
imports it only when a model loads, so the engine works where a backend's library isn't installed.

    transformers.py   torch + transformers: HF folders, hub ids, GGUF dequantized; early exit
                      (transformers_static.py: compiled runners on a static KV cache, --compile;
                      transformers_heads.py: MTP layers and Gemma 4 assistants on it)
    llama_cpp.py      llama-cpp-python: GGUF natively quantized (llama_cpp_library, _placement, _runner,
                      _rollback, _tokenizer; llama_cpp_heads: its MTP heads and assistants)

This module re-exports the Runner Protocol (engine.core.runner: its optional abilities declared there with
defaults) and holds `LoadedModel` (what every backend's `load` returns, with the head drafting its backend
offers: engine.backends.heads), the prefix arithmetic every runner's `sync` shares, and the registry, whose
names are engine.core.config's BACKENDS (the one list); it imports nothing heavy (torch only for type names)
and asks whether a backend's library is installed without importing it.

Adding a backend: its name in engine.core.config.BACKENDS, its entry in REGISTRY here, and its module(s).
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from engine.core.config import BACKENDS
from engine.backends.heads import HeadDrafting  # what LoadedModel.heads declares
from engine.core.errors import ConfigError, ModelLoadError
from engine.core.runner import Runner  # the contract lives in the core, which the loop reads

if TYPE_CHECKING:
    import torch

    from engine.backends.source import ModelSource

__all__ = ["Runner", "LoadedModel", "HeadDrafting", "TRANSFORMERS", "LLAMA_CPP", "common_prefix_length",
           "sync_by_prefix", "kv_cache_bytes", "Backend",
           "BackendChoice", "BACKENDS", "REGISTRY", "backend_named", "is_local_backend", "resolve_backend", "Note",
           "compile_note"]


class Note(str):
    """A loader's line the user must read even where progress is not shown (a piped terminal, --json): an option
    asked for that this backend leaves unused (--compile, --dtype). Everywhere else it is a line like any other
    (engine.runtime.terminal_progress prints it always)."""


@dataclass(eq=False)
class LoadedModel:
    """A loaded target or draft, whatever its backend: its facts, its tokenizer, and runners on demand.
    Only transformers-only methods (early exit) may
    touch `model`, the torch module, which is None on other backends."""

    name: str  # what the user asked for ("default", a path, a hub id)
    label: str  # what the user reads
    source: "ModelSource"
    backend: str  # a name in BACKENDS
    tokenizer: object  # the subset of the HF tokenizer API named in engine/core/compat.py and chat.py
    device: "torch.device"
    dtype: "torch.dtype | None"  # the compute dtype on transformers; None where weights stay quantized
    dtype_label: str  # "float32", "bfloat16", "Q4_1", …
    load_seconds: float
    converted_now: bool  # a GGUF was converted during this load (slow, once)
    n_layers: int
    context_length: int
    vocab_size: int  # rows of the logits
    n_parameters: int
    eos_ids: frozenset[int]
    runner_factory: Callable[[], Runner] = field(repr=False)
    model: object = field(default=None, repr=False)
    native: object = field(default=None, repr=False)  # the backend's own model object (llama.cpp: its GgufModel)
    # what its backend offers the methods that draft from the target's own states (MTP layers, an assistant)
    heads: HeadDrafting = field(default_factory=HeadDrafting, repr=False)
    supports_rollback: bool = True  # False for a recurrent state that can't be cut back: plain decoding only
    rollback_refusal: str = ""  # why not, in the words the user reads, where supports_rollback is False
    device_label: str = ""  # what runs the layers (Backend.device_label), where `device` (the logits') may not say it
    placement: str = ""  # the device a draft of it loads for, to run where its layers do ("": str(device))

    def new_runner(self) -> Runner:
        """A fresh runner (an empty KV cache) on this model's weights."""
        return self.runner_factory()


def common_prefix_length(a: list[int], b: list[int]) -> int:
    """How many leading ids `a` and `b` share (a bisection on slices: fast for long equal prefixes)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] holds, a[:hi] == b[:hi] does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def kv_cache_bytes(n_tokens: int, n_layers: int, n_kv_heads: int, key_dim: int, value_dim: int,
                   bytes_per_value: int) -> int:
    """What a KV cache of `n_tokens` positions takes: keys and values of every layer and KV head."""
    return n_tokens * n_layers * n_kv_heads * (key_dim + value_dim) * bytes_per_value


def sync_by_prefix(runner: Runner, context_ids: list[int]) -> list[int]:
    """`Runner.sync` from `ids` and `rollback`: keep the common prefix but never the last id of the context
    (its logits are what the next forward pass must produce), return what is still to feed."""
    keep = min(common_prefix_length(runner.ids, context_ids), len(context_ids) - 1)
    runner.rollback(keep)
    return context_ids[len(runner.ids):]


# ------------------------------------------------------------------ the registry

@dataclass(frozen=True, slots=True)
class Backend:
    """One inference backend: the library it needs, which model files it runs and how, its KV cache's size,
    and its module (imported only when a model loads on it)."""

    name: str  # as --backend, SPEC's backend= and LoadedModel.backend say it
    module: str  # the module whose load() loads a model on it
    library: str  # the Python package it needs, by import name
    install_hint: str  # how to get that package
    runs_folders: bool  # Hugging Face folders and hub snapshots
    gguf: str  # "native": a GGUF runs as stored (quantized); "converted": dequantized once first; "": not run
    kv_bytes_per_value: int | None  # its KV cache's element size (kv_cache_bytes); None: the compute dtype's
    checks_memory: bool  # its load refuses a model that doesn't fit by itself (else the loader estimates first)
    device_words: str = "{where}"  # what the user reads for where its layers run
    places_layers: bool = False  # its load takes the device as asked and decides by its own build (not torch's)
    compiles: bool = False  # --compile serves it (torch.compile'd runners on a static cache: transformers_static)

    def available(self) -> bool:
        """Whether its library is installed here (asked without importing it)."""
        return importlib.util.find_spec(self.library) is not None

    def serves(self, source: "ModelSource") -> bool:
        """Whether it can run the model at `source` at all (a GGUF perhaps only by converting it)."""
        return bool(self.gguf) if source.gguf_file else self.runs_folders

    def runs_as_stored(self, source: "ModelSource") -> bool:
        """Whether it runs `source`'s files as they are (no conversion, GGUF weights kept quantized)."""
        return self.gguf == "native" if source.gguf_file else self.runs_folders

    def device_label(self, where: str) -> str:
        """What the user reads for where a model on this backend runs (`where`: "cpu", "cuda:0", "CPU",
        "CUDA (NVIDIA …)")."""
        return self.device_words.format(where=where)

    def load(self, name: str, source: "ModelSource", **options) -> LoadedModel:
        """Load `source` on this backend (its module's load: device, dtype, progress, trust_remote_code)."""
        return importlib.import_module(self.module).load(name, source, **options)


TRANSFORMERS, LLAMA_CPP = BACKENDS  # the names come from engine.core.config's one list, in its order
REGISTRY: tuple[Backend, ...] = (  # in BACKENDS' order; the first is where anything runs when nothing else can
    Backend(TRANSFORMERS, "engine.backends.transformers_entry", "transformers", "pip install transformers",
            runs_folders=True, gguf="converted", kv_bytes_per_value=None, checks_memory=False, compiles=True),
    Backend(LLAMA_CPP, "engine.backends.llama_cpp_entry", "llama_cpp", "pip install llama-cpp-python==0.3.36",
            runs_folders=False, gguf="native", kv_bytes_per_value=2, checks_memory=True,  # F16 keys and values
            device_words="llama.cpp · {where}", places_layers=True),
)


def backend_named(name: str) -> Backend:
    """The registry's entry for `name`; ModelLoadError naming the choices for an unknown one."""
    for backend in REGISTRY:
        if backend.name == name:
            return backend
    raise ModelLoadError(f"unknown backend {name!r}; use auto or {', '.join(BACKENDS)}")


def compile_note(backend: str) -> Note | None:
    """What --compile does on `backend` (a registry name, or a server's): None where it compiles the runners,
    else the one line saying the option is unused there (said, never refused, so "auto" may pick any backend)."""
    if any(b.name == backend and b.compiles for b in REGISTRY):
        return None
    where = " or ".join(b.name for b in REGISTRY if b.compiles)
    return Note(f"--compile is unused on {backend}: it compiles runners on {where} only; the model runs as it is")


def is_local_backend(name: str | None) -> bool:
    """Whether a loaded model's backend runs it here (a Runner: ours to measure and draft on), not on a server."""
    return name in BACKENDS


@dataclass(frozen=True, slots=True)
class BackendChoice:
    """The backend a model runs on, and why when it is not the one the model alone would get."""

    name: str
    note: str = ""  # e.g. a method only transformers serves takes a GGUF there, converted


def _for_the_model(source: "ModelSource") -> Backend:
    """"auto" by the model alone: an installed backend that runs its files as stored, else one that can run
    them at all (a GGUF converted), else the first."""
    serving = [b for b in REGISTRY if b.serves(source) and b.available()]
    as_stored = [b for b in serving if b.runs_as_stored(source)]
    return (as_stored or serving or [REGISTRY[0]])[0]


def resolve_backend(source: "ModelSource", method_name: str | None = None,
                    requested: str | None = "auto") -> BackendChoice:
    """The backend `source` runs on for method `method_name`: `requested` unless it is "auto" (or None).
    "auto" takes the model's own backend where the method runs there; a method served only elsewhere (early
    exit: transformers) moves the model to a backend that serves the method and can run it, with a note
    saying so. ConfigError when no backend serves both, or `requested` can't serve the method (the method's
    own reason); ModelLoadError for an unknown name. `method_name` None: the model alone decides. Reads the
    method registry (engine.core.methods), populated once engine.drafters is imported."""
    spec = None
    if method_name is not None:
        from engine.core.methods import method_spec
        spec = method_spec(method_name)
    why = f" ({spec.why_not})" if spec is not None and spec.why_not else ""
    if requested not in (None, "auto"):
        backend = backend_named(requested)
        if spec is not None and backend.name not in spec.backends:
            raise ConfigError(f"method {spec.name} needs the {' or '.join(spec.backends)} backend, not "
                              f"{backend.name}{why}")
        return BackendChoice(backend.name)
    by_model = _for_the_model(source)
    if spec is None or by_model.name in spec.backends:
        return BackendChoice(by_model.name)
    served = " or ".join(spec.backends)
    for backend in (b for b in REGISTRY if b.name in spec.backends and b.serves(source) and b.available()):
        how = "" if backend.runs_as_stored(source) else " (its GGUF converted once)"
        return BackendChoice(backend.name, f"method {spec.name} runs on {served} only{why}, so {source.label} "
                                           f"runs on {backend.name}{how}, not {by_model.name}")
    raise ConfigError(f"method {spec.name} needs the {served} backend, which can't run {source.label}{why}")
