"""The model manager's logic, in plain Python (no Qt): what it lists, checks and says.

The catalog look-ups it runs on background threads (listing with memory estimates, the pair check, the draft
list the settings panel offers), their answers (`PairVerdict`, `DraftChoices`), the words of each table row and
of each draft found, the free-memory line, a download's progress and the token note. The window
(gui.views.dialogs.models) asks and renders; all the work is `engine.models` (catalog, pairing, memory, hub).

May touch: engine.models (public functions only), engine.backends.device (which devices exist), engine.models.secrets
(whether a token is set, never the token's text). Never Qt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from engine.core.compat import CROSS_DRAFT_WORDS, CROSS_TOKENIZER_WORDS
from engine.core.errors import SpecScopeError
from engine.models import catalog, pairing, pairs, secrets
from engine.models.memory import DEFAULT_CONTEXT_TOKENS, estimate_memory_on
from engine.models.pairs import DRAFT_IS_TARGET

DEVICES = ("auto", "cpu", "cuda", "mps")  # and cuda:N for each of several CUDA devices (device_choices)
DTYPES = ("auto", "float32", "bfloat16", "float16")
KIND_LABELS = {"built-in": "built in", "hub-cache": "HF cache", "folder": "folder", "gguf": "GGUF file"}


def plural(n: int, word: str) -> str:
    """'1 model', '3 models'."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


@dataclass(frozen=True, slots=True)
class PairVerdict:
    target: str
    draft: str | None
    compatible: bool | None  # None: no draft chosen
    explanation: str
    drafts: tuple  # engine.models.pairing.DraftCandidate for the target: same tokenizer first, then another


def device_choices() -> tuple[str, ...]:
    """The devices the manager offers: DEVICES, and cuda:0, cuda:1, … where torch sees more than one CUDA device
    (asked without making a CUDA context)."""
    import torch
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    extra = tuple(f"cuda:{i}" for i in range(count)) if count > 1 else ()
    return DEVICES[:3] + extra + DEVICES[3:]


def device_label(name: str) -> str:
    """What the device list says for a device name."""
    fixed = {"auto": "auto (best available)", "cpu": "CPU", "cuda": "CUDA (NVIDIA GPU)", "mps": "MPS (Apple GPU)"}
    return fixed.get(name) or f"CUDA GPU {name.partition(':')[2]} ({name})"


def _llama_cpp_gpus() -> set[str]:
    """The device names ("cuda", "mps") the installed llama.cpp can put layers on (a CUDA or Metal build),
    whatever torch was built for; empty for a CPU build or where it is not installed."""
    try:
        from engine.backends import llama_cpp
        found = llama_cpp.accelerators(llama_cpp.library())
    except Exception:  # not installed, or it fails to start: no GPU from it
        return set()
    kinds = {name.split(" ")[0].lower() for name in found}
    return {"mps" if kind == "metal" else kind for kind in kinds}


def device_availability(backend: str = "auto") -> dict[str, bool]:
    """Which devices this machine has: what engine.backends.device.resolve_device (the one resolver) accepts, and,
    where GGUF models may run on llama.cpp, the GPU its own build offloads to (a CPU torch beside a CUDA llama.cpp)."""
    from engine.core.errors import DeviceError
    from engine.backends.device import resolve_device

    available = {}
    llama = _llama_cpp_gpus() if backend in ("auto", "llama.cpp") else set()
    for name in device_choices():
        try:
            resolve_device(name)
            available[name] = True
        except DeviceError:
            available[name] = name in llama
    return available


def list_job(extra: list[str], device: str, dtype: str, backend: str = "auto"):
    entries = catalog.list_models(extra)
    return entries, estimates_job(entries, device, dtype, backend)(), device_availability(backend)


def estimates_job(entries, device: str, dtype: str, backend: str = "auto") -> Callable[[], dict]:
    """Each entry's memory estimate on the chosen backend (a GGUF on llama.cpp stays quantized)."""
    def run() -> dict:
        out = {}
        for entry in entries:
            try:
                out[entry.name] = estimate_memory_on(entry, backend, device,
                                                     None if dtype == "auto" else dtype)
            except (SpecScopeError, RuntimeError, ValueError):
                out[entry.name] = None
        return out
    return run


def pair_job(target, draft, candidates) -> Callable[[], PairVerdict]:
    def run() -> PairVerdict:
        drafts = tuple(pairing.compatible_drafts(target, candidates))
        if draft is None:
            return PairVerdict(target.name, None, None, "", drafts)
        if pairing.same_model(target, draft):
            return PairVerdict(target.name, draft.name, False, DRAFT_IS_TARGET, drafts)
        try:
            difference = pairing.draft_difference(target, draft)
        except SpecScopeError as exc:
            return PairVerdict(target.name, draft.name, False, f"The pair cannot be checked: {exc}", drafts)
        note = ""
        if not pairing.is_smaller(draft, target):
            note = " It is not smaller than the target, though, so it will not make replies faster."
        if difference is not None:  # the draft-model method drafts through text
            return PairVerdict(target.name, draft.name, True, _cross_words(target, draft, difference) + note, drafts)
        return PairVerdict(target.name, draft.name, True,
                           f"These two share one tokenizer: {draft.label} can draft for {target.label}.{note}",
                           drafts)
    return run


def _cross_words(target, draft, difference) -> str:
    """The verdict on a pair of different tokenizers: drafting through text, and their shared vocabulary."""
    from engine.drafters.cross_tokenizer import shared_vocabulary_words
    try:
        shared = shared_vocabulary_words(pairing.load_tokenizer(target), pairing.load_tokenizer(draft))
    except SpecScopeError as exc:
        shared = f"Their shared vocabulary could not be read: {exc}"
    return (f"{CROSS_TOKENIZER_WORDS[0].upper()}{CROSS_TOKENIZER_WORDS[1:]}: {draft.label} can draft for "
            f"{target.label} (first difference: {difference}). {shared}")


def draft_list_words(candidate) -> tuple[str, str]:
    """The Models window's line for a draft found for the target (engine.models.pairing.DraftCandidate) and
    its tooltip: a draft of another tokenizer says it drafts through text."""
    entry = candidate.entry
    text = f"{entry.label}  ({catalog.format_parameters(entry.n_parameters)} parameters)"
    if candidate.same_tokenizer:
        return text, f"{entry.label} shares the target's tokenizer. Double-click to use it as the draft."
    return (f"{text} — {CROSS_DRAFT_WORDS}",
            f"{entry.label} has {CROSS_DRAFT_WORDS}. Double-click to use it as the draft.")


@dataclass(frozen=True, slots=True)
class DraftChoices:
    """What the settings panel's draft list offers for a target (gui.views.chat.controls.set_draft_choices)."""

    target: str
    names: tuple[str, ...]  # smaller, installed: those of the target's tokenizer first, then those of another
    target_aliases: frozenset[str]  # the target's own names: a draft that is one of them is the target itself
    note: str  # when none is installed: why, and the known-good draft
    download: str | None  # the known-good draft's hub id, to download
    cross_tokenizer: frozenset[str] = frozenset()  # those of `names` with another tokenizer (drafted through text)


def draft_choices(target_name: str, added: list[str]) -> DraftChoices:
    """The smaller drafts installed for `target_name`, those of its tokenizer first, then those of another
    (loads tokenizers, never weights); when there is none, engine.models.pairs' known-good draft for its family."""
    target = catalog.describe_name(target_name)
    entries = catalog.list_models(added)
    drafts = pairing.compatible_drafts(target, entries)
    aliases = {target_name, target.name, str(target.path)} | {e.name for e in entries if pairing.same_model(e, target)}
    if drafts:
        cross = frozenset(d.entry.name for d in drafts if not d.same_tokenizer)
        return DraftChoices(target_name, tuple(d.entry.name for d in drafts), frozenset(aliases), "", None, cross)
    names = (target_name, target.name, target.label, target.repo_id)
    known, bigger = pairs.pairs_for(*names), pairs.pairs_drafted_by(*names)
    download = known[0].draft if known else bigger[0].targets[0] if bigger else None  # the draft, or its target
    advice = pairs.suggestion(*names) or "Prompt lookup and early exit need no draft model."
    return DraftChoices(target_name, (), frozenset(aliases),
                        f"No compatible, smaller draft is installed for {target.label}. {advice}", download)


@dataclass(frozen=True, slots=True)
class ModelRow:
    """One model's row in the table, in words."""

    values: tuple[str, ...]  # one per column: model, source, architecture, parameters, size, stored as,
    #                          tokenizer, memory needed, status
    tooltip: str  # the model's cell: its label and path, and its own drafter
    memory_tip: str  # the estimate's parts
    too_big: bool  # the estimate says it does not fit
    status: str


def model_row(entry, estimate) -> ModelRow:
    """The table row of a catalog entry with its memory estimate (None: not estimated)."""
    tokenizer = " · ".join(x for x in (entry.tokenizer_family,
                                       f"{entry.vocab_size:,} tokens" if entry.vocab_size else None) if x)
    memory, memory_tip, too_big = "?", "", False
    if estimate is not None:
        memory = catalog.format_bytes(estimate.total_bytes)
        memory_tip = (f"on {estimate.device} in {estimate.dtype}: weights "
                      f"{catalog.format_bytes(estimate.weights_bytes)}, KV cache for "
                      f"{estimate.context_tokens:,} tokens {catalog.format_bytes(estimate.kv_cache_bytes)}, "
                      f"runtime {catalog.format_bytes(estimate.overhead_bytes)}; free "
                      f"{catalog.format_bytes(estimate.free_bytes)}")
        if estimate.fits is False:
            too_big = True
            memory += " — too big"
    status = "ready" if entry.usable else (entry.problem or "incomplete")
    if entry.usable and entry.needs_remote_code:
        status = "ready · runs its own code (asks first)"
    elif entry.usable and entry.weights_format == "pickle":
        status = "ready · pickle weights (asks first)"
    own = catalog.own_drafter(entry)
    if own is not None:
        status += f" · this model {own[1]}"
    values = (entry.label, KIND_LABELS.get(entry.kind, entry.kind), entry.architecture or "?",
              catalog.format_parameters(entry.n_parameters), catalog.format_bytes(entry.size_bytes),
              entry.dtype or "?", tokenizer or "?", memory, status)
    tooltip = f"{entry.label}\n{entry.path}" + (f"\nThis model {own[1]}." if own else "")
    return ModelRow(values, tooltip, memory_tip, too_big, status)


def free_memory_words(free, backend: str) -> str:
    """The line above the table: the free memory an estimate saw, and on which backend the estimates are."""
    where = "RAM" if free.device == "cpu" else free.device
    on = {"auto": "each on its backend", "llama.cpp": "on llama.cpp (GGUF quantized)"}.get(
        backend, f"on transformers in {free.dtype}")
    return (f"Free {where}: {catalog.format_bytes(free.free_bytes)} · estimates {on}, with a KV cache for up to "
            f"{DEFAULT_CONTEXT_TOKENS:,} tokens")


def progress_words(progress) -> str:
    """A download's progress (engine.models.hub.DownloadProgress) in one line."""
    current = f" · {progress.current_file}" if progress.current_file else ""
    return (f"{catalog.format_bytes(progress.bytes_done)} of {catalog.format_bytes(progress.bytes_total)} · file "
            f"{progress.files_done}/{progress.files_total}{current}")


def token_note() -> str:
    """Whether a Hugging Face token is set and where it is kept (never the token)."""
    store = secrets.default_store()
    where = "the system keyring" if store.storage is secrets.TokenStorage.KEYRING else "this session only"
    return (f"Uses your Hugging Face token ({where}) for gated and private models." if store.has_token() else
            "No Hugging Face token set: public models only (add one in Settings).")
