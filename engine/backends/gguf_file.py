"""A GGUF file's header, read without loading the model: its metadata (scalars and strings) and where its
tensor data ends. The llama.cpp backend checks a file with it before llama.cpp sees it, so a truncated or
corrupt download is a one-line error naming what is missing rather than whatever llama.cpp makes of it.

Reads the file only (memory-mapped); touches nothing else. The layout is the GGUF specification's
(ggml/docs/gguf.md): magic, version, counts, key/value pairs, tensor infos, aligned tensor data.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

from engine.backends.source import gguf_problem
from engine.core.errors import ModelLoadError

SUPPORTED_VERSIONS = (2, 3)
MAX_DIMS = 4
# GGUF value types → struct format (8: string, 9: array, read apart)
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


class _Truncated(Exception):
    """The header runs past the end of the file."""


@dataclass(frozen=True, slots=True)
class GgufHeader:
    version: int
    metadata: dict[str, object]  # scalars and strings; an array is given as its length
    n_tensors: int
    data_end: int  # the byte just after the last tensor's data
    file_size: int
    elements_by_type: dict[int, int]  # ggml tensor type → how many weights are stored in it
    tensor_names: tuple[str, ...] = ()

    @property
    def architecture(self) -> str | None:
        value = self.metadata.get("general.architecture")
        return value if isinstance(value, str) else None

    def get(self, key: str, default=None):
        """A metadata value of this file's architecture, e.g. get("context_length")."""
        return self.metadata.get(f"{self.architecture}.{key}", default)

    @property
    def nextn_layers(self) -> int:
        """The multi-token-prediction (nextn) layers it declares (`<arch>.nextn_predict_layers`; 0: none)."""
        value = self.get("nextn_predict_layers", 0)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0

    @property
    def mtp_only(self) -> bool:
        """An MTP head alone (llama.cpp's converter with --mtp writes `mtp-*.gguf`): nextn layers declared, no
        trunk block stored."""
        return self.nextn_layers > 0 and not any(name.startswith("blk.0.") for name in self.tensor_names)


class _Cursor:
    def __init__(self, buffer, size: int) -> None:
        self.buffer, self.size, self.at = buffer, size, 0

    def scalar(self, fmt: str):
        width = struct.calcsize(fmt)
        if self.at + width > self.size:
            raise _Truncated
        (value,) = struct.unpack_from(fmt, self.buffer, self.at)
        self.at += width
        return value

    def string(self) -> str:
        length = self.scalar("<Q")
        if self.at + length > self.size:
            raise _Truncated
        raw = bytes(self.buffer[self.at:self.at + length])
        self.at += length
        return raw.decode("utf-8", errors="replace")

    def value(self, kind: int):
        if kind in _SCALARS:
            return self.scalar(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind != _ARRAY:
            raise ValueError(f"unknown metadata value type {kind}")
        item_kind, count = self.scalar("<I"), self.scalar("<Q")
        if item_kind in _SCALARS:  # skip the items: only the length is kept
            self.at += struct.calcsize(_SCALARS[item_kind]) * count
            if self.at > self.size:
                raise _Truncated
        else:
            for _ in range(count):
                self.value(item_kind)
        return count


def _product(dims: list[int]) -> int:
    n_elements = 1
    for dim in dims:
        n_elements *= dim
    return n_elements


def _tensor_bytes(ggml_type: int, dims: list[int]) -> int:
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
    try:
        block_size, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
    except (ValueError, KeyError):
        raise ValueError(f"unknown tensor type {ggml_type}") from None
    return _product(dims) // block_size * type_size


def _parse(cursor: _Cursor) -> GgufHeader:
    cursor.at = 4  # past the magic bytes, checked by read_header
    version = cursor.scalar("<I")
    if version not in SUPPORTED_VERSIONS:
        raise ValueError(f"GGUF version {version} is not supported (only {SUPPORTED_VERSIONS})")
    n_tensors, n_kv = cursor.scalar("<Q"), cursor.scalar("<Q")
    if n_kv * 12 + n_tensors * 24 > cursor.size:  # the least a key/value pair and a tensor info can take
        raise ValueError(f"its header claims {n_kv:,} metadata entries and {n_tensors:,} tensors")
    metadata = {}
    for _ in range(n_kv):
        key = cursor.string()
        metadata[key] = cursor.value(cursor.scalar("<I"))
    tensors, elements_by_type = [], {}
    for _ in range(n_tensors):
        name = cursor.string()
        n_dims = cursor.scalar("<I")
        if n_dims > MAX_DIMS:
            raise ValueError(f"tensor {name!r} has {n_dims} dimensions")
        dims = [cursor.scalar("<Q") for _ in range(n_dims)]
        ggml_type, offset = cursor.scalar("<I"), cursor.scalar("<Q")
        tensors.append((name, offset + _tensor_bytes(ggml_type, dims)))
        elements_by_type[ggml_type] = elements_by_type.get(ggml_type, 0) + _product(dims)
    alignment = int(metadata.get("general.alignment", 32))
    data_start = -(-cursor.at // alignment) * alignment
    last = max(tensors, key=lambda t: t[1], default=("", 0))
    data_end = data_start + last[1]
    if data_end > cursor.size:
        raise _Truncated(f"tensor {last[0]!r} ends at byte {data_end:,} of a {cursor.size:,}-byte file")
    header = GgufHeader(version, metadata, n_tensors, data_end, cursor.size, elements_by_type,
                        tuple(name for name, _ in tensors))
    if header.architecture is None:
        raise ValueError("it names no architecture: general.architecture is missing")
    return header


def mtp_sidecars(path: Path) -> list[Path]:
    """MTP head files beside a model, as llama.cpp's converter names them (`mtp-*.gguf`), excluding `path`."""
    path = Path(path)
    try:
        return sorted(p for p in path.parent.glob("mtp-*.gguf") if p.is_file() and p != path)
    except OSError:
        return []


def read_header(path: Path) -> GgufHeader:
    """The header of the GGUF file at `path`; ModelLoadError with the reason for a file that is not a whole
    GGUF (missing, unreadable, not GGUF, truncated, corrupt)."""
    problem = gguf_problem(path)  # unreadable, or no magic bytes: worded as for every backend
    if problem:
        raise ModelLoadError(problem)
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buffer:
                return _parse(_Cursor(buffer, size))
    except OSError as exc:
        raise ModelLoadError(f"cannot read {path}: {exc.strerror or exc}") from None
    except _Truncated as exc:
        detail = f" ({exc})" if str(exc) else ""
        raise ModelLoadError(f"{path} is truncated{detail}: the download is incomplete; download it "
                             "again") from None
    except (ValueError, UnicodeError, OverflowError, MemoryError) as exc:
        raise ModelLoadError(f"{path} could not be read as a GGUF model ({exc})") from None
