"""A model's files, as the backends read them, without loading anything: `ModelSource` (where a model comes
from: a Hugging Face folder, a hub snapshot, a .gguf file or the built-in one), the GGUF magic check, which
weight files a folder holds and in which format (safetensors or pickle, from its index or file names), and the
one file stamp (path, size, modification time) that names derived files such as a GGUF's converted copy.

Reads the file system only (no tensor is read); where derived files live is engine.host's cache_root.
Naming a source from what the user typed is engine.models.sources'.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from engine.core.errors import ModelLoadError
from engine.host import cache_root

GGUF_MAGIC = b"GGUF"
WEIGHT_INDEX_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")


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


# ---------------------------------------------------------------- GGUF files

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


def file_stamp(path: Path) -> str:
    """A short key that changes when the file at `path` is replaced, grown or touched."""
    st = path.stat()
    return hashlib.sha256(f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:16]


def converted_folder(gguf_path: Path) -> Path:
    """Where a GGUF's dequantized copy (transformers backend) lives: named by the file's stamp."""
    return cache_root() / "converted" / f"{gguf_path.stem}-{file_stamp(gguf_path)}"


# ---------------------------------------------------------------- weight files of a folder

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


__all__ = ["ModelSource", "GGUF_MAGIC", "gguf_problem", "check_gguf", "file_stamp", "converted_folder",
           "read_json_dict", "weight_files", "WEIGHT_INDEX_FILES", "PICKLE_SUFFIXES"]
