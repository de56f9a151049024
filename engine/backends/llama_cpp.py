"""The llama.cpp backend: GGUF models run natively quantized through llama-cpp-python's low-level API (no
`Llama` class): `llama_decode` over a batch with a logits flag per position, logits read in place (only the
rows asked for), the KV cache rolled back with `llama_memory_seq_rm`. CPU, or CUDA / Metal / Vulkan when
llama-cpp-python was built with them (every layer offloaded by default).

Touches llama.cpp's global state (backend initialised once, its logger replaced by one that keeps errors
for our messages), the model file (memory-mapped by llama.cpp) and the memory of the contexts it creates.
No Qt, no transformers (the chat template renderer is imported by the tokenizer when first used).
"""

from __future__ import annotations

import collections
import ctypes
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
import torch

from engine.backends import LoadedModel, backend_named, common_prefix_length, kv_cache_bytes
from engine.backends.gguf_file import read_header
from engine.backends.llama_cpp_tokenizer import LlamaCppTokenizer
from engine.core.errors import ConfigError, ModelLoadError, OutOfMemoryError, PromptTooLongError, SpecScopeError
from engine.host import free_memory

if TYPE_CHECKING:
    from engine.backends.source import ModelSource

BACKEND = "llama.cpp"
N_BATCH = 512  # tokens per llama_decode call; more than the longest verification (MAX_K + 1)
MAX_DEFAULT_CONTEXT = 8192  # the KV cache is allocated up front: a model trained on 128k gets 8k unless asked
MIN_CONTEXT = 16
_LOG_ERROR, _LOG_CONT = 4, 5  # ggml_log_level
_DEVICE_TYPE_CPU = 0  # ggml_backend_dev_type: CPU, GPU, IGPU, ACCEL
_STATE_PARTIAL = 1  # LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY: a sequence's recurrent state without its KV cache
EXT_VERSION = "0.3.36"  # the llama-cpp-python whose llama_cpp_ext binds the MTP calls

_state_lock = threading.Lock()
_library = None
_log_callback = None  # llama.cpp calls it from C: it must stay referenced, or the process crashes
_errors: collections.deque[str] = collections.deque(maxlen=32)
_bindings = None  # llama_cpp.llama_cpp_ext once checked (mtp_bindings)


def library():
    """The llama_cpp module, with the backend initialised once and its logging quieted (errors are kept for
    our messages, the rest dropped)."""
    global _library, _log_callback
    with _state_lock:
        if _library is None:
            try:
                import llama_cpp
            except ImportError:
                hint = backend_named(BACKEND).install_hint
                raise ModelLoadError(f"the llama.cpp backend needs llama-cpp-python ({hint}); or use "
                                     "--backend transformers") from None
            last_level = [0]

            @llama_cpp.llama_log_callback
            def on_log(level, text, user_data):
                level = last_level[0] if level == _LOG_CONT else level
                last_level[0] = level
                if level == _LOG_ERROR and text:
                    _errors.append(text.decode("utf-8", errors="replace"))

            _log_callback = on_log
            llama_cpp.llama_log_set(on_log, ctypes.c_void_p(0))
            llama_cpp.llama_backend_init()
            _library = llama_cpp
    return _library


def mtp_bindings():
    """llama-cpp-python's bindings of llama.cpp's MTP calls (llama_cpp.llama_cpp_ext, bound by C++ symbol name,
    not a stable API); ConfigError naming the version needed where they are missing."""
    global _bindings
    if _bindings is not None:
        return _bindings
    lib = library()
    try:
        from llama_cpp import llama_cpp_ext
        for name in ("llama_set_embeddings_nextn", "llama_get_embeddings_nextn", "llama_get_embeddings_nextn_ith",
                     "llama_set_nextn_layer_offset", "llama_get_ctx_other"):
            getattr(llama_cpp_ext, name)
        for name in ("llama_model_n_layer_nextn", "LLAMA_CONTEXT_TYPE_MTP"):
            getattr(lib, name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"MTP drafting on llama.cpp needs llama-cpp-python {EXT_VERSION} (its llama_cpp_ext "
                          f"bindings: {str(exc)[:80]}); this is {getattr(lib, '__version__', '?')}: "
                          f"pip install llama-cpp-python=={EXT_VERSION}") from None
    _bindings = llama_cpp_ext
    return _bindings


def _llama_error(default: str) -> str:
    """What llama.cpp last logged as an error, in its own words (one line), or `default`."""
    text = " ".join(line.strip() for line in _errors if line.strip())
    marker = "error loading model: "
    if marker in text:  # "llama_model_load: error loading model: <reason> llama_model_load_from_file…"
        text = text.rsplit(marker, 1)[1].split(" llama_model_load", 1)[0]
    text = text.strip().rstrip(".")
    return text[:240] if text else default


# ------------------------------------------------------------------ devices

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


# ------------------------------------------------------------------ model

class GgufModel:
    """A GGUF model loaded by llama.cpp (weights memory-mapped or offloaded), its tokenizer and facts.
    Each user (the target, a draft) gets a context and KV cache of its own from new_runner()."""

    def __init__(self, path: Path, *, n_ctx: int | None = None, n_threads: int | None = None,
                 n_gpu_layers: int | None = None, label: str | None = None, main_gpu: int | None = None) -> None:
        self.lib = lib = library()
        self.path = Path(path)
        self.label = label or self.path.stem
        self.header = read_header(self.path)
        self.accelerators = accelerators(lib)
        self.n_gpu_layers = _check_gpu_layers(n_gpu_layers, self.accelerators)
        self.main_gpu = main_gpu if self.n_gpu_layers else None  # one GPU of several, by llama.cpp's index
        self.n_threads = _check_threads(n_threads)
        self._check_weights_fit()
        self.declared_nextn = self.header.nextn_layers
        if self.header.mtp_only:
            raise ModelLoadError(f"{self.path.name} is an MTP head alone (llama.cpp's converter writes these as "
                                 "mtp-*.gguf beside a model), not a model: load its target and use method mtp "
                                 f"(it is found beside the target, or give it with --draft {self.path.name})")
        self._check_nextn_tensors()
        params = lib.llama_model_default_params()
        params.n_gpu_layers = self.n_gpu_layers
        if self.main_gpu is not None:  # that GPU alone, not split over all of them
            params.main_gpu, params.split_mode = self.main_gpu, lib.LLAMA_SPLIT_MODE_NONE
        # MTP (nextn) layers are loaded where the file has them, so that method mtp runs without a reload;
        # they are one decoder block each (about 1/n_layers of the weights)
        params.load_mtp = self.declared_nextn > 0
        _errors.clear()
        self.handle = lib.llama_model_load_from_file(str(self.path).encode(), params)
        if not self.handle:
            raise ModelLoadError(self._load_failure())
        try:
            self._read_facts()
            self.context_length = self._check_context(n_ctx)
            self.tokenizer = LlamaCppTokenizer(lib, self.handle, self.header.metadata, owner=self)
            self._read_rollback_facts()
            self._spare: LlamaCppRunner | None = LlamaCppRunner(self)  # proves the context fits memory
        except BaseException:
            self._free()
            raise

    def _check_nextn_tensors(self) -> None:
        """A file that declares nextn layers must carry their tensors (blk.N.nextn.*), unless it is a target
        whose head was split into a sidecar file, which then declares none."""
        if not self.declared_nextn:
            return
        have = {int(name.split(".")[1]) for name in self.header.tensor_names
                if name.startswith("blk.") and ".nextn." in name}
        n_blocks = int(self.header.get("block_count", 0) or 0)
        wanted = set(range(n_blocks - self.declared_nextn, n_blocks))
        if not wanted <= have:
            raise ModelLoadError(
                f"{self.path.name} declares {self.declared_nextn} MTP (nextn) layer"
                f"{'s' if self.declared_nextn > 1 else ''} but lacks their tensors (blk.N.nextn.*): a "
                "conversion cut short or edited; convert it again, or use the file without MTP")

    def _check_weights_fit(self) -> None:
        """Before loading: on the CPU the weights (the file, memory-mapped) must fit in the free memory."""
        if self.n_gpu_layers or not _memory_check_on():
            return
        size, free = self.header.file_size, free_memory("cpu")
        if free is not None and size > free:
            raise OutOfMemoryError(f"{self.path.name} needs {size / 2**30:.1f} GB of memory for its weights, but "
                                   f"only {free / 2**30:.1f} GB is free; close other programs or pick a smaller "
                                   "quantization")

    def _load_failure(self) -> str:
        reason = _llama_error("llama.cpp could not load it")
        arch = self.header.architecture
        if "unknown model architecture" in reason:
            return (f"{self.path.name} is a {arch!r} model, an architecture this llama.cpp "
                    f"(llama-cpp-python {self.lib.__version__}) does not know; update llama-cpp-python or "
                    "use --backend transformers")
        if "out of memory" in reason or "failed to allocate" in reason:
            return f"not enough memory to load {self.path.name} ({reason})"
        return f"{self.path.name} could not be loaded by llama.cpp ({reason})"

    def _read_facts(self) -> None:
        lib, handle = self.lib, self.handle
        if not lib.llama_model_has_decoder(handle) or lib.llama_model_has_encoder(handle) or \
                lib.llama_model_is_diffusion(handle):
            raise ModelLoadError(f"{self.path.name} is not a decoder-only language model; SpecScope generates "
                                 "with causal language models only")
        self.n_layers = int(lib.llama_model_n_layer(handle))
        self.n_ctx_train = int(lib.llama_model_n_ctx_train(handle))
        self.vocab_size = int(lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(handle)))
        self.n_parameters = int(lib.llama_model_n_params(handle))
        self.size_bytes = int(lib.llama_model_size(handle))
        self.dtype_label = lib.llama_ftype_name(lib.llama_model_ftype(handle)).decode().removeprefix("all ")
        n_nextn = getattr(lib, "llama_model_n_layer_nextn", None)  # older llama-cpp-python: no MTP at all
        self.n_nextn = int(n_nextn(handle)) if self.declared_nextn and n_nextn else 0
        self.n_embd = int(lib.llama_model_n_embd(handle))
        # A recurrent state (Mamba, RWKV, hybrids such as Qwen 3.5) keeps no per-position history of its own;
        # llama.cpp keeps per-token snapshots of it (n_rs_seq) for the architectures it knows how to roll back.
        self.recurrent = bool(lib.llama_model_is_recurrent(handle) or lib.llama_model_is_hybrid(handle))
        self.state_bytes = 0  # one sequence's recurrent state (a snapshot's size), measured once
        self.supports_rollback = not self.recurrent
        self.rollback_refusal: str | None = None
        self.device_label = self.accelerators[self.main_gpu or 0] if self.n_gpu_layers and self.accelerators else "CPU"

    def _read_rollback_facts(self) -> None:
        """A recurrent model speculates where llama.cpp keeps per-token snapshots of its state (a small
        context asking for one keeps it): a rejected draft is then cut off like a KV cache's tail."""
        if not self.recurrent:
            return
        lib = self.lib
        params = lib.llama_context_default_params()
        params.n_ctx = params.n_batch = params.n_ubatch = MIN_CONTEXT
        params.n_seq_max, params.n_rs_seq, params.no_perf = 1, 1, True
        probe = lib.llama_init_from_model(self.handle, params)
        if not probe:
            raise OutOfMemoryError(f"llama.cpp could not make a context for {self.label} "
                                   f"({_llama_error('out of memory')})")
        try:
            self.supports_rollback = int(lib.llama_n_rs_seq(probe)) > 0
            self.state_bytes = _state_bytes_after_one_token(lib, probe)
        finally:
            lib.llama_free(probe)
        if not self.supports_rollback:
            arch = self.header.architecture
            self.rollback_refusal = (
                f"{self.label} ({arch}) keeps a recurrent state, and this llama.cpp keeps no per-token "
                f"snapshots of it for {arch!r} (it does for Qwen 3.5/3.6, Nemotron-H, LFM2 and a few more), so a "
                "rejected draft can't be rolled back; only plain decoding runs on it")

    def kv_cache_bytes(self, n_ctx: int) -> int:
        """What a context of n_ctx tokens allocates for its KV cache (keys and values in llama.cpp's default type)."""
        lib, handle = self.lib, self.handle
        n_head = max(1, int(lib.llama_model_n_head(handle)))
        head_dim = int(lib.llama_model_n_embd(handle)) // n_head
        k_dim = int(self.header.get("attention.key_length", head_dim))
        v_dim = int(self.header.get("attention.value_length", head_dim))
        n_kv = int(lib.llama_model_n_head_kv(handle))
        return kv_cache_bytes(n_ctx, self.n_layers, n_kv, k_dim, v_dim, backend_named(BACKEND).kv_bytes_per_value)

    def _check_context(self, n_ctx: int | None) -> int:
        limit = self.n_ctx_train or MAX_DEFAULT_CONTEXT
        if n_ctx is None:
            n_ctx = min(limit, MAX_DEFAULT_CONTEXT)
        if not MIN_CONTEXT <= n_ctx <= limit:
            raise ConfigError(f"the context must be from {MIN_CONTEXT} to {limit} tokens for {self.label} (its "
                              f"trained length), got {n_ctx}")
        if _memory_check_on() and not self.n_gpu_layers:
            needed, free = self.kv_cache_bytes(n_ctx), free_memory("cpu")
            if free is not None and needed > free:
                raise OutOfMemoryError(
                    f"a context of {n_ctx:,} tokens for {self.label} needs {needed / 2**30:.1f} GB for its KV "
                    f"cache, but only {free / 2**30:.1f} GB of memory is free; use a shorter context")
        return n_ctx

    def new_runner(self) -> "LlamaCppRunner":
        """A runner with a context (KV cache) of its own; the first one was made while loading."""
        spare, self._spare = self._spare, None
        return spare if spare is not None else LlamaCppRunner(self)

    def _free(self) -> None:
        """Free the weights. Runners hold a reference to their model, so none is left using them."""
        self._spare = None
        handle, self.handle = getattr(self, "handle", None), None
        if handle:
            self.lib.llama_model_free(handle)

    def __del__(self) -> None:
        try:
            self._free()
        except Exception:  # interpreter shutdown: the library may be gone already
            pass


def _state_bytes_after_one_token(lib, ctx) -> int:
    """The size of one sequence's recurrent state in `ctx`, once a token has made it exist."""
    batch = lib.llama_batch_get_one((lib.llama_token * 1)(0), 1)
    if lib.llama_decode(ctx, batch) != 0:
        return 0
    size = int(lib.llama_state_seq_get_size_ext(ctx, 0, _STATE_PARTIAL))
    lib.llama_memory_clear(lib.llama_get_memory(ctx), False)
    return size


def _memory_check_on() -> bool:
    """SPECSCOPE_SKIP_MEMORY_CHECK=1 turns the memory checks off, as for the transformers backend."""
    return os.environ.get("SPECSCOPE_SKIP_MEMORY_CHECK", "") in ("", "0")


def _check_threads(n_threads: int | None) -> int:
    if n_threads is None:
        from engine.host import engine_threads
        return engine_threads()
    if not isinstance(n_threads, int) or n_threads < 1:
        raise ConfigError(f"threads must be a whole number ≥ 1, got {n_threads!r}")
    return n_threads


REBUILD_HINTS = {  # what rebuilds llama-cpp-python for an accelerator (packaging/install.sh does it by itself)
    "cuda": "CMAKE_ARGS='-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=native'",
    "mps": "CMAKE_ARGS=-DGGML_METAL=on",
}
_GPU_WORDS = ("cuda", "mps", "metal", "gpu", "vulkan")
_warned_cpu_build = False


def rebuild_command(kind: str = "cuda") -> str:
    """The pip command that rebuilds llama-cpp-python for `kind` ("cuda", "mps")."""
    return (f"{REBUILD_HINTS.get(kind, REBUILD_HINTS['cuda'])} pip install --force-reinstall --no-cache-dir "
            f"llama-cpp-python=={EXT_VERSION}")


def placement(device, accelerators: list[str]) -> tuple[int | None, int | None]:
    """Where the layers of a model go for `device` as the user asked it ("auto", "cpu", "cuda", "cuda:1", "mps"):
    (n_gpu_layers or None for llama.cpp's choice, main_gpu or None). llama.cpp decides by its own build, not by
    torch's: "auto" offloads where this build can, "cpu" never, a GPU device only on a build that has one
    (DeviceError naming the rebuild otherwise) and, with an index, only one this build finds."""
    from engine.core.errors import DeviceError
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
    if not torch.cuda.is_available():
        return
    _warned_cpu_build = True
    progress(f"warning: this llama-cpp-python is a CPU build, but this machine has a CUDA GPU "
             f"({torch.cuda.get_device_name(0)}): GGUF models run on the CPU. Rebuild it for the GPU: "
             f"{rebuild_command('cuda')}")


def _check_gpu_layers(n_gpu_layers: int | None, accelerators: list[str]) -> int:
    """All layers (-1) where llama.cpp can offload, none otherwise, unless asked."""
    if n_gpu_layers is None:
        return -1 if accelerators else 0
    if not isinstance(n_gpu_layers, int) or n_gpu_layers < -1:
        raise ConfigError(f"GPU layers must be -1 (all), 0 (none) or a count, got {n_gpu_layers!r}")
    if n_gpu_layers and not accelerators:
        raise ConfigError("GPU layers were asked for, but this llama-cpp-python has no GPU backend or finds no "
                          "device (build it with CMAKE_ARGS=-DGGML_CUDA=on, or -DGGML_METAL=on)")
    return n_gpu_layers


# ------------------------------------------------------------------ runner

class NextnListener(Protocol):
    """Who reads the target's hidden states as MTP heads need them (engine.backends.llama_cpp_mtp)."""

    def on_rows(self, start: int, ids: np.ndarray, rows: np.ndarray) -> None:
        """A pass fed `ids` at positions start…; `rows` (len(ids), n_embd) are their last hidden states
        (llama.cpp's nextn embeddings), valid only during the call: copy what must be kept."""

    def on_close(self) -> None:
        """The runner's context is about to be freed (a context linked to it must go first)."""


@dataclass(slots=True)
class RollbackCost:
    """What rolling back a recurrent state costs on one runner (the Speculation panel shows it)."""

    kind: str  # how it is done
    snapshot_bytes: int  # one copy of the recurrent state
    snapshots: int  # kept per token by llama.cpp (n_rs_seq), 0 where a checkpoint is restored instead
    restores: int = 0  # rollbacks that restored a checkpoint and recomputed the kept tokens
    restore_seconds: float = 0.0
    refills: int = 0  # rollbacks past every checkpoint: the context recomputed from its start

    @property
    def mean_restore_ms(self) -> float | None:
        return 1000 * self.restore_seconds / self.restores if self.restores else None

    def as_dict(self) -> dict:
        return {"kind": self.kind, "snapshot_bytes": self.snapshot_bytes, "snapshots": self.snapshots,
                "mean_restore_ms": self.mean_restore_ms, "restores": self.restores, "refills": self.refills}


class LlamaCppRunner:
    """One llama.cpp context on a GgufModel: its KV cache and the ids in it (engine.backends' Runner).

    forward() returns a view of llama.cpp's logits buffer, valid until the next call on this runner: use
    it at once, or clone what must be kept.

    A recurrent or hybrid model (Qwen 3.5, Nemotron-H, …) is rolled back two ways. The verifying target asks
    for per-token snapshots of its state (`reserve_rollback(k + 1)`, llama.cpp's n_rs_seq): cutting a rejected
    draft off the last pass is then as cheap as for a KV cache. Anything else (a draft model that fed its
    guesses one by one) restores the recurrent state saved at the last sync() (a checkpoint) and recomputes
    the kept tokens after it; a rollback past the checkpoint recomputes from the start."""

    def __init__(self, model: GgufModel, *, rollback_depth: int | None = None) -> None:
        self.model = model
        self.context_length = model.context_length
        self.device = torch.device("cpu")  # where the logits are, whatever device runs the layers
        self.ids: list[int] = []
        self._ctx = None
        # per-token snapshots asked for (reserve_rollback); none: a checkpoint at each sync instead
        self._wanted_depth = (rollback_depth or 0) if model.recurrent else 0
        self.rollback_depth = 0  # the snapshots llama.cpp keeps for this context
        self._listener: NextnListener | None = None
        self._last_pass = 0  # tokens in the last llama_decode: snapshots cover only those
        self._snapshot_pending = False  # a snapshot rollback is consumed by the next decode
        self._checkpoint: tuple[int, ctypes.Array, int] | None = None  # (length, state bytes, size)
        self.cost: RollbackCost | None = None
        self._open()

    def _open(self) -> None:
        lib, model = self.model.lib, self.model
        params = lib.llama_context_default_params()
        params.n_ctx = self.context_length
        params.n_batch = params.n_ubatch = min(N_BATCH, self.context_length)
        params.n_seq_max = 1
        params.n_threads = params.n_threads_batch = model.n_threads
        params.no_perf = True
        params.n_rs_seq = self._wanted_depth
        _errors.clear()
        ctx = lib.llama_init_from_model(model.handle, params)
        if not ctx:
            raise OutOfMemoryError(f"llama.cpp could not make a context of {self.context_length:,} tokens for "
                                   f"{model.label} ({_llama_error('out of memory')}); use a shorter context")
        self._ctx, self._memory = ctx, lib.llama_get_memory(ctx)
        self.rollback_depth = int(lib.llama_n_rs_seq(ctx)) if model.recurrent else 0
        self._n_batch = int(params.n_batch)
        self._batch = lib.llama_batch_init(self._n_batch, 0, 1)
        batch = self._batch
        self._tokens = np.ctypeslib.as_array(batch.token, shape=(self._n_batch,))
        self._positions = np.ctypeslib.as_array(batch.pos, shape=(self._n_batch,))
        self._flags = np.ctypeslib.as_array(batch.logits, shape=(self._n_batch,))
        self._steps = np.arange(self._n_batch, dtype=np.int32)  # a batch's positions after its first
        self._logits_address, self._logits_views = None, {}
        np.ctypeslib.as_array(batch.n_seq_id, shape=(self._n_batch,))[:] = 1
        for i in range(self._n_batch):
            batch.seq_id[i][0] = 0  # one sequence
        self.ids = []
        self._last_pass, self._snapshot_pending, self._checkpoint = 0, False, None
        if self._listener is not None:
            mtp_bindings().llama_set_embeddings_nextn(ctx, True, False)  # every fed position's row, not just logits'
        if model.recurrent:
            self._describe_cost(self.rollback_depth)

    def _describe_cost(self, depth: int) -> None:
        """How this runner rolls back (kept across contexts: its counts are the runner's)."""
        kind = (f"per-token snapshots of the recurrent state (llama.cpp n_rs_seq = {depth})" if depth else
                "a checkpoint of the recurrent state, then the kept tokens recomputed")
        if self.cost is None:
            self.cost = RollbackCost(kind, self.model.state_bytes, depth)
        else:
            self.cost.kind, self.cost.snapshots = kind, depth

    @property
    def context(self):
        """The llama_context (opened if it was released): an MTP context links to it."""
        if self._ctx is None:
            self._open()
        return self._ctx

    def record_nextn(self, listener: NextnListener | None) -> None:
        """Hand every pass's last hidden states to `listener` (None: stop). Empties the cache, so that every
        cached position's state was seen."""
        if listener is self._listener:
            return
        self.release()
        self._listener = listener

    def reserve_rollback(self, depth: int) -> None:
        """Be able to cut `depth` − 1 tokens off the last pass of `depth` (a verification of k = depth − 1
        drafts). A recurrent model's context is made again with that many snapshots if it has fewer (its
        cache is then refilled by the next sync); nothing to do for a KV cache."""
        if not self.model.recurrent or not self.model.supports_rollback or depth <= self._wanted_depth:
            return
        self.release()
        self._wanted_depth = depth
        self._describe_cost(depth)  # what the next context (made on the next forward) keeps

    def rollback_cost(self) -> dict | None:
        """What a rollback costs here (RollbackCost as a dict); None for a KV cache (nothing to say)."""
        return None if self.cost is None else self.cost.as_dict()

    def forward(self, new_ids: list[int], n_logits: int) -> torch.Tensor:
        """Feed new_ids after the cached ones; float32 logits (n_logits, vocab) of the last n_logits
        positions, read in place from llama.cpp (only those rows are computed)."""
        n = len(new_ids)
        if not 1 <= n_logits <= min(n, self._n_batch if self._ctx else N_BATCH):
            raise ValueError(f"n_logits must be from 1 to {min(n, N_BATCH)}, got {n_logits} for {n} ids")
        if len(self.ids) + n > self.context_length:
            raise PromptTooLongError(f"{len(self.ids) + n} tokens do not fit in the {self.context_length:,}-token "
                                     f"context of {self.model.label}; shorten the conversation")
        if min(new_ids) < 0 or max(new_ids) >= self.model.vocab_size:
            raise ValueError(f"token ids must be from 0 to {self.model.vocab_size - 1}")
        if self._ctx is None:
            self._open()
        self._feed(np.asarray(new_ids, dtype=np.int32), n_logits)
        self.ids.extend(map(int, new_ids))
        return self._logits(n_logits)

    def _logits(self, n_rows: int) -> torch.Tensor:
        """llama.cpp's logits buffer as an (n_rows, vocab) tensor. The view is made once per buffer and row count
        (llama.cpp moves the buffer only when it grows it), not on every pass."""
        pointer = self.model.lib.llama_get_logits(self._ctx)
        address = ctypes.addressof(pointer.contents)
        if address != self._logits_address:
            self._logits_address, self._logits_views = address, {}
        view = self._logits_views.get(n_rows)
        if view is None:
            with torch.inference_mode(False):  # a plain tensor, whichever mode the first caller was in
                view = torch.from_numpy(np.ctypeslib.as_array(pointer, shape=(n_rows, self.model.vocab_size)))
            self._logits_views[n_rows] = view
        return view

    def _feed(self, ids: np.ndarray, n_logits: int) -> None:
        """Decode `ids` after the cached positions (self.ids is not changed here)."""
        start, n = len(self.ids), len(ids)
        # The rows asked for come from a batch of just those positions, the ids before them are fed in
        # chunks of n_batch without logits: llama.cpp's kernels round differently for large batches, so this
        # keeps a position's logits independent of how much was fed with it (a prompt fed whole or synced
        # back to its last id gives the same next token).
        head = n - n_logits
        try:
            for begin in range(0, head, self._n_batch):
                self._decode(ids[begin:min(begin + self._n_batch, head)], start + begin, 0)
            if n_logits:
                self._decode(ids[head:], start + head, n_logits)
        except BaseException:
            self._forget_from(start)
            raise

    def _decode(self, ids: np.ndarray, position: int, n_outputs: int) -> None:
        m = len(ids)
        if m == 1:  # a decoding step: item writes cost less than slices
            self._tokens[0], self._positions[0], self._flags[0] = ids[0], position, n_outputs
        else:
            self._tokens[:m] = ids
            np.add(self._steps[:m], position, out=self._positions[:m])
            self._flags[:m] = 0
            self._flags[m - n_outputs:m] = 1 if n_outputs else 0
        self._batch.n_tokens = m
        _errors.clear()
        status = self.model.lib.llama_decode(self._ctx, self._batch)
        if status == 1:
            raise OutOfMemoryError(f"llama.cpp found no room in the KV cache of {self.model.label} "
                                   f"({self.context_length:,} tokens); start a new chat")
        if status != 0:
            raise SpecScopeError(f"llama.cpp failed to decode a batch (status {status}: "
                                 f"{_llama_error('no reason given')})")
        self._last_pass, self._snapshot_pending = m, False
        if self._listener is not None:
            rows = mtp_bindings().llama_get_embeddings_nextn(self._ctx)
            if not rows:
                raise SpecScopeError(f"llama.cpp gave no hidden states for {self.model.label}'s MTP head")
            self._listener.on_rows(position, ids, np.ctypeslib.as_array(rows, shape=(m, self.model.n_embd)))

    def _forget_from(self, length: int) -> None:
        """After a failed pass: drop whatever part of it reached the cache."""
        if self._ctx is None:
            return
        if self.model.recurrent or not self.model.lib.llama_memory_seq_rm(self._memory, 0, length, -1):
            self.reset()

    def rollback(self, length: int) -> None:
        """Keep the first `length` cached positions."""
        if length >= len(self.ids):
            return
        if length < 0:
            raise ValueError(f"cannot roll back to a negative length ({length})")
        if self._ctx is None:
            del self.ids[length:]
            return
        if not self.model.recurrent:
            if not self.model.lib.llama_memory_seq_rm(self._memory, 0, length, -1):
                raise SpecScopeError(f"llama.cpp could not roll back the KV cache of {self.model.label}")
            del self.ids[length:]
            return
        self._rollback_recurrent(length)

    def _rollback_recurrent(self, length: int) -> None:
        lib, drop = self.model.lib, len(self.ids) - length
        # a snapshot llama.cpp kept during the last pass (one rollback per pass; not to before the pass)
        if (not self._snapshot_pending and drop <= min(self.rollback_depth, self._last_pass - 1)
                and lib.llama_memory_seq_rm(self._memory, 0, length, -1)):
            self._snapshot_pending = True
            del self.ids[length:]
            return
        started = time.perf_counter()
        kept = self.ids[:length]
        if self._checkpoint is not None and self._checkpoint[0] <= length and self._restore_checkpoint():
            base = self._checkpoint[0]
            self.cost.restores += 1
        else:
            lib.llama_memory_clear(self._memory, False)
            base = 0
            self.cost.refills += 1
        self.ids = kept[:base]
        self._last_pass, self._snapshot_pending = 0, False
        if length > base:
            self._feed(np.asarray(kept[base:], dtype=np.int32), 0)
            self.ids = kept
        self.cost.restore_seconds += time.perf_counter() - started

    def checkpoint(self) -> None:
        """Save the recurrent state as it stands, for the next rollback that reaches back before the last pass
        (sync() does it for a runner without snapshots: after a sync the cache holds committed positions only)."""
        lib = self.model.lib
        if not self.model.recurrent or self._ctx is None or self._snapshot_pending:
            return
        size = int(lib.llama_state_seq_get_size_ext(self._ctx, 0, _STATE_PARTIAL))
        buffer = self._checkpoint[1] if self._checkpoint and len(self._checkpoint[1]) >= size else \
            (ctypes.c_uint8 * size)()
        written = int(lib.llama_state_seq_get_data_ext(self._ctx, buffer, size, 0, _STATE_PARTIAL))
        self._checkpoint = (len(self.ids), buffer, written) if written else None

    def _restore_checkpoint(self) -> bool:
        """The recurrent state back as the checkpoint saved it, the attention cache cut to its length."""
        lib = self.model.lib
        length, buffer, size = self._checkpoint
        if not lib.llama_state_seq_set_data_ext(self._ctx, buffer, size, 0, _STATE_PARTIAL):
            self._checkpoint = None
            return False
        return bool(lib.llama_memory_seq_rm(self._memory, 0, length, -1))

    def sync(self, context_ids: list[int]) -> list[int]:
        """Roll back to the common prefix with context_ids (always leaving the last id out); return the ids
        still to feed. A recurrent state without snapshots is checkpointed here for the next rollback."""
        keep = min(common_prefix_length(self.ids, context_ids), len(context_ids) - 1)
        self.rollback(keep)
        if self.model.recurrent and not self.rollback_depth and self._ctx is not None and self.ids and \
                not self._snapshot_pending:
            self.checkpoint()  # what this runner's next rollback restores (a draft model's)
        return context_ids[len(self.ids):]

    def reset(self) -> None:
        """Empty the cache (its memory stays allocated for the next generation)."""
        if self._ctx is not None:
            self.model.lib.llama_memory_clear(self._memory, False)
        self.ids = []
        self._last_pass, self._snapshot_pending, self._checkpoint = 0, False, None

    def release(self) -> None:
        """Free the context and its KV cache; the next forward() makes a new one."""
        ctx, self._ctx = self._ctx, None
        self.ids = []
        self._checkpoint = None
        self._logits_address, self._logits_views = None, {}
        if ctx:
            if self._listener is not None:
                self._listener.on_close()
            self.model.lib.llama_batch_free(self._batch)
            self.model.lib.llama_free(ctx)

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:  # interpreter shutdown
            pass


def load_gguf(path: str | Path, *, n_ctx: int | None = None, n_threads: int | None = None,
              n_gpu_layers: int | None = None, label: str | None = None, main_gpu: int | None = None) -> GgufModel:
    """Load a GGUF file on llama.cpp. Raises ModelLoadError (not a whole GGUF, unknown architecture, not a
    language model), ConfigError (a setting out of range) or OutOfMemoryError (the context doesn't fit),
    with nothing left loaded."""
    return GgufModel(Path(path), n_ctx=n_ctx, n_threads=n_threads, n_gpu_layers=n_gpu_layers, label=label,
                     main_gpu=main_gpu)


def load(name: str, source: "ModelSource", *, device="auto", dtype=None, progress=None,
         trust_remote_code: bool = False, n_ctx: int | None = None, n_threads: int | None = None,
         n_gpu_layers: int | None = None) -> LoadedModel:
    """A GGUF model (engine.backends.llama_cpp_entry.load, the backend's entry point, sends it here): a .gguf source (or the built-in model) as a
    LoadedModel whose runners are llama.cpp contexts. `device` as the user asked it ("auto", "cpu", "cuda:1"):
    where the layers go is this llama.cpp build's to say (`placement`), not torch's. `dtype` does not apply
    (the weights stay quantized as stored). `trust_remote_code` does not apply either: a GGUF carries no code."""
    started = time.perf_counter()
    if not source.gguf_file:
        raise ModelLoadError(f"{name} is not a .gguf file; the llama.cpp backend runs GGUF models only (use "
                             "--backend transformers for Hugging Face folders and hub ids)")
    found = accelerators(library())
    layers, main_gpu = placement(device, found)
    n_gpu_layers = layers if n_gpu_layers is None else n_gpu_layers
    warn_cpu_build(found, device, progress)
    if progress is not None:
        progress(f"Loading {source.label} on llama.cpp…")
    gguf = load_gguf(source.file, n_ctx=n_ctx, n_threads=n_threads, n_gpu_layers=n_gpu_layers,
                     label=source.label, main_gpu=main_gpu)
    return LoadedModel(
        name=name, label=source.label, source=source, backend=BACKEND, tokenizer=gguf.tokenizer,
        device=torch.device("cpu"), dtype=None, dtype_label=gguf.dtype_label,
        load_seconds=time.perf_counter() - started, converted_now=False, n_layers=gguf.n_layers,
        context_length=gguf.context_length, vocab_size=gguf.vocab_size, n_parameters=gguf.n_parameters,
        eos_ids=gguf.tokenizer.eog_ids, runner_factory=gguf.new_runner, model=None, native=gguf,
        supports_rollback=gguf.supports_rollback, rollback_refusal=gguf.rollback_refusal or "",
        device_label=backend_named(BACKEND).device_label(gguf.device_label),
        placement=layers_device(gguf.n_gpu_layers, device))


def layers_device(n_gpu_layers: int, device) -> str:
    """The device a draft of a model with `n_gpu_layers` offloaded, loaded for `device`, is loaded for: the CPU
    where none is offloaded, else where the target went."""
    if not n_gpu_layers:
        return "cpu"
    text = str(device or "auto").lower()
    return "auto" if text == "cpu" else text
