"""Where a target's measured verify-cost curves (engine.core.stats.VerifyCost) are kept: one small JSON file per
model file, backend, device, dtype, thread count and kind of pass (a chain of n tokens, or a token tree's pass
over the fed id and n − 1 nodes), under the app's cache folder (…/verify-cost). Reading never measures
(engine.measure.verify_cost measures and stores). Touches that folder only; no Qt."""

from __future__ import annotations

import json
import re
from pathlib import Path

from engine.backends.source import file_stamp
from engine.core.stats import VerifyCost
from engine.core.validation import write_text_atomic
from engine.host import cache_root

CACHE_VERSION = 1


def device_key(model) -> str:
    """What runs the model's layers, for the cache's key: the device the backend names (llama.cpp's logits are
    on the CPU whatever runs its layers, so a CPU build's curve must not serve a CUDA build's), with the GPU's
    name (a curve measured on one GPU is not another's)."""
    where = model.device_label or model.device.type
    device = model.device
    if device.type == "cuda":
        try:
            import torch
            where += f" {torch.cuda.get_device_name(device)}"
        except (RuntimeError, AssertionError, ImportError):  # no driver here: the label alone
            pass
    return re.sub(r"[^A-Za-z0-9_.]+", "_", where).strip("_") or device.type


def cache_file(model, threads: int, tree: bool = False) -> Path:
    """Where the curve of `model` (a LoadedModel) on this backend, device, dtype and thread count is kept (`tree`:
    the curve of its tree passes)."""
    stamp = file_stamp(model.source.file)
    name = (f"{model.source.file.stem}-{stamp}-{model.backend}-{device_key(model)}-{model.dtype_label}-"
            f"{threads}t{'-tree' if tree else ''}.json")
    return cache_root() / "verify-cost" / name


def read_curve(path: Path, n_max: int) -> VerifyCost | None:
    """The curve kept at `path` when it covers n_max tokens; None for no file or an unreadable one."""
    try:
        data = json.loads(path.read_text())
        if data.get("version") == CACHE_VERSION and len(data["seconds"]) >= n_max:
            return VerifyCost(tuple(float(s) for s in data["seconds"]))
    except (OSError, ValueError, KeyError, TypeError):
        pass  # no cache yet, or an unreadable one
    return None


def cached_verify_cost(model, n_max: int, *, threads: int, tree: bool = False) -> VerifyCost | None:
    """The curve of `model` from the cache only (one small file read, never a measurement): None where it
    has not been measured up to n_max tokens (`specscope bench` measures and caches it), or where the model
    has no file of its own to key the cache on. `tree`: the curve of its tree passes (n − 1 nodes)."""
    try:
        path = cache_file(model, threads, tree)
    except (AttributeError, OSError, TypeError, ValueError):
        return None
    return read_curve(path, n_max)


def store_curve(path: Path, model, threads: int, cost: VerifyCost) -> None:
    """Keep a measured curve at `path` (whole or not at all: engine.core.validation.write_text_atomic)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps({"version": CACHE_VERSION, "model": model.label, "threads": threads,
                                        "seconds": list(cost.seconds)}))
