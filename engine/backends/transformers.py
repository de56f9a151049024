"""The transformers backend: torch + transformers models (HF folders, hub ids in the local cache, GGUF files
dequantized once into safetensors) and their Runner, the one place that knows the transformers cache API.

A `TransformersRunner` pairs a causal LM with its DynamicCache and the token ids that cache holds, so any new
context is synced by its common prefix: a rejected draft, a new chat turn or a regenerated reply only
recomputes what changed. A hybrid model's linear-attention states (Qwen 3.5, Qwen3-Next) can't be cropped:
they are snapshotted before each pass and restored instead (engine.backends.hybrid_cache). Early exit (a view
of the target's first layers) runs on this backend only.

Touches torch, transformers and the file system (a GGUF's converted-model folder, engine.backends.source);
imported only when a model loads on it (engine.backends.Backend.load), never at engine import time.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import os
import shutil
import struct
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch
from transformers import DynamicCache

from engine.backends import TRANSFORMERS, LoadedModel, Runner, backend_named, sync_by_prefix
from engine.backends.device import device_ids, dtype_label
from engine.backends.hybrid_cache import HybridRollback, linear_layers, restore
from engine.backends.source import ModelSource, check_gguf, converted_folder, weight_files
from engine.backends.transformers_heads import TRANSFORMERS_HEADS
from engine.backends.transformers_tree import TreeVerification
from engine.core.chat import eos_ids
from engine.core.errors import ModelLoadError, OutOfMemoryError

BACKEND = TRANSFORMERS
Progress = Callable[[str], None]
# what from_pretrained raises on a file it can't read (struct.error, EOFError: a truncated GGUF)
_READ_ERRORS = (ValueError, KeyError, IndexError, OSError, RuntimeError, TypeError, AssertionError,
                struct.error, EOFError, OverflowError, AttributeError, ImportError)


# ---------------------------------------------------------------- the runner

def cache_length(cache) -> int:
    return 0 if cache is None else int(cache.get_seq_length())


def crop_cache(cache, length: int) -> None:
    """Drop cached positions beyond `length`. transformers ≥ 5 wants the count to remove, negated."""
    n_remove = cache_length(cache) - length
    if n_remove < 0:
        raise ValueError(f"cannot grow a cache by cropping ({cache_length(cache)} → {length})")
    if cache is not None:
        cache.crop(-n_remove)  # crop(0) is no-op, except that it trims a recorded sliding window / conv state


def can_crop(cache, n_remove: int) -> bool:
    """Whether cropping `n_remove` positions keeps the cache right: a sliding-window layer past its window
    holds only the window plus what was fed since its last crop, so a deeper rollback must recompute."""
    for layer in getattr(cache, "layers", ()):
        window = getattr(layer, "sliding_window", None) if getattr(layer, "is_sliding", False) else None
        seq = layer.get_seq_length() if window else 0
        if n_remove and window and seq >= window:
            # after the crop the layer must still hold min(window − 1, what remains) positions
            if not layer.is_initialized or layer.keys.shape[-2] < min(window - 1, seq - n_remove) + n_remove:
                return False
    return True


class HiddenRows:
    """The last layer's hidden state of cached positions `start`…`end`−1, kept in step with the cache (appended by
    forward, cut by rollback) for drafters that draft from the target's own states. Capacity doubles, so
    appending a round's rows costs O(rows) amortized, not a copy of the whole context."""

    def __init__(self) -> None:
        self.buffer: torch.Tensor | None = None
        self.start = 0
        self.end = 0

    def append(self, rows: torch.Tensor, end: int) -> None:
        """`rows` (n, hidden) are the states of positions end−n…end−1 (fewer than were fed leaves a gap)."""
        n = rows.shape[0]
        if self.buffer is None or end - n != self.end:  # a gap: keep only these
            self.buffer, self.start = None, end - n
        used = self.end - self.start if self.buffer is not None else 0
        if self.buffer is None or used + n > self.buffer.shape[0]:
            grown = rows.new_empty((max(2 * (used + n), 64), rows.shape[1]))
            if self.buffer is not None:
                grown[:used] = self.buffer[:used]
            self.buffer = grown
        self.buffer[used:used + n] = rows
        self.end = end

    def truncate(self, length: int) -> None:
        self.end = min(self.end, length)
        if self.end <= self.start:
            self.buffer, self.start, self.end = None, length, length

    def rows(self, start: int) -> torch.Tensor | None:
        """The states of positions start…end−1, or None where some of them were never kept."""
        if self.buffer is None or start < self.start:
            return None
        return self.buffer[start - self.start:self.end - self.start]


class TransformersRunner(TreeVerification, Runner):
    """A causal LM, its KV cache and the ids in it (engine.backends.Runner), trees verified in one pass
    (engine.backends.transformers_tree). One generation at a time.

    On request (`record_outputs`) it also keeps what MTP heads and Gemma 4 assistants draft from: the last
    layer's hidden state of every cached position (`hidden`) and the last pass's shared key/value states.

    A drafter can feed it a token it chose without reading it on the host (`forward_unread`): the pass queues
    behind the one that chose it, and `read_unread` tells `ids` the values once the drafter has read them all.

    A cache with linear-attention layers (a hybrid model) is rolled back by `HybridRollback`: their states are
    cloned before each pass; a rollback into a pass restores the clone from before it, crops the attention
    layers to match and feeds the kept tokens of that pass again (`rollback_cost()` says what that costs)."""

    def __init__(self, model, config=None) -> None:
        self.model = model
        self.config = config if config is not None else model.config
        self.device = next(model.parameters()).device
        self.cache = None
        self.ids: list[int] = []
        params = inspect.signature(model.forward).parameters
        self._takes_logits_to_keep = "logits_to_keep" in params
        self._cache_kwarg = "cache" if "cache" in params else "past_key_values"
        self.hidden: HiddenRows | None = None  # kept only once a drafter asked (record_outputs)
        self._keep_shared_kv = False
        self._shared_kv: tuple[dict, int] | None = None  # the last pass's shared K/V and the length after it
        self._hybrid: HybridRollback | None = None  # set by the first cache that has linear-attention layers
        self._unread = 0  # positions fed by forward_unread that `ids` does not hold yet (read_unread names them)

    def record_outputs(self, *, shared_kv: bool = False) -> None:
        """From now on keep the last layer's hidden states (and, with `shared_kv`, the last pass's shared
        key/value states, Gemma 4). Empties the cache, so that every cached position has its state."""
        if self.hidden is None or shared_kv != self._keep_shared_kv:
            self.reset()
            self.hidden = HiddenRows()
            self._keep_shared_kv = shared_kv

    def hidden_rows(self, start: int) -> torch.Tensor | None:
        """The kept hidden states (n, hidden) of cached positions start…len(ids)−1 (HiddenRows.rows)."""
        return self.hidden.rows(start) if self.hidden is not None else None

    def shared_kv_states(self, length: int) -> dict | None:
        """The shared key/value states of the last pass, cut to the first `length` positions (a rejected draft's
        tail dropped); each type's states end at the same position, whatever window they cover."""
        if self._shared_kv is None or length > self._shared_kv[1]:
            return None
        states, end = self._shared_kv
        drop = end - length
        return {kind: (k[..., :k.shape[-2] - drop, :], v[..., :v.shape[-2] - drop, :])
                for kind, (k, v) in states.items()}

    def reset(self) -> None:
        self.cache = None
        self.ids = []
        self._unread = 0
        self._shared_kv = None
        if self.hidden is not None:
            self.hidden = HiddenRows()
        if self._hybrid is not None:
            self._hybrid.clear()

    def release(self) -> None:
        self.reset()

    def rollback(self, length: int) -> None:
        """Keep the first `length` cached positions."""
        self._check_read()
        if length > len(self.ids):
            return
        if self._hybrid is not None:
            with torch.no_grad():  # not inference mode: a state restored outside it stays writable by any pass
                self._rollback_hybrid(length)
            return
        if not can_crop(self.cache, len(self.ids) - length):
            self.reset()  # a sliding window no longer holds what the rollback needs: recompute from scratch
            return
        try:
            crop_cache(self.cache, length)
        except (RuntimeError, ValueError):
            # A layer that can't be cropped (a sliding window past its size): recompute from scratch.
            self.reset()
            return
        del self.ids[length:]
        if self.hidden is not None:
            self.hidden.truncate(length)

    def sync(self, context_ids: list[int]) -> list[int]:
        """Roll the cache back to its common prefix with `context_ids` (always leaving the last id out)
        and return the ids still to be fed."""
        return sync_by_prefix(self, context_ids)

    def _rollback_hybrid(self, length: int) -> None:
        """Rollback with linear-attention layers: back to the latest snapshot at or before `length` (the
        attention layers cropped to it), then the kept ids after it fed again; past every snapshot (or a
        sliding window's reach), the kept ids recomputed from an empty cache. Either way `ids` ends at `length`."""
        hybrid = self._hybrid
        snapshot = hybrid.restore_point(length)
        if self.cache is None or length == len(self.ids):
            if self.cache is not None:
                self.cache.crop(0)  # trims the recorded past (conv inputs, a sliding window), as crop_cache does
            return
        started = hybrid.start(self.device)
        refill = snapshot is None or not can_crop(self.cache, len(self.ids) - snapshot.length)
        if refill:
            kept = self.ids[:length]
            self.reset()
            self._new_cache()
        else:
            kept = self.ids[snapshot.length:length]
            restore(self.cache, snapshot, len(self.ids))
            del self.ids[snapshot.length:]
            if self.hidden is not None:
                self.hidden.truncate(length)  # the kept positions' rows are already right
        if kept:
            out = self._pass(device_ids(kept, self.device), 1, outputs=refill and self.hidden is not None)
            self.ids.extend(kept)
            if refill and self.hidden is not None:
                self._keep_outputs(out, len(self.ids))
        if kept or not refill:  # back to an empty cache is no refill
            hybrid.count(started, refill)

    def rollback_cost(self) -> dict | None:
        """What a rollback costs here: {kind, snapshot_bytes, mean_restore_ms, restores, snapshots, refills} for a
        hybrid model's cache (engine.backends.hybrid_cache.HybridRollback.cost); None for a plain KV cache."""
        return self._hybrid.cost() if self._hybrid is not None else None

    def forward(self, new_ids: list[int], n_logits: int) -> torch.Tensor:
        """Feed `new_ids` after the cached ones; return float32 logits of the last `n_logits` positions."""
        self._check_read()
        logits = self._feed(device_ids(new_ids, self.device), n_logits)
        self.ids.extend(new_ids)
        return logits

    def forward_unread(self, new_ids: torch.Tensor, n_logits: int) -> torch.Tensor:
        """forward() for ids (n,) still on the device that the host has not read (a drafter's last choice), so
        that nothing waits for them. `ids` lacks them until `read_unread` names them: call it before anything
        else but forward_unread."""
        logits = self._feed(new_ids.view(1, -1), n_logits)
        self._unread += new_ids.numel()
        return logits

    def read_unread(self, values: list[int]) -> None:
        """The values of the ids forward_unread fed since the last read, in order: `ids` holds them from now on."""
        if len(values) != self._unread:
            raise ValueError(f"{self._unread} unread ids were fed, {len(values)} named")
        self.ids.extend(values)
        self._unread = 0

    def _check_read(self) -> None:
        if self._unread:
            raise RuntimeError(f"{self._unread} ids fed by forward_unread were never named (read_unread)")

    def _feed(self, input_ids: torch.Tensor, n_logits: int) -> torch.Tensor:
        """One pass over `input_ids` (1, n) after the `len(ids)` + unread cached positions; float32 logits."""
        if self.cache is None:
            self._new_cache()
        length = len(self.ids) + self._unread
        if self._hybrid is not None:
            self._hybrid.before_pass(self.cache, length)
        out = self._pass(input_ids, n_logits, outputs=self.hidden is not None)
        if self.hidden is not None:
            self._keep_outputs(out, length + input_ids.shape[1])
        return out.logits[0, -n_logits:].float()

    def _new_cache(self) -> None:
        self.cache = DynamicCache(config=self.config)
        # sliding-window and linear-attention layers keep their past until the next crop, so that a rejected
        # draft can be rolled back instead of recomputing the whole context
        self.cache.activate_past_recording()
        if self._hybrid is None and (layers := linear_layers(self.cache)):
            self._hybrid = HybridRollback(layers)

    def _pass(self, input_ids: torch.Tensor, n_logits: int, *, outputs: bool, **inputs):
        """One pass of the model over `input_ids` (1, n) into the cache (`outputs`: with what record_outputs
        keeps; `inputs`: more of the model's inputs, a tree's attention mask and positions)."""
        kwargs = {self._cache_kwarg: self.cache, "use_cache": True, **inputs}
        if self._takes_logits_to_keep:
            kwargs["logits_to_keep"] = n_logits
        if outputs:
            kwargs["output_hidden_states"] = -1  # only the last layer's, as transformers' MTP generator asks
            if self._keep_shared_kv:
                kwargs["return_shared_kv_states"] = True
        try:
            return self.model(input_ids=input_ids, **kwargs)
        except BaseException:
            self.reset()  # the cache may hold part of this pass: start clean next time
            raise

    def _keep_outputs(self, out, length: int) -> None:
        """Keep a pass's outputs; `length`: the cached positions after it."""
        self.hidden.append(out.hidden_states[-1][0], length)
        if self._keep_shared_kv:
            self._shared_kv = (dict(out.shared_kv_states), length)


# ---------------------------------------------------------------- GGUF, dequantized once

def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


def _save_converted(model, tokenizer, gguf_path: Path, target: Path) -> None:
    """Write the dequantized model next to where it goes, then move it there in one step."""
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


@contextlib.contextmanager
def _no_gguf_progress_bar():
    """transformers' GGUF converter draws its own tqdm bar on stderr, past `disable_progress_bar()`; our
    `progress` line says what happens instead (a piped CLI keeps its one error line)."""
    import transformers.modeling_gguf_pytorch_utils as gguf_utils
    bar = gguf_utils.tqdm
    gguf_utils.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        gguf_utils.tqdm = bar


def convert_gguf(source: ModelSource, progress: Progress) -> Path:
    """Dequantize a GGUF once into safetensors (slow: pure-Python parse) and reuse it on later loads."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    gguf_path = source.file
    check_gguf(gguf_path)
    target = converted_folder(gguf_path)
    if (target / "config.json").is_file():
        return target
    progress(f"Converting {gguf_path.name} once (later starts reuse it)…")
    try:
        with _no_gguf_progress_bar():
            tokenizer = AutoTokenizer.from_pretrained(source.path, gguf_file=source.gguf_file,
                                                      trust_remote_code=False)
            model = AutoModelForCausalLM.from_pretrained(source.path, gguf_file=source.gguf_file,
                                                         dtype=torch.float32, trust_remote_code=False)
    except _READ_ERRORS as exc:
        raise ModelLoadError(f"{gguf_path} could not be read as a GGUF model ({_first_line(exc)})") from None
    model.hf_quantizer = None  # the weights are dequantized now; lets save_pretrained write them
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    _save_converted(model, tokenizer, gguf_path, target)
    return target


# ---------------------------------------------------------------- loading

def load_tokenizer(source: ModelSource, name: str, *, trust_remote_code: bool = False):
    """The tokenizer of a model, without its weights (for compatibility checks). `trust_remote_code` is
    passed explicitly: False unless the user agreed (transformers then refuses, never asks)."""
    from transformers import AutoTokenizer
    try:
        if source.gguf_file:
            check_gguf(source.file)
            converted = converted_folder(source.file)
            if (converted / "config.json").is_file():
                return AutoTokenizer.from_pretrained(converted, trust_remote_code=False)
            return AutoTokenizer.from_pretrained(source.path, gguf_file=source.gguf_file, trust_remote_code=False)
        return AutoTokenizer.from_pretrained(source.path, trust_remote_code=trust_remote_code)
    except _READ_ERRORS as exc:
        raise ModelLoadError(f"the tokenizer of {name} could not be loaded ({_first_line(exc)})") from None


def check_weight_files(folder: Path) -> None:
    """Every safetensors file of a folder has a readable header that covers the file (what an interrupted
    download or copy breaks): ModelLoadError naming the file and what to do, before transformers reads it."""
    from safetensors import SafetensorError, safe_open
    try:
        present, _missing, weights_format = weight_files(folder)
    except OSError:
        return
    for file in present if weights_format == "safetensors" else ():
        try:
            with safe_open(str(file), "pt"):
                pass
        except (SafetensorError, OSError) as exc:
            raise ModelLoadError(f"{file} is not a readable safetensors file ({_first_line(exc)}); it may be an "
                                 "interrupted download or copy: download or copy it again") from None


def _from_pretrained(name: str, source: ModelSource, folder: Path, device: torch.device, dtype: torch.dtype,
                     trust_remote_code: bool):
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM, AutoTokenizer
    check_weight_files(folder)
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=trust_remote_code)
        kwargs = {"dtype": dtype, "trust_remote_code": trust_remote_code}
        if device.type != "cpu":
            kwargs["device_map"] = {"": str(device)}
        model = AutoModelForCausalLM.from_pretrained(folder, **kwargs)
    except torch.OutOfMemoryError:
        raise OutOfMemoryError(f"not enough {device.type} memory to load {source.label}; try a smaller "
                               "model or dtype") from None
    except (SafetensorError, *_READ_ERRORS) as exc:
        hint = " (it needs its own code: --trust-remote-code)" if "trust_remote_code" in str(exc) else ""
        raise ModelLoadError(f"{name} could not be loaded as a causal language model ({_first_line(exc)})"
                             f"{hint}") from None
    return model.eval(), tokenizer


def _vocab_size(model) -> int:
    """Rows of the logits: the output head's, else the config's vocabulary size."""
    head = model.get_output_embeddings()
    return int(head.weight.shape[0]) if head is not None else int(model.config.get_text_config().vocab_size)


def load(name: str, source: ModelSource, *, device: torch.device, dtype: torch.dtype,
         progress: Progress, trust_remote_code: bool = False) -> LoadedModel:
    """Load a model and its tokenizer on `device` in `dtype` (a GGUF is converted first, once).
    `trust_remote_code` runs the model's own Python code: only ever True after the user agreed. (Compiled
    runners: engine.backends.transformers_entry, the backend's entry point.)"""
    started = time.perf_counter()
    folder, converted_now = source.path, False
    if source.gguf_file:
        converted_now = not (converted_folder(source.file) / "config.json").is_file()
        folder = convert_gguf(source, progress)
    progress(f"Loading {source.label} on {device.type} ({dtype_label(dtype)})…")
    model, tokenizer = _from_pretrained(name, source, folder, device, dtype, trust_remote_code)
    text_config = model.config.get_text_config()
    context_length = int(getattr(text_config, "max_position_embeddings", None) or 2048)
    return LoadedModel(
        name=name, label=source.label, source=ModelSource(source.kind, folder, None, source.label),
        backend=BACKEND, tokenizer=tokenizer, device=device, dtype=dtype, dtype_label=dtype_label(dtype),
        load_seconds=time.perf_counter() - started, converted_now=converted_now,
        n_layers=int(text_config.num_hidden_layers),
        context_length=context_length,
        vocab_size=_vocab_size(model),
        n_parameters=sum(p.numel() for p in model.parameters()), eos_ids=eos_ids(tokenizer, model),
        runner_factory=lambda: TransformersRunner(model), model=model, heads=TRANSFORMERS_HEADS,
        device_label=backend_named(BACKEND).device_label(str(device)))
