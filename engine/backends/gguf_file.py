"""A GGUF file's header, read without loading the model: its metadata (scalars and strings) and where its
tensor data ends. The llama.cpp backend checks a file with it before llama.cpp sees it, so a truncated or
corrupt download is a one-line error naming what is missing rather than whatever llama.cpp makes of it.

It also knows, from headers alone, the multi-token-prediction (nextn) heads llama.cpp runs: which
architectures it has an MTP graph for, and which `mtp-*.gguf` head beside a model fits it (the catalog and
engine.backends.llama_cpp_mtp ask the same question here).

Reads the file only (memory-mapped); touches nothing else. The layout is the GGUF specification's
(ggml/docs/gguf.md): magic, version, counts, key/value pairs, tensor infos, aligned tensor data.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from engine.backends.source import gguf_problem
from engine.core.errors import ModelLoadError

SUPPORTED_VERSIONS = (2, 3)
MAX_DIMS = 4
# GGUF value types → struct format (8: string, 9: array, read apart)
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9

# llama.cpp builds an MTP graph for these architectures (src/models/*.cpp, LLM_GRAPH_TYPE_DECODER_MTP) …
MTP_ARCHITECTURES = frozenset({
    "qwen35", "qwen35moe", "qwen3next", "glm4moe", "glm-dsa", "glm5-next", "deepseek2", "deepseek32", "deepseek4",
    "step35", "mimo2", "hy-v3", "bailingmoe3", "cohere2moe", "nemotron_h_moe"})
# … and of these it runs exactly one MTP block (GGML_ASSERT(n_layer_nextn == 1)): more would abort the process
ONE_HEAD_ARCHITECTURES = frozenset({
    "qwen35", "qwen35moe", "qwen3next", "glm4moe", "glm-dsa", "deepseek2", "deepseek32", "deepseek4",
    "bailingmoe3", "cohere2moe", "nemotron_h_moe"})


# a Gemma 4 assistant drafter's GGUF, and the targets whose KV cache llama.cpp lets it read (shared memory)
ASSISTANT_ARCHITECTURE = "gemma4-assistant"
ASSISTANT_TARGETS = frozenset({"gemma4"})


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


def mtp_shape(header: GgufHeader) -> dict:
    """What an MTP head and its target must share: architecture, hidden size and vocabulary length."""
    tokens = header.metadata.get("tokenizer.ggml.tokens")
    return {"architecture": header.architecture, "embedding_length": header.get("embedding_length"),
            "n_tokens": tokens if isinstance(tokens, int) else None}


def mtp_mismatch(head: Mapping, target: Mapping, target_label: str) -> str | None:
    """Why an MTP head of shape `head` is not for the target of shape `target` (None: it fits); each a mapping
    holding mtp_shape's keys (mtp_shape itself, or facts cached with them)."""
    for key, words in (("architecture", "it is for a {!r} model, {} is {!r}"),
                       ("embedding_length", "its hidden size is {}, {}'s is {}"),
                       ("n_tokens", "its vocabulary has {} tokens, {}'s has {}")):
        if head.get(key) != target.get(key):
            return words.format(head.get(key), target_label, target.get(key))
    return None


def _head_of(path: Path) -> dict | None:
    """mtp_shape of the file at `path` when it is an MTP head alone (None: not one, or unreadable)."""
    try:
        header = read_header(path)
    except ModelLoadError:
        return None
    return mtp_shape(header) if header.mtp_only else None


def shared_name(a: str, b: str) -> int:
    """How many leading characters two file names share (case aside): a head is named after its model."""
    n = 0
    while n < min(len(a), len(b)) and a[n].lower() == b[n].lower():
        n += 1
    return n


def fitting_sidecar(path: Path, target: Mapping, head_of=_head_of) -> Path | None:
    """The `mtp-*.gguf` head beside the model at `path` (of shape `target`, mtp_shape) that fits it, the one
    sharing most of its name where several do; `head_of(file)` gives a file's head shape (None: not a head),
    read from its header unless a caller has it cached."""
    path = Path(path)
    fitting = [p for p in mtp_sidecars(path)
               if (shape := head_of(p)) is not None and mtp_mismatch(shape, target, path.name) is None]
    return max(fitting, key=lambda p: shared_name(p.stem.removeprefix("mtp-"), path.stem), default=None)


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
