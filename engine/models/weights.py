"""Which weight files a model folder holds and in which format (safetensors or pickle), read from its index
or its file names: no tensor is read. A leaf module (stdlib only), so that the catalog, the transformers
backend and the consent check can all ask it without importing one another."""

from __future__ import annotations

import json
from pathlib import Path

WEIGHT_INDEX_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")


def read_json_dict(path: Path) -> dict | None:
    """A JSON object from `path`, or None when the file is missing, unreadable or not an object."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def weight_files(folder: Path) -> tuple[list[Path], list[str], str | None]:
    """(present weight files, missing weight file names, format) for a model folder. An index json names the
    shards; without one, every top-level safetensors file counts (pickles only when there is none)."""
    for index_name in WEIGHT_INDEX_FILES:
        index = read_json_dict(folder / index_name)
        if index and isinstance(index.get("weight_map"), dict):
            names = sorted(set(index["weight_map"].values()))
            present = [folder / n for n in names if (folder / n).is_file()]
            missing = [n for n in names if not (folder / n).is_file()]
            return present, missing, "safetensors" if index_name.startswith("model.safetensors") else "pickle"
    safetensors = sorted(folder.glob("*.safetensors"))
    if len(safetensors) > 1:  # e.g. Mistral's consolidated.safetensors next to the HF shards: count one set
        not_consolidated = [p for p in safetensors if not p.name.startswith("consolidated")]
        safetensors = not_consolidated or safetensors
    if safetensors:
        return safetensors, [], "safetensors"
    pickles = sorted(p for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES and p.is_file()
                     and ("model" in p.name or "consolidated" in p.name))
    return pickles, [], "pickle" if pickles else None
