"""The one device and dtype resolver: what "auto", "cuda:1" or "bf16" mean on this machine, for the loaders,
the memory estimates and the model manager alike.

Reads what engine.host says about this machine (GPUs, CPU flags); imports torch lazily (resolving needs it,
importing this module does not). Touches nothing.
"""

from __future__ import annotations

from engine.core.errors import DeviceError, ModelLoadError
from engine.core.sampling import device_ids  # the one copy of ids to a device without a host sync
from engine import host

# dtype names the user may type → torch attribute names
DTYPE_NAMES = {"float32": "float32", "fp32": "float32", "float": "float32", "bfloat16": "bfloat16",
               "bf16": "bfloat16", "float16": "float16", "fp16": "float16", "half": "float16"}


def resolve_device(device: str | None):
    """"auto" → cuda, else mps, else cpu; a named device must exist here (DeviceError otherwise)."""
    import torch
    device = (device or "auto").lower()
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("mps") if host.mps_available() else torch.device("cpu")
    kind = device.split(":")[0]
    if kind == "cuda" and not torch.cuda.is_available():
        raise DeviceError("CUDA was asked for, but this machine has no usable CUDA device (torch "
                          f"{torch.__version__}); use --device cpu")
    if kind == "mps" and not host.mps_available():
        raise DeviceError("MPS was asked for, but it is not available here; use --device cpu")
    if kind not in ("cpu", "cuda", "mps"):
        raise DeviceError(f"unknown device {device!r}; use auto, cpu, cuda, cuda:N or mps")
    try:
        chosen = torch.device(device)
    except RuntimeError:  # "cuda:x", "cpu:0:1"
        raise DeviceError(f"unknown device {device!r}; use auto, cpu, cuda, cuda:N or mps") from None
    if kind == "cuda" and chosen.index is not None and chosen.index >= torch.cuda.device_count():
        count = torch.cuda.device_count()
        names = ", ".join(f"cuda:{i}" for i in range(count))
        raise DeviceError(f"{device} was asked for, but this machine has {count} CUDA device"
                          f"{'s' if count != 1 else ''} ({names})")
    return chosen


def cuda_devices() -> list[str]:
    """"cuda:0", "cuda:1", … for each CUDA device torch sees here (empty without CUDA); what the GUI offers."""
    import torch
    return [f"cuda:{i}" for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


def cuda_name(device: str) -> str:
    """"NVIDIA H200" for a CUDA device string, "" where it is not one here."""
    import torch
    kind, _, index = str(device).partition(":")
    if kind != "cuda" or not torch.cuda.is_available():
        return ""
    try:
        return torch.cuda.get_device_name(int(index) if index.isdigit() else 0)
    except (RuntimeError, AssertionError, ValueError):
        return ""


def free_cached_memory() -> None:
    """Hand the memory torch keeps cached for freed tensors back to the device (CUDA, MPS), after a model or
    its caches were dropped: what another model, or llama.cpp, loads into next. Cheap where there is none."""
    import gc
    import sys
    torch = sys.modules.get("torch")
    if torch is None:
        return
    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
    mps = getattr(torch, "mps", None)
    if host.mps_available() and mps is not None and hasattr(mps, "empty_cache"):
        mps.empty_cache()


def cuda_native_bf16(index: int | None = None) -> bool:
    """Whether CUDA device `index` (None: device 0) computes bf16 natively (compute capability ≥ 8.0: Ampere and
    later). torch's is_bf16_supported() also says yes where bf16 is only emulated (T4, V100, RTX 20xx: much
    slower than fp16) and asks about the current device, not the chosen one."""
    import torch
    if not torch.cuda.is_available():
        return False
    try:
        major, _ = torch.cuda.get_device_capability(index or 0)
    except (RuntimeError, AssertionError, ValueError):  # an index this machine lacks
        return False
    return major >= 8


def default_dtype(device: str):
    """The dtype a model loads in on `device` ("cuda", "cuda:1", "mps", "cpu") when none is asked for: bf16 on
    a CUDA device that computes it natively (fp16 on one that would emulate it, and for a CUDA device this
    machine lacks), fp16 on MPS; on
    the CPU bf16 where it computes bf16 natively (AVX512-BF16 or AMX: engine.host reads the flags), float32
    elsewhere. Outputs that differ from plain decoding by bf16 rounding are told apart from errors by
    engine.measure.divergence; exact equality is checked in float32 (`--dtype float32`, --strict)."""
    import torch
    device_type, _, index = str(device).partition(":")
    if device_type == "cuda":
        return torch.bfloat16 if cuda_native_bf16(int(index) if index.isdigit() else None) else torch.float16
    if device_type == "mps":
        return torch.float16
    return torch.bfloat16 if host.native_bf16() else torch.float32


def check_dtype_name(dtype) -> None:
    """ModelLoadError for a dtype name that is none of float32, bf16, fp16 (or auto/None): asked of every
    load, also where the backend runs the weights as stored (llama.cpp) and the dtype is not used."""
    if dtype is None or dtype == "auto" or not isinstance(dtype, str):
        return
    if DTYPE_NAMES.get(dtype.lower().removeprefix("torch.")) is None:
        raise ModelLoadError(f"unknown dtype {dtype!r}; use float32, bf16 or fp16")


def resolve_dtype(dtype, device):
    """A dtype name ("bf16", "float32", "auto"/None) or torch.dtype → torch.dtype for `device` (a torch
    device or a device string, which need not exist here: estimates ask about other devices too)."""
    import torch
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype is None or dtype == "auto":
        return default_dtype(str(device))
    check_dtype_name(str(dtype))
    return getattr(torch, DTYPE_NAMES[str(dtype).lower().removeprefix("torch.")])


def dtype_label(dtype) -> str:
    """"float32", "bfloat16", … for a torch dtype; a string (a GGUF quantisation such as Q4_1) as is."""
    return str(dtype).removeprefix("torch.")


__all__ = ["DTYPE_NAMES", "resolve_device", "cuda_devices", "cuda_name", "free_cached_memory", "cuda_native_bf16", "default_dtype", "check_dtype_name", "resolve_dtype", "dtype_label", "device_ids"]
