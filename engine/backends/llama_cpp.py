"""The llama.cpp backend: GGUF models run natively quantized through llama-cpp-python's low-level API (no
`Llama` class). This module loads a model: a `GgufModel` (the weights, the tokenizer and the facts read from
llama.cpp and the file's header) and `load`, which makes it a LoadedModel whose runners are llama.cpp contexts
(engine.backends.llama_cpp_runner). CPU, or CUDA / Metal / Vulkan when llama-cpp-python was built with them
(every layer offloaded by default: engine.backends.llama_cpp_placement).

The library's start-up, logging and errors are engine.backends.llama_cpp_library's; rollback strategies,
engine.backends.llama_cpp_rollback's. The names other packages import from here (library, accelerators,
placement, N_BATCH, LlamaCppRunner, …) are re-exported below.

Touches the model file (memory-mapped by llama.cpp) and the memory of the contexts it creates. No Qt, no
transformers (the chat template renderer is imported by the tokenizer when first used).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from engine.backends import LoadedModel, backend_named, kv_cache_bytes
from engine.backends.gguf_file import read_header
from engine.backends.llama_cpp_heads import LLAMA_CPP_HEADS
from engine.backends.llama_cpp_library import (BACKEND, EXT_VERSION, HeldWeights, clear_errors, last_error, library,
                                               memory_check_on, mtp_bindings)
from engine.backends.llama_cpp_placement import (REBUILD_HINTS, accelerators, check_gpu_layers, check_threads,
                                                 layers_device, placement, rebuild_command, warn_cpu_build)
from engine.backends.llama_cpp_rollback import RollbackCost, recurrent_state_bytes
from engine.backends.llama_cpp_runner import N_BATCH, LlamaCppRunner, NextnListener
from engine.backends.llama_cpp_tokenizer import LlamaCppTokenizer
from engine.core.errors import ConfigError, ModelLoadError, OutOfMemoryError
from engine.host import free_memory

if TYPE_CHECKING:
    from engine.backends.source import ModelSource

__all__ = ["BACKEND", "EXT_VERSION", "MAX_DEFAULT_CONTEXT", "MIN_CONTEXT", "N_BATCH", "REBUILD_HINTS", "GgufModel",
           "LlamaCppRunner", "NextnListener", "RollbackCost", "accelerators", "layers_device", "library", "load",
           "load_gguf", "mtp_bindings", "placement", "rebuild_command", "warn_cpu_build"]

MAX_DEFAULT_CONTEXT = 8192  # the KV cache is allocated up front: a model trained on 128k gets 8k unless asked
MIN_CONTEXT = 16


class GgufModel(HeldWeights):
    """A GGUF model loaded by llama.cpp (weights memory-mapped or offloaded), its tokenizer and facts.
    Each user (the target, a draft) gets a context and KV cache of its own from new_runner()."""

    def __init__(self, path: Path, *, n_ctx: int | None = None, n_threads: int | None = None,
                 n_gpu_layers: int | None = None, label: str | None = None, main_gpu: int | None = None) -> None:
        self.lib = lib = library()
        self.path = Path(path)
        self.label = label or self.path.stem
        self.header = read_header(self.path)
        self.accelerators = accelerators(lib)
        self.n_gpu_layers = check_gpu_layers(n_gpu_layers, self.accelerators)
        self.main_gpu = main_gpu if self.n_gpu_layers else None  # one GPU of several, by llama.cpp's index
        self.n_threads = check_threads(n_threads)
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
        clear_errors()
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
            self.release_weights()
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
        if self.n_gpu_layers or not memory_check_on():
            return
        size, free = self.header.file_size, free_memory("cpu")
        if free is not None and size > free:
            raise OutOfMemoryError(f"{self.path.name} needs {size / 2**30:.1f} GB of memory for its weights, but "
                                   f"only {free / 2**30:.1f} GB is free; close other programs or pick a smaller "
                                   "quantization")

    def _load_failure(self) -> str:
        reason = last_error("llama.cpp could not load it")
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
                                   f"({last_error('out of memory')})")
        try:
            self.supports_rollback = int(lib.llama_n_rs_seq(probe)) > 0
            self.state_bytes = recurrent_state_bytes(lib, probe)
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
        if memory_check_on() and not self.n_gpu_layers:
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

    def release_weights(self) -> None:
        """Free the weights (and the spare runner). Runners hold a reference to their model, so none is left
        using them."""
        self._spare = None
        super().release_weights()


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
    """A GGUF model (engine.backends.llama_cpp_entry.load, the backend's entry point, sends it here): a .gguf
    source (or the built-in model) as a LoadedModel whose runners are llama.cpp contexts. `device` as the user asked it ("auto", "cpu", "cuda:1"):
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
        heads=LLAMA_CPP_HEADS, supports_rollback=gguf.supports_rollback, rollback_refusal=gguf.rollback_refusal or "",
        device_label=backend_named(BACKEND).device_label(gguf.device_label),
        placement=layers_device(gguf.n_gpu_layers, device))
