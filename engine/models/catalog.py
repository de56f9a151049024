"""What models are on this machine and what they are: the built-in default, the local Hugging Face cache,
user-added folders and .gguf files, each a `CatalogEntry` of facts read from metadata only (config.json,
safetensors headers, the tokenizer.json, a GGUF header); no weights are loaded. Memory estimates are
engine.models.memory's, which drafts fit a target engine.models.pairing's.

Everything here is best effort and cheap: a model whose facts cannot be read is still listed, with the
missing facts as None and a `problem` saying why it cannot be used. Reads files (and caches GGUF facts under
engine.host's cache_root); names come from engine.models.sources, file checks from engine.backends.source.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable

from engine.backends import resolve_backend
from engine.backends.device import DTYPE_NAMES
from engine.backends.gguf_file import ASSISTANT_ARCHITECTURE, ASSISTANT_TARGETS, shared_name
from engine.backends.source import (ModelSource, converted_folder, file_stamp, gguf_problem, read_json_dict,
                                    weight_files)
from engine.core.errors import SpecScopeError
from engine.host import cache_root
from engine.models.sources import DEFAULT_LABEL, hub_cache_dir, resolve_source

__all__ = ["CatalogEntry", "list_models", "describe_default", "list_hub_cache", "describe_name", "describe_path",
           "needs_remote_code", "folder_tokenizer_facts", "gguf_facts", "own_drafter", "entry_source",
           "entry_backend", "entry_as_dict", "format_bytes", "format_parameters"]

_SAFETENSORS_DTYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64", "I8": "int8",
                       "U8": "uint8", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "I32": "int32",
                       "I64": "int64", "I16": "int16", "BOOL": "bool"}



@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """One model, described from its metadata. `name` is what `engine.models.load.load_model` accepts."""
    name: str
    label: str
    kind: str  # built-in | hub-cache | folder | gguf
    path: Path  # the model folder, or the .gguf file
    architecture: str | None = None  # config `architectures[0]` (e.g. Qwen3ForCausalLM) or GGUF architecture
    model_type: str | None = None  # config `model_type` (e.g. qwen3)
    n_parameters: int | None = None
    size_bytes: int = 0  # on disk
    dtype: str | None = None  # as stored: float32, bfloat16, … or a GGUF quantisation (Q4_1)
    tokenizer_family: str | None = None  # the tokenizer's model type: BPE, Unigram, WordPiece, …
    vocab_size: int | None = None  # with added tokens, as len(tokenizer) counts them
    n_layers: int | None = None
    n_kv_heads: int | None = None
    head_dim: int | None = None
    context_length: int | None = None
    weights_format: str | None = None  # safetensors | gguf | pickle | None (no weights found)
    needs_remote_code: bool = False  # config.json (or tokenizer_config.json) has an auto_map
    complete: bool = True  # False for a download that has not finished (or lost files)
    problem: str | None = None  # why it cannot be used, in plain words; None when usable
    n_mtp_layers: int = 0  # multi-token-prediction layers its config declares: it drafts for itself (mtp)
    mtp_sidecar: Path | None = None  # a GGUF without them inside: the mtp-*.gguf head beside it that fits it
    assistant_file: Path | None = None  # a Gemma 4 GGUF: the gemma4-assistant GGUF beside it that fits it
    repo_id: str | None = None  # hub-cache entries
    revision: str | None = None  # hub-cache entries: the snapshot's commit

    @property
    def usable(self) -> bool:
        return self.complete and self.problem is None


# ---------------------------------------------------------------- words

def format_bytes(n: int | None) -> str:
    if n is None:
        return "?"
    size = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(size) < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{n} B"


def format_parameters(n: int | None) -> str:
    if n is None:
        return "?"
    for div, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.1f}{unit}".replace(".0" + unit, unit)
    return str(n)


# ---------------------------------------------------------------- listing

def list_models(extra_paths: Iterable[str | os.PathLike] = (), *, include_default: bool = True,
                cache_dir: str | os.PathLike | None = None) -> list[CatalogEntry]:
    """The built-in default, every model in the local Hugging Face cache, then `extra_paths` (folders and
    .gguf files the user added). Never raises for one bad model: it is listed with its `problem`."""
    entries: list[CatalogEntry] = []
    if include_default:
        entries.append(describe_default())
    entries.extend(list_hub_cache(cache_dir))
    for path in extra_paths:
        entries.append(describe_path(path))
    return entries


def describe_default() -> CatalogEntry:
    try:
        source = resolve_source("default")
    except SpecScopeError as exc:
        return CatalogEntry(name="default", label=DEFAULT_LABEL, kind="built-in", path=Path(),
                            complete=False, problem=str(exc))
    gguf_path = source.path / source.gguf_file
    converted = converted_folder(gguf_path)
    if not _gguf_facts_file(gguf_path).is_file() and (converted / "config.json").is_file():
        # its converted copy describes the same model and is read in milliseconds, not seconds
        entry = describe_path(converted, name="default", label=DEFAULT_LABEL, kind="built-in")
        if entry.usable:
            return replace(entry, path=gguf_path, size_bytes=_size(gguf_path), weights_format="gguf")
    return describe_path(gguf_path, name="default", label=DEFAULT_LABEL, kind="built-in")


def list_hub_cache(cache_dir: str | os.PathLike | None = None) -> list[CatalogEntry]:
    """Models in the Hugging Face cache (found by `huggingface_hub.scan_cache_dir`)."""
    from huggingface_hub import CacheNotFound, scan_cache_dir
    folder = Path(cache_dir) if cache_dir is not None else hub_cache_dir()
    try:
        info = scan_cache_dir(folder)
    except (CacheNotFound, OSError, ValueError):
        return []
    entries = []
    for repo in sorted(info.repos, key=lambda r: r.repo_id.lower()):
        if repo.repo_type != "model" or not repo.revisions:
            continue
        entries.extend(_describe_cached_repo(repo))
    return entries


def _describe_cached_repo(repo) -> list[CatalogEntry]:
    main = [rev for rev in repo.revisions if "main" in rev.refs]
    revision = main[0] if main else max(repo.revisions, key=lambda rev: rev.last_modified)
    snapshot = Path(revision.snapshot_path)
    on_main = bool(main)
    common = dict(kind="hub-cache", repo_id=repo.repo_id, revision=revision.commit_hash)
    entries = []
    if (snapshot / "config.json").is_file():
        entry = describe_path(snapshot, name=repo.repo_id if on_main else str(snapshot), label=repo.repo_id,
                              **common)
        entries.append(replace(entry, size_bytes=revision.size_on_disk))
    for gguf in sorted(snapshot.rglob("*.gguf")):
        relative = gguf.relative_to(snapshot).as_posix()
        entries.append(describe_path(gguf, label=f"{repo.repo_id}/{relative}", **common))
    if not entries:
        entries.append(CatalogEntry(
            name=repo.repo_id, label=repo.repo_id, path=snapshot, size_bytes=revision.size_on_disk,
            complete=False, problem="the download has not finished (no config.json yet); download it again to "
                                    "continue", **common))
    return entries


# ---------------------------------------------------------------- describing one model

def describe_name(name: str) -> CatalogEntry:
    """Describe what `load_model(name)` would load ("default", a folder, a .gguf file, a cached hub id)."""
    if name.strip() == "default":
        return describe_default()
    source = resolve_source(name)
    if source.kind == "hub":
        for entry in list_hub_cache():
            if entry.repo_id == name and entry.kind == "hub-cache" and entry.path == source.path:
                return entry
        return describe_path(source.path, name=name, label=name, kind="hub-cache", repo_id=name)
    target = source.path / source.gguf_file if source.gguf_file else source.path
    return describe_path(target, name=name)


def describe_path(path: str | os.PathLike, *, name: str | None = None, label: str | None = None,
                  kind: str | None = None, with_tokenizer: bool = True, **extra) -> CatalogEntry:
    """Describe a model folder or a .gguf file from its metadata alone."""
    path = Path(path).expanduser()
    name = name or str(path)
    if path.is_file() and path.suffix.lower() == ".gguf":
        return _describe_gguf(path, name=name, label=label or path.stem, kind=kind or "gguf", **extra)
    label = label or path.name or str(path)
    kind = kind or "folder"
    if not path.exists():
        return CatalogEntry(name=name, label=label, kind=kind, path=path, complete=False,
                            problem=f"{path} does not exist (moved or deleted?)", **extra)
    if path.is_file():
        return CatalogEntry(name=name, label=label, kind=kind, path=path, size_bytes=_size(path),
                            complete=False, problem=f"{path.name} is a file but not a .gguf model", **extra)
    return _describe_folder(path, name=name, label=label, kind=kind, with_tokenizer=with_tokenizer, **extra)


def _size(path: Path) -> int:
    try:
        if path.is_file():
            return path.stat().st_size
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    except OSError:
        return 0


def _text_config(config: dict) -> dict:
    text = config.get("text_config")
    return {**config, **text} if isinstance(text, dict) else config


def _mtp_layers(text: dict) -> int:
    """MTP layers a config declares (transformers' num_mtp_layers; DeepSeek/GLM checkpoints say
    num_nextn_predict_layers)."""
    value = text.get("num_mtp_layers", text.get("num_nextn_predict_layers"))
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def own_drafter(entry: CatalogEntry) -> tuple[str, str] | None:
    """(method, words) when a model drafts for itself, as the registered methods tell it (MethodSpec.own_drafter:
    MTP layers in its config, a known assistant drafter for its family in engine.models.pairs); None otherwise."""
    from engine.core.methods import methods
    from engine.models.pairs import pairs_for
    pairs = pairs_for(entry.name, entry.label, entry.repo_id)
    for method in methods():
        words = method.own_drafter(entry, pairs) if method.own_drafter is not None else None
        if words:
            return method.name, words
    return None


def _normalize_dtype(value) -> str | None:
    if not value or not isinstance(value, str):
        return None
    value = value.removeprefix("torch.").lower()
    return DTYPE_NAMES.get(value, value)


def _safetensors_facts(files: list[Path]) -> tuple[int | None, str | None]:
    """Parameter count and the dominant dtype, from the safetensors headers (no tensor is read)."""
    from safetensors import safe_open
    n_parameters, by_dtype = 0, {}
    try:
        for file in files:
            with safe_open(str(file), framework="numpy") as f:
                for key in f.keys():
                    tensor = f.get_slice(key)
                    count = 1
                    for dim in tensor.get_shape():
                        count *= int(dim)
                    n_parameters += count
                    dtype = _SAFETENSORS_DTYPES.get(tensor.get_dtype(), tensor.get_dtype().lower())
                    by_dtype[dtype] = by_dtype.get(dtype, 0) + count
    except Exception:  # a truncated or foreign file: the facts are unknown, not an error
        return None, None
    return n_parameters, (max(by_dtype, key=by_dtype.get) if by_dtype else None)


def needs_remote_code(folder: str | os.PathLike) -> bool:
    """True when the model (or its tokenizer) names its own Python code (an `auto_map` in its config), which
    SpecScope never runs without the user's say-so (`trust_remote_code` stays off)."""
    folder = Path(folder)
    if folder.is_file():
        return False
    for name in ("config.json", "tokenizer_config.json"):
        data = read_json_dict(folder / name)
        if data and data.get("auto_map"):
            return True
    return False


def folder_tokenizer_facts(folder: Path, config: dict | None = None) -> tuple[str | None, int | None]:
    """A model folder's tokenizer family and vocabulary size, from tokenizer.json through the `tokenizers`
    library (no model weights), else from tokenizer.model and the config."""
    file = folder / "tokenizer.json"
    if file.is_file():
        try:
            from tokenizers import Tokenizer
            tokenizer = Tokenizer.from_file(str(file))
            return type(tokenizer.model).__name__, tokenizer.get_vocab_size(with_added_tokens=True)
        except Exception:  # unreadable tokenizer.json: fall back to the config's numbers
            pass
    family = "SentencePiece" if (folder / "tokenizer.model").is_file() else None
    vocab = (config or {}).get("vocab_size")
    return family, int(vocab) if isinstance(vocab, int) else None


def _describe_folder(folder: Path, *, name: str, label: str, kind: str, with_tokenizer: bool,
                     **extra) -> CatalogEntry:
    config = read_json_dict(folder / "config.json")
    problems = []
    if config is None:
        problems.append("it has no readable config.json" if (folder / "config.json").exists()
                        else "it has no config.json")
        config = {}
    text = _text_config(config)
    architectures = config.get("architectures") or []
    present, missing, weights_format = weight_files(folder)
    n_parameters, stored_dtype = (None, None)
    if weights_format == "safetensors" and not missing:
        n_parameters, stored_dtype = _safetensors_facts(present)
    if missing:
        problems.append(f"{len(missing)} of {len(missing) + len(present)} weight files are missing "
                        "(an unfinished download?)")
    elif weights_format is None:
        problems.append("it has no weights (no .safetensors file)")
    elif weights_format == "safetensors" and n_parameters is None:
        problems.append("its weights cannot be read (not safetensors, or cut short)")
    family, vocab = folder_tokenizer_facts(folder, text) if with_tokenizer else (None, text.get("vocab_size"))
    n_heads = text.get("num_attention_heads")
    head_dim = text.get("head_dim") or (text["hidden_size"] // n_heads if n_heads and text.get("hidden_size")
                                        else None)
    complete = not missing and weights_format is not None and bool(config)
    return CatalogEntry(
        name=name, label=label, kind=kind, path=folder,
        architecture=architectures[0] if architectures else None,
        model_type=config.get("model_type"),
        n_parameters=n_parameters, size_bytes=_size(folder),
        dtype=_normalize_dtype(config.get("torch_dtype") or config.get("dtype") or text.get("torch_dtype")
                               or text.get("dtype")) or stored_dtype,
        tokenizer_family=family, vocab_size=vocab,
        n_layers=text.get("num_hidden_layers"),
        n_kv_heads=text.get("num_key_value_heads") or n_heads,
        head_dim=head_dim,
        context_length=text.get("max_position_embeddings"),
        n_mtp_layers=_mtp_layers(text),
        weights_format=weights_format,
        needs_remote_code=needs_remote_code(folder),
        complete=complete,
        problem="; ".join(problems) or None, **extra)


# GGUF: reading the header with gguf's reader costs seconds on a big vocabulary, so the facts are cached in
# SpecScope's cache folder, keyed by path, size and modification time (and FACTS_VERSION: what they hold).

_GGUF_TOKENIZER_FAMILIES = {"gpt2": "BPE", "llama": "BPE", "bert": "WordPiece", "t5": "Unigram"}
FACTS_VERSION = 2  # 2: the MTP facts (nextn layers, a head alone, the shape a head must share)


def _gguf_facts_file(path: Path) -> Path:
    return cache_root() / "facts" / f"{path.stem}-{file_stamp(path)}-v{FACTS_VERSION}.json"


def gguf_facts(path: Path) -> dict:
    """Architecture, parameter count and shapes of a GGUF file, from its header (cached)."""
    cached = _gguf_facts_file(path)
    facts = read_json_dict(cached)
    if facts is not None:
        return facts
    from gguf import GGMLQuantizationType

    from engine.backends.gguf_file import mtp_shape, read_header
    header = read_header(path)  # the header only: string arrays (the vocabulary) are counted, not decoded
    by_type = header.elements_by_type
    n_heads = header.get("attention.head_count")
    embedding = header.get("embedding_length")
    family = header.metadata.get("tokenizer.ggml.model")
    facts = {
        "architecture": header.architecture,
        "n_parameters": sum(by_type.values()),
        "dtype": GGMLQuantizationType(max(by_type, key=by_type.get)).name if by_type else None,
        "tokenizer_family": _GGUF_TOKENIZER_FAMILIES.get(family, family),
        "vocab_size": header.metadata.get("tokenizer.ggml.tokens") or header.get("vocab_size"),
        "n_layers": header.get("block_count"),
        "n_kv_heads": header.get("attention.head_count_kv") or n_heads,
        "head_dim": header.get("attention.key_length") or (embedding // n_heads if embedding and n_heads
                                                           else None),
        "context_length": header.get("context_length"),
        "nextn_layers": header.nextn_layers,  # multi-token-prediction layers declared (inside, or a head alone)
        "mtp_only": header.mtp_only,  # an mtp-*.gguf head alone: no model of its own
        **mtp_shape(header),  # architecture, embedding_length, n_tokens: what a head and its target share
    }
    facts = {k: (int(v) if isinstance(v, (int, float)) and k != "dtype" and not isinstance(v, bool) else v)
             for k, v in facts.items()}
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(facts))
        os.replace(tmp, cached)
    except OSError:  # a read-only cache only costs time
        pass
    return facts


def _describe_gguf(path: Path, *, name: str, label: str, kind: str, **extra) -> CatalogEntry:
    problem = gguf_problem(path)
    if problem:
        return CatalogEntry(name=name, label=label, kind=kind, path=path, size_bytes=_size(path), complete=False,
                            problem=problem, **extra)
    try:
        facts = gguf_facts(path)
    except Exception as exc:  # the reader raises many types on a damaged file
        return CatalogEntry(name=name, label=label, kind=kind, path=path, size_bytes=_size(path),
                            weights_format="gguf", complete=False,
                            problem=f"{path.name} could not be read as GGUF ({type(exc).__name__})", **extra)
    n_mtp, sidecar, problem, assistant = facts.get("nextn_layers", 0), None, None, None
    if facts.get("mtp_only"):  # a head alone: it drafts for another model, and is no model to load
        n_mtp, problem = 0, _head_problem(path, facts)
    elif facts.get("architecture") == ASSISTANT_ARCHITECTURE:  # a drafter, no model to chat with
        problem = _assistant_problem(path, facts)
    elif facts.get("architecture") in ASSISTANT_TARGETS:
        assistant = _fitting_assistant(path, facts)
    elif not n_mtp:
        sidecar = _fitting_sidecar(path, facts)
        n_mtp = gguf_facts(sidecar).get("nextn_layers", 0) if sidecar is not None else 0
    return CatalogEntry(name=name, label=label, kind=kind, path=path, architecture=facts.get("architecture"),
                        model_type=facts.get("architecture"), n_parameters=facts.get("n_parameters"),
                        size_bytes=_size(path), dtype=facts.get("dtype"),
                        tokenizer_family=facts.get("tokenizer_family"), vocab_size=facts.get("vocab_size"),
                        n_layers=facts.get("n_layers"), n_kv_heads=facts.get("n_kv_heads"),
                        head_dim=facts.get("head_dim"), context_length=facts.get("context_length"),
                        n_mtp_layers=n_mtp, mtp_sidecar=sidecar, assistant_file=assistant, weights_format="gguf",
                        problem=problem, **extra)


def _beside(path: Path) -> list[Path]:
    try:
        return sorted(p for p in path.parent.glob("*.gguf") if p.is_file() and p != path)
    except OSError:
        return []


def _assistant_pairs(path: Path, facts: dict, want: frozenset[str]) -> list[Path]:
    """The GGUFs beside `path` of architecture `want` (an assistant's targets, a target's assistants) with the
    same vocabulary: a Gemma 4 assistant and its target share the tokenizer."""
    found = []
    for other in _beside(path):
        try:
            theirs = gguf_facts(other)
        except Exception:  # unreadable: no partner
            continue
        if theirs.get("architecture") in want and theirs.get("vocab_size") == facts.get("vocab_size"):
            found.append(other)
    return found


def _fitting_assistant(path: Path, facts: dict) -> Path | None:
    found = _assistant_pairs(path, facts, frozenset({ASSISTANT_ARCHITECTURE}))
    return max(found, key=lambda p: shared_name(p.stem, path.stem), default=None)


def _assistant_problem(path: Path, facts: dict) -> str:
    """What a Gemma 4 assistant GGUF says in the list: it drafts for a Gemma 4 model, and which one lies beside it."""
    targets = _assistant_pairs(path, facts, ASSISTANT_TARGETS)
    if targets:
        target = max(targets, key=lambda p: shared_name(p.stem, path.stem))
        return (f"a Gemma 4 assistant drafter for {target.name}, not a model to chat with; load {target.name} "
                "(method assistant drafts with this)")
    return ("a Gemma 4 assistant drafter, not a model to chat with; load its Gemma 4 target and use method "
            "assistant with this file as the draft")


def _head_shape(path: Path) -> dict | None:
    """An MTP head's facts (cached; they hold its engine.backends.gguf_file.mtp_shape); None: not a head alone."""
    try:
        facts = gguf_facts(path)
    except Exception:  # an unreadable file beside the model is no head for it
        return None
    return facts if facts.get("mtp_only") else None


def _fitting_sidecar(path: Path, facts: dict) -> Path | None:
    """The mtp-*.gguf head beside the GGUF at `path` that fits it (as llama.cpp's MTP head finds it)."""
    from engine.backends.gguf_file import fitting_sidecar
    return fitting_sidecar(path, facts, head_of=_head_shape)


def _head_problem(path: Path, facts: dict) -> str:
    """What an mtp-*.gguf head alone says in the list: whose head it is, and what to load instead."""
    from engine.backends.gguf_file import mtp_mismatch, shared_name
    targets = []
    try:
        beside = sorted(p for p in path.parent.glob("*.gguf") if p.is_file() and p != path)
    except OSError:
        beside = []
    for other in beside:
        try:
            theirs = gguf_facts(other)
        except Exception:  # unreadable: not its target
            continue
        if not theirs.get("mtp_only") and not theirs.get("nextn_layers") \
                and mtp_mismatch(facts, theirs, other.name) is None:
            targets.append(other)
    layers = facts.get("nextn_layers", 0)
    what = f"an MTP head ({layers} nextn layer{'s' if layers != 1 else ''}) for"
    if targets:
        target = max(targets, key=lambda p: shared_name(path.stem.removeprefix("mtp-"), p.stem))
        return f"{what} {target.name}, not a model to chat with; load {target.name} (method mtp drafts with this)"
    return (f"{what} a {facts.get('architecture')} model, not a model to chat with; load its target (this file "
            "beside it, or named as method mtp's draft)")


# ---------------------------------------------------------------- where an entry runs

def entry_source(entry: CatalogEntry) -> ModelSource:
    """The source an entry's files make, as engine.models.sources would name them (a GGUF file, or a folder)."""
    if entry.path.suffix.lower() == ".gguf":
        return ModelSource("gguf", entry.path.parent, entry.path.name, entry.label)
    return ModelSource("folder", entry.path, None, entry.label)


def entry_backend(entry: CatalogEntry, requested: str = "auto", method_name: str | None = None) -> str:
    """The backend `entry` loads on (engine.backends.resolve_backend's choice, by the model and the method)."""
    return resolve_backend(entry_source(entry), method_name, requested).name


def entry_as_dict(entry: CatalogEntry) -> dict:
    """JSON-ready facts (for `specscope models list --json`; its memory: MemoryEstimate.as_dict)."""
    out = {name: getattr(entry, name) for name in entry.__slots__}
    out["path"] = str(entry.path)
    out["mtp_sidecar"] = None if entry.mtp_sidecar is None else str(entry.mtp_sidecar)
    out["assistant_file"] = None if entry.assistant_file is None else str(entry.assistant_file)
    out["usable"] = entry.usable
    own = own_drafter(entry)
    out["own_drafter"] = None if own is None else {"method": own[0], "words": own[1]}
    return out
