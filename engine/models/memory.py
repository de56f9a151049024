"""What a model needs in memory, and whether that fits: a `MemoryEstimate` of a catalog entry on a device in a
dtype (weights, KV cache for a context, a runtime allowance), on the backend it would load on, against what
is free there now (engine.host.free_memory), and the refusal (OutOfMemoryError) for one that clearly does not.

Reads the device's free memory only; the facts come from engine.models.catalog's entries, the device and dtype
from engine.backends.device, a backend's KV cache and GGUF handling from engine.backends' registry.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.backends import backend_named, kv_cache_bytes
from engine.backends.device import dtype_label, resolve_device, resolve_dtype
from engine.core.errors import OutOfMemoryError
from engine.host import free_memory
from engine.models.catalog import CatalogEntry, entry_backend, entry_source, format_bytes

__all__ = ["MemoryEstimate", "estimate_memory", "estimate_memory_on", "memory_check", "DTYPE_BYTES",
           "DEFAULT_CONTEXT_TOKENS"]

DEFAULT_CONTEXT_TOKENS = 4096  # the KV-cache estimate's context unless the caller says otherwise
RUNTIME_OVERHEAD_BYTES = 256 * 2**20  # activations, logits, allocator slack: rough, on top of weights + KV
RUNTIME_OVERHEAD_FRACTION = 0.05
# A process's first use of a CUDA device creates its context (≈ 0.3–0.5 GB of device memory, more with lazy
# module loading off); counted where no context exists yet, since the free figure read before it can't show it
CUDA_CONTEXT_BYTES = 448 * 2**20

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int8": 1, "uint8": 1,
               "float8_e4m3fn": 1, "float8_e5m2": 1, "int32": 4, "int64": 8, "int16": 2, "bool": 1}

@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    device: str  # cpu, cuda, cuda:1, mps
    dtype: str  # float32, bfloat16, float16
    context_tokens: int
    weights_bytes: int
    kv_cache_bytes: int
    overhead_bytes: int
    free_bytes: int | None  # None when the device's free memory is unknown

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_cache_bytes + self.overhead_bytes

    @property
    def fits(self) -> bool | None:
        return None if self.free_bytes is None else self.total_bytes <= self.free_bytes

    def as_dict(self) -> dict:
        """JSON-ready (for `specscope models list --json`)."""
        return {"device": self.device, "dtype": self.dtype, "context_tokens": self.context_tokens,
                "weights_bytes": self.weights_bytes, "kv_cache_bytes": self.kv_cache_bytes,
                "overhead_bytes": self.overhead_bytes, "total_bytes": self.total_bytes,
                "free_bytes": self.free_bytes, "fits": self.fits}


def _device_and_dtype(device, dtype) -> tuple[str, str]:
    """Normalise a device and dtype for estimates (engine.backends.device's resolver, as loading uses), without
    requiring that the device exists here."""
    device = str(device or "auto").lower()
    if device == "auto":
        device = str(resolve_device("auto"))
    return device, dtype_label(resolve_dtype(dtype, device))


def _context(entry: CatalogEntry, context_tokens: int | None) -> int:
    """The estimate's context: as asked, else DEFAULT_CONTEXT_TOKENS, at most the model's own."""
    if context_tokens is not None:
        return context_tokens
    return min(DEFAULT_CONTEXT_TOKENS, entry.context_length or DEFAULT_CONTEXT_TOKENS)


def _kv_bytes(entry: CatalogEntry, n_tokens: int, bytes_per_value: int) -> int:
    """The KV cache for `n_tokens` (0 where the entry's shapes are unknown)."""
    if not (entry.n_layers and entry.n_kv_heads and entry.head_dim):
        return 0
    return kv_cache_bytes(n_tokens, entry.n_layers, entry.n_kv_heads, entry.head_dim, entry.head_dim,
                          bytes_per_value)


def cuda_context_pending(device: str) -> bool:
    """Whether loading on `device` would create this process's CUDA context first (none exists yet)."""
    if not str(device).startswith("cuda"):
        return False
    import torch
    return torch.cuda.is_available() and not torch.cuda.is_initialized()


def _estimate(device: str, dtype: str, n_tokens: int, weights: int, kv: int) -> MemoryEstimate:
    overhead = RUNTIME_OVERHEAD_BYTES + int(RUNTIME_OVERHEAD_FRACTION * weights)
    if cuda_context_pending(device):  # asked before free_memory, whose query makes the context
        overhead += CUDA_CONTEXT_BYTES
    free = free_memory(device) if device.split(":")[0] in ("cpu", "cuda", "mps") else None
    return MemoryEstimate(device=device, dtype=dtype, context_tokens=n_tokens, weights_bytes=weights,
                          kv_cache_bytes=kv, overhead_bytes=overhead, free_bytes=free)


def _llama_cpp_device(device) -> str:
    """Where llama.cpp puts a GGUF's layers for `device` as asked: its own build decides (a CPU build keeps
    them in RAM, whatever torch sees): "cpu", "cuda", "cuda:1", "mps", or the GPU's kind where its free memory
    is not known here ("vulkan")."""
    text = str(device or "auto").lower()
    if text == "cpu":
        return "cpu"
    try:
        from engine.backends import llama_cpp
        found = llama_cpp.accelerators(llama_cpp.library())
        layers, main_gpu = llama_cpp.placement(text, found)
    except Exception:  # llama.cpp missing, or a device it refuses: the loader will say so
        return "cpu"
    if not found or layers == 0:
        return "cpu"
    kind = found[0 if main_gpu is None else main_gpu].split(" ")[0].lower()
    if kind == "cuda":
        return "cuda" if main_gpu is None else f"cuda:{main_gpu}"
    return "mps" if kind == "metal" else kind


def estimate_memory(entry: CatalogEntry, device: str = "auto", dtype=None,
                    context_tokens: int | None = None) -> MemoryEstimate:
    """Memory to hold `entry` on `device` in `dtype`: weights + KV cache for `context_tokens` (default
    DEFAULT_CONTEXT_TOKENS, at most the model's context) + a rough runtime allowance. GGUF weights count at
    `dtype`, as a backend that dequantizes them holds them."""
    device, dtype_name = _device_and_dtype(device, dtype)
    bytes_per = DTYPE_BYTES[dtype_name]
    if entry.n_parameters is not None:
        weights = entry.n_parameters * bytes_per
    else:  # unknown count: what is on disk, scaled from the stored dtype where known
        stored = DTYPE_BYTES.get(entry.dtype or "", None)
        weights = int(entry.size_bytes * bytes_per / stored) if stored else entry.size_bytes
    n_tokens = _context(entry, context_tokens)
    return _estimate(device, dtype_name, n_tokens, weights, _kv_bytes(entry, n_tokens, bytes_per))


def estimate_memory_on(entry: CatalogEntry, backend: str, device: str = "auto", dtype=None,
                       context_tokens: int | None = None) -> MemoryEstimate:
    """The estimate for `entry` on `backend` ("auto": the one it would load on, engine.backends.resolve_backend):
    a backend that runs a GGUF as stored holds its file (weights) and a KV cache of its own element size; any
    other, estimate_memory's, dequantized to `dtype`."""
    chosen = backend_named(entry_backend(entry, backend))
    if entry.weights_format != "gguf" or not chosen.runs_as_stored(entry_source(entry)):
        return estimate_memory(entry, device, dtype, context_tokens)
    if chosen.places_layers:
        device = _llama_cpp_device(device)
    device, dtype_name = _device_and_dtype(device, dtype)
    n_tokens = _context(entry, context_tokens)
    kv = _kv_bytes(entry, n_tokens, chosen.kv_bytes_per_value or DTYPE_BYTES[dtype_name])
    return _estimate(device, entry.dtype or "GGUF", n_tokens, entry.size_bytes, kv)


def memory_check(entry: CatalogEntry, device: str = "auto", dtype=None,
                 context_tokens: int | None = None) -> MemoryEstimate:
    """The estimate, or OutOfMemoryError when it clearly exceeds the free memory on `device`."""
    estimate = estimate_memory(entry, device, dtype, context_tokens)
    if estimate.fits is False:
        where = "RAM" if estimate.device == "cpu" else f"{estimate.device} memory"
        raise OutOfMemoryError(
            f"{entry.label} needs about {format_bytes(estimate.total_bytes)} of {where} in {estimate.dtype} "
            f"(weights {format_bytes(estimate.weights_bytes)}, KV cache for {estimate.context_tokens:,} tokens "
            f"{format_bytes(estimate.kv_cache_bytes)}), but only {format_bytes(estimate.free_bytes)} is free; "
            "pick a smaller model, a smaller dtype or another device")
    return estimate


