"""What models are on this machine and what they are: the built-in default, the local Hugging Face cache,
user-added folders and .gguf files, each a `CatalogEntry` of facts read from metadata only (a folder's:
engine.models.folder_facts; a GGUF header's: engine.models.gguf_facts, cached), with the drafters a model
brings along (engine.models.own_drafters); no weights are loaded. Memory estimates are engine.models.memory's,
which drafts fit a target engine.models.pairing's.

Everything here is best effort and cheap: a model whose facts cannot be read is still listed, with the
missing facts as None and a `problem` saying why it cannot be used. Reads files through those modules; names
come from engine.models.sources, file checks from engine.backends.source.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable

from engine.backends import resolve_backend
from engine.backends.source import ModelSource, converted_folder, gguf_problem
from engine.core.errors import SpecScopeError
from engine.models.folder_facts import folder_facts
from engine.models.gguf_facts import facts_file, gguf_facts
from engine.models.own_drafters import gguf_drafting, own_drafter
from engine.models.sources import DEFAULT_LABEL, hub_cache_dir, resolve_source

# own_drafter is engine.models.own_drafters'; named here too, as every listing shows it beside the facts
__all__ = ["CatalogEntry", "list_models", "describe_default", "list_hub_cache", "describe_name", "describe_path",
           "own_drafter", "entry_source", "entry_backend", "entry_as_dict", "format_bytes", "format_parameters"]


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
    if not facts_file(gguf_path).is_file() and (converted / "config.json").is_file():
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


def _describe_folder(folder: Path, *, name: str, label: str, kind: str, with_tokenizer: bool,
                     **extra) -> CatalogEntry:
    return CatalogEntry(name=name, label=label, kind=kind, path=folder, size_bytes=_size(folder),
                        **folder_facts(folder, with_tokenizer=with_tokenizer), **extra)


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
    drafting = gguf_drafting(path, facts)
    return CatalogEntry(name=name, label=label, kind=kind, path=path, architecture=facts.get("architecture"),
                        model_type=facts.get("architecture"), n_parameters=facts.get("n_parameters"),
                        size_bytes=_size(path), dtype=facts.get("dtype"),
                        tokenizer_family=facts.get("tokenizer_family"), vocab_size=facts.get("vocab_size"),
                        n_layers=facts.get("n_layers"), n_kv_heads=facts.get("n_kv_heads"),
                        head_dim=facts.get("head_dim"), context_length=facts.get("context_length"),
                        n_mtp_layers=drafting.n_mtp_layers, mtp_sidecar=drafting.mtp_sidecar,
                        assistant_file=drafting.assistant_file, weights_format="gguf", problem=drafting.problem,
                        **extra)


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
