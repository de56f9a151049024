"""Method `mtp`: the target's own multi-token-prediction layers draft (DeepSeek-V3, arXiv 2412.19437 §2.2;
GLM-4.5/5, Qwen 3.5/3.6, Qwen3-Next, Step-3.5, MiMo-V2 and others ship them). An MTP layer reads the target's
last hidden state and the embedding of the next token, and predicts the token after it.

One drafter, written once against the target's head context (`LoadedModel.heads`, engine.backends.heads), on
either backend:
- llama.cpp (engine.backends.llama_cpp_heads): a GGUF with nextn layers inside (`<arch>.nextn_predict_layers`)
  or an `mtp-*.gguf` head beside it, run by llama.cpp's MTP context as its own `--spec-type draft-mtp` runs it.
  One head re-applies itself for k > 1; chained heads (Step-3.5) draft one token each, so k ≤ heads there. Qwen
  3.5/3.6 are hybrid (linear attention): their target rolls back through llama.cpp's per-token state snapshots.
- transformers (engine.backends.transformers_heads): transformers' `MtpModel` (loaded from the target's
  checkpoint, sharing its embedding and head), layers chained as `generate(use_mtp=True)` runs them, so k ≤ MTP
  layers. For Qwen 3.5/3.6 and Qwen3-Next transformers drops the `mtp.*` weights on load, so they are refused
  there with the way out (their GGUF on llama.cpp).

Touches nothing itself: the head context (its backend's) reads the target runner's states and keeps the head's
cache. The catalog helpers below read a described model's facts only; llama_server_args reads a head file's
header.
"""

from __future__ import annotations

from pathlib import Path

from engine.backends import LoadedModel, Runner
from engine.backends.transformers_heads import NO_TRANSFORMERS_MTP
from engine.core.config import check_backend
from engine.core.drafting import PickingDrafter, Proposal
from engine.core.errors import ConfigError
from engine.core.methods import MethodSpec

NAME = "mtp"


def check_mtp(target: LoadedModel, k: int, draft: str | None = None) -> int:
    """Refuse `mtp` on a backend that doesn't serve it, for a target without MTP layers, or with k beyond chained
    layers (what the target's backend says: LoadedModel.heads). The number of MTP layers (heads)."""
    check_backend(NAME, target.backend)
    return target.heads.check_mtp(target, k, draft)


class MtpDrafter(PickingDrafter):
    """Drafts with the target's MTP layers from the target runner's own hidden states, through the head context
    its backend makes (engine.backends.heads)."""

    name = NAME
    free_to_propose = False  # every drafted token is a pass of an MTP layer

    def __init__(self, target: LoadedModel, target_runner: Runner, draft: str | None = None) -> None:
        super().__init__()
        self.context = target.heads.mtp(target, target_runner, draft)
        self.note = self.context.note

    def begin(self, sampling, generator) -> None:
        super().begin(sampling, generator)
        self.context.begin()  # attached again before the prefill where it was released

    def prefill(self, context_ids: list[int]) -> None:
        self.context.prefill(context_ids)

    def propose(self, context_ids: list[int], k: int) -> Proposal:
        return self.proposal_from(self.context.draft, context_ids, k)

    def observe(self, n_accepted: int) -> None:
        pass  # the next propose() catches the head's cache up with what the target kept

    def release(self) -> None:
        """Free the head's caches; the next generation's begin() takes them up again."""
        self.context.release()


def build(spec, target: LoadedModel, draft, target_runner: Runner | None):
    if target_runner is None:
        raise ValueError(f"{NAME} drafts from the target's runner; pass target_runner")
    return MtpDrafter(target, target_runner, spec.draft)


# ------------------------------------------------------------------ a catalog entry that drafts for itself

# llama.cpp keeps no per-token snapshots of their recurrent state (its probe at load says so): plain decoding only
_PLAIN_ONLY_ON_LLAMA_CPP = ("qwen3next",)


def _on_llama_cpp(entry) -> bool:
    """A GGUF's MTP layers draft on llama.cpp (transformers would load it dequantized, with none usable)."""
    return entry.path.suffix.lower() == ".gguf"


def own_words(entry) -> str | None:
    """What the model list and the settings panel say of a catalog entry whose MTP layers (inside it, or an
    mtp-*.gguf head beside a GGUF) draft for it; None where it has none that would run."""
    n = entry.n_mtp_layers
    if not n:
        return None
    layers = f"{n} MTP layer{'s' if n > 1 else ''}"
    if not _on_llama_cpp(entry):
        if entry.model_type in NO_TRANSFORMERS_MTP:
            return None  # transformers drops them (check_mtp says so, with the way out)
        return f"drafts for itself: {layers} (method {NAME}, k ≤ {n})"
    from engine.backends.gguf_file import MTP_ARCHITECTURES, ONE_HEAD_ARCHITECTURES
    if entry.architecture not in MTP_ARCHITECTURES or entry.architecture in _PLAIN_ONLY_ON_LLAMA_CPP \
            or (n > 1 and entry.architecture in ONE_HEAD_ARCHITECTURES):
        return None  # no MTP graph for it, no rollback, or one layer of its kind run: mtp would be refused
    where = f" in {entry.mtp_sidecar.name}" if entry.mtp_sidecar is not None else ""
    return f"drafts for itself: {layers}{where} (llama.cpp{f', chained, k ≤ {n}' if n > 1 else ''})"


def no_mtp_layers(entry) -> str | None:
    """Why a described model can't use mtp on any backend: no MTP layers, none transformers loads, or (a GGUF)
    an architecture llama.cpp has no MTP graph for; None where it may (a GGUF of an MTP architecture may
    also take an mtp-*.gguf head as its draft)."""
    if own_words(entry) is not None:
        return None
    if _on_llama_cpp(entry):
        from engine.backends.gguf_file import MTP_ARCHITECTURES
        if entry.architecture in _PLAIN_ONLY_ON_LLAMA_CPP:
            return f"{entry.label} runs plain decoding only on llama.cpp (its recurrent state can't be rolled back)"
        if entry.architecture in MTP_ARCHITECTURES:
            return None
        return f"{entry.label} has no MTP layers (a {entry.architecture} model)"
    if entry.n_mtp_layers and entry.model_type in NO_TRANSFORMERS_MTP:
        return (f"transformers does not load {entry.label}'s MTP layers ({entry.model_type}); its GGUF drafts "
                "with them on llama.cpp")
    return f"{entry.label} has no MTP layers"


def llama_server_args(spec, engine) -> tuple[str, ...]:
    """llama-server's `--spec-type draft-mtp` with the same head and k (bench --compare-llama-server): `-md` names
    the head where it is a file of its own (`draft=`, else the mtp-*.gguf beside a target without MTP layers
    inside, as MtpHead picks it). It chains several heads as we do (head h drafts token h + 1, k ≤ heads);
    ConfigError where it has no equal: several layers of an architecture it runs one of (it aborts on them)."""
    from engine.backends.gguf_file import ONE_HEAD_ARCHITECTURES, read_header
    from engine.backends.llama_cpp_mtp import find_sidecar
    target = engine.target.native
    head = Path(spec.draft).expanduser().resolve() if spec.draft else None
    if head is None and not target.n_nextn:
        head = find_sidecar(target)
        if head is None:
            raise ConfigError(f"{engine.target.label} has no MTP layers inside and no mtp-*.gguf beside it")
    n_heads = read_header(head).nextn_layers if head is not None else target.n_nextn
    architecture = target.header.architecture
    if architecture in ONE_HEAD_ARCHITECTURES and n_heads != 1:
        raise ConfigError(f"llama-server runs one MTP layer for {architecture!r} models (it stops on an assertion "
                          f"with {n_heads})")
    return ("--spec-type", "draft-mtp", "--spec-draft-n-max", str(spec.k), "--spec-draft-n-min", "0",
            *(("-md", str(head)) if head is not None else ()))


def own_settings(entry) -> dict:
    """k capped at the layers where they chain, one drafted token each (transformers; several heads on
    llama.cpp); one head on llama.cpp re-applies itself, so any k."""
    chained = not _on_llama_cpp(entry) or entry.n_mtp_layers > 1
    return {"max_k": entry.n_mtp_layers} if chained else {}


METHOD = MethodSpec(
    name=NAME, label="MTP heads (the model drafts for itself)",
    description="The target's own multi-token-prediction layers draft (Qwen 3.5/3.6, GLM, DeepSeek-V3, Step-3.5 "
                "GGUFs on llama.cpp; DeepSeek-V3, GLM-4.5 on transformers).",
    reads_head=True, draft_help="on llama.cpp, an MTP head file (mtp-*.gguf); empty: the model's own layers or "
                                "the mtp-*.gguf beside it", head_file="mtp-*.gguf",
    check=lambda spec, target, draft: check_mtp(target, spec.k, spec.draft), build=build,
    needs_target_runner=True, cache_params=(),
    # transformers drafts one token per MTP layer (and loads them on every call)
    hf_generate_kwargs=lambda spec, engine: {"use_mtp": True},
    own_settings=lambda entry, pairs: own_settings(entry),
    own_drafter=lambda entry, pairs: own_words(entry), why_unusable=lambda entry, pairs: no_mtp_layers(entry),
    llama_server_args=llama_server_args)
