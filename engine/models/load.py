"""Loading a target or a draft, whatever the backend: name → source (engine.models.sources), the backend
(engine.backends.resolve_backend, by the model and the method), device and dtype, the memory check first
where the backend does not check for itself, then the backend's `load` through the registry (its module
imported only then, so the engine works where a backend's library is missing). The result is a
backend-agnostic `LoadedModel` that hands out runners.

Touches the file system through engine.models.sources and engine.models.catalog (metadata for the memory
estimate); the weights only through a backend.
"""

from __future__ import annotations

import os
from typing import Callable

from engine.backends import LoadedModel, Note, backend_named, compile_note, resolve_backend
from engine.backends.device import check_dtype_name, resolve_device, resolve_dtype
from engine.backends.source import ModelSource, converted_folder
from engine.models.consent import PICKLE, ConsentNeeded, is_pickle_only
from engine.models.sources import DEFAULT_MODEL, resolve_source

__all__ = ["LoadedModel", "load_model", "load_tokenizer_only", "check_memory"]

Progress = Callable[[str], None]


def check_memory(source: ModelSource, device, dtype) -> None:
    """Refuse (OutOfMemoryError) a model whose estimated footprint clearly exceeds the free memory on the
    device, before any weights are read. Best effort: a model whose facts cannot be read is let through, and
    SPECSCOPE_SKIP_MEMORY_CHECK=1 turns the check off."""
    if os.environ.get("SPECSCOPE_SKIP_MEMORY_CHECK", "") not in ("", "0"):
        return
    from engine.models import catalog, memory
    try:
        target = source.file
        if source.gguf_file and (converted_folder(target) / "config.json").is_file():
            target = converted_folder(target)  # its metadata is cheaper to read than the GGUF header
        entry = catalog.describe_path(target, label=source.label, with_tokenizer=False)
    except Exception:  # unreadable metadata: the loader itself will say what is wrong
        return
    if entry.n_parameters is None:
        return
    memory.memory_check(entry, str(device), dtype)


def load_model(name: str = DEFAULT_MODEL, device: str | None = "auto", dtype=None, progress: Progress | None = None,
               trust_remote_code: bool = False, *, allow_pickle: bool = False, backend: str = "auto",
               method: str | None = None, compile: bool = False) -> LoadedModel:
    """Load a model and its tokenizer, ready for inference. Raises ModelLoadError and friends.
    `trust_remote_code` runs the model's own Python code and `allow_pickle` loads pickle-only weights: each only
    ever True after the user agreed, for this model (a pickle-only folder without it: ConsentNeeded).
    `backend`: "auto" or one of engine.backends.BACKENDS; "auto" is decided by the model and `method` (the
    method it will run, None: the model alone), and a note on that choice goes to `progress`. `compile`:
    torch.compile'd runners on a static KV cache (transformers backend only; elsewhere a note says so)."""
    progress = progress or (lambda message: None)
    check_dtype_name(dtype)
    source = resolve_source(name)
    if not allow_pickle and is_pickle_only(name):
        raise ConsentNeeded(PICKLE, name, f"{source.label} has its weights only as pickle checkpoints (.bin/.pt), "
                                          "which can run code when loaded, and loading them was not allowed")
    choice = resolve_backend(source, method, backend)
    if choice.note:
        progress(choice.note)
    chosen = backend_named(choice.name)
    if compile and compile_note(chosen.name):
        progress(compile_note(chosen.name))
    if chosen.places_layers:  # llama.cpp: its own build says which devices there are, whatever torch was built for
        if dtype not in (None, "auto"):
            progress(Note(f"--dtype {dtype}: {chosen.name} runs the GGUF's own types as stored; the dtype is not used"))
        return chosen.load(name, source, device=device or "auto", dtype=None, progress=progress,
                           trust_remote_code=trust_remote_code)
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    if not chosen.checks_memory:
        check_memory(source, torch_device, torch_dtype)
    return chosen.load(name, source, device=torch_device, dtype=torch_dtype, progress=progress,
                       trust_remote_code=trust_remote_code, **({"compile": True} if compile else {}))


def load_tokenizer_only(name: str, trust_remote_code: bool = False):
    """The tokenizer of a model, without its weights (for compatibility checks). `trust_remote_code`: as in
    load_model (passed to transformers explicitly, False unless the user agreed)."""
    from engine.backends import transformers
    return transformers.load_tokenizer(resolve_source(name), name, trust_remote_code=trust_remote_code)
