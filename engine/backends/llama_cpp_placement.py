"""Where a llama.cpp model runs: the accelerators this llama-cpp-python build can offload layers to, where the
layers go for the device the user asked for (decided by llama.cpp's build, not torch's), the GPU layer and
thread counts checked, and the rebuild command for a CPU build on a GPU machine.

Touches llama.cpp's ggml device list (read through its shared library) and, to warn, torch's CUDA query.
No Qt.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

from engine.backends.llama_cpp_library import EXT_VERSION, library
from engine.core.errors import ConfigError, DeviceError

_DEVICE_TYPE_CPU = 0  # ggml_backend_dev_type: CPU, GPU, IGPU, ACCEL
REBUILD_HINTS = {  # what rebuilds llama-cpp-python for an accelerator (packaging/install.sh does it by itself)
    "cuda": "CMAKE_ARGS='-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=native'",
    "mps": "CMAKE_ARGS=-DGGML_METAL=on",
}
_GPU_WORDS = ("cuda", "mps", "metal", "gpu", "vulkan")
_warned_cpu_build = False


def _ggml(lib):
    from llama_cpp._ctypes_extensions import load_shared_library
    ggml = load_shared_library("ggml", Path(lib.llama_cpp.__file__).parent / "lib")
    ggml.ggml_backend_dev_count.restype = ctypes.c_size_t
    ggml.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
    ggml.ggml_backend_dev_get.restype = ctypes.c_void_p
    ggml.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
    ggml.ggml_backend_dev_description.argtypes = [ctypes.c_void_p]
    ggml.ggml_backend_dev_description.restype = ctypes.c_char_p
    ggml.ggml_backend_dev_backend_reg.argtypes = [ctypes.c_void_p]
    ggml.ggml_backend_dev_backend_reg.restype = ctypes.c_void_p
    ggml.ggml_backend_reg_name.argtypes = [ctypes.c_void_p]
    ggml.ggml_backend_reg_name.restype = ctypes.c_char_p
    return ggml


def accelerators(lib=None) -> list[str]:
    """The devices llama.cpp can offload layers to, as "CUDA (NVIDIA …)", "Metal (Apple M2)"; empty for a
    CPU-only build or a machine without such a device."""
    lib = lib or library()
    if not lib.llama_supports_gpu_offload():
        return []
    ggml = _ggml(lib)
    names = []
    for index in range(ggml.ggml_backend_dev_count()):
        device = ggml.ggml_backend_dev_get(index)
        if ggml.ggml_backend_dev_type(device) == _DEVICE_TYPE_CPU:
            continue
        backend = ggml.ggml_backend_reg_name(ggml.ggml_backend_dev_backend_reg(device)).decode()
        names.append(f"{backend} ({ggml.ggml_backend_dev_description(device).decode().strip()})")
    return names


def rebuild_command(kind: str = "cuda") -> str:
    """The pip command that rebuilds llama-cpp-python for `kind` ("cuda", "mps")."""
    return (f"{REBUILD_HINTS.get(kind, REBUILD_HINTS['cuda'])} pip install --force-reinstall --no-cache-dir "
            f"llama-cpp-python=={EXT_VERSION}")


def placement(device, accelerators: list[str]) -> tuple[int | None, int | None]:
    """Where the layers of a model go for `device` as the user asked it ("auto", "cpu", "cuda", "cuda:1", "mps"):
    (n_gpu_layers or None for llama.cpp's choice, main_gpu or None). llama.cpp decides by its own build, not by
    torch's: "auto" offloads where this build can, "cpu" never, a GPU device only on a build that has one
    (DeviceError naming the rebuild otherwise) and, with an index, only one this build finds."""
    text = str(device or "auto").lower()
    kind, _, index = text.partition(":")
    if kind in ("auto", "cpu"):
        return (None if kind == "auto" else 0), None
    if kind not in _GPU_WORDS:
        raise DeviceError(f"unknown device {text!r}; use auto, cpu, cuda, cuda:N or mps")
    if not accelerators:
        hint = "mps" if kind in ("mps", "metal") else "cuda"
        raise DeviceError(f"--device {text} asks for the GPU, but this llama-cpp-python is a CPU build (it can't "
                          f"offload layers): rebuild it with {rebuild_command(hint)} (packaging/install.sh does "
                          "that when it finds the toolkit), or use --device cpu")
    if not index:
        return -1, None
    if not index.isdigit() or int(index) >= len(accelerators):
        found = "; ".join(f"{i}: {name}" for i, name in enumerate(accelerators))
        raise DeviceError(f"{text} was asked for, but llama.cpp finds {len(accelerators)} GPU"
                          f"{'s' if len(accelerators) != 1 else ''} here ({found})")
    return -1, int(index)


def warn_cpu_build(accelerators: list[str], device, progress) -> None:
    """Once per process: a CPU build of llama.cpp on a machine where torch sees a CUDA GPU runs every layer on the
    CPU; say so with the rebuild command (unless the CPU was asked for)."""
    global _warned_cpu_build
    if accelerators or _warned_cpu_build or str(device or "auto").lower() == "cpu" or progress is None:
        return
    import torch
    if not torch.cuda.is_available():
        return
    _warned_cpu_build = True
    progress(f"warning: this llama-cpp-python is a CPU build, but this machine has a CUDA GPU "
             f"({torch.cuda.get_device_name(0)}): GGUF models run on the CPU. Rebuild it for the GPU: "
             f"{rebuild_command('cuda')}")


def check_gpu_layers(n_gpu_layers: int | None, accelerators: list[str]) -> int:
    """All layers (-1) where llama.cpp can offload, none otherwise, unless asked."""
    if n_gpu_layers is None:
        return -1 if accelerators else 0
    if not isinstance(n_gpu_layers, int) or n_gpu_layers < -1:
        raise ConfigError(f"GPU layers must be -1 (all), 0 (none) or a count, got {n_gpu_layers!r}")
    if n_gpu_layers and not accelerators:
        raise ConfigError("GPU layers were asked for, but this llama-cpp-python has no GPU backend or finds no "
                          "device (build it with CMAKE_ARGS=-DGGML_CUDA=on, or -DGGML_METAL=on)")
    return n_gpu_layers


def check_threads(n_threads: int | None) -> int:
    """The thread count asked for, checked; the engine's default where none is."""
    if n_threads is None:
        from engine.host import engine_threads
        return engine_threads()
    if not isinstance(n_threads, int) or n_threads < 1:
        raise ConfigError(f"threads must be a whole number ≥ 1, got {n_threads!r}")
    return n_threads


def layers_device(n_gpu_layers: int, device) -> str:
    """The device a draft of a model with `n_gpu_layers` offloaded, loaded for `device`, is loaded for: the CPU
    where none is offloaded, else where the target went."""
    if not n_gpu_layers:
        return "cpu"
    text = str(device or "auto").lower()
    return "auto" if text == "cpu" else text
