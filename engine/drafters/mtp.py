"""Method `mtp`: the target's own multi-token-prediction layers draft (DeepSeek-V3, arXiv 2412.19437 §2.2;
GLM-4.5/5, Qwen 3.5/3.6, Qwen3-Next, Step-3.5, MiMo-V2 and others ship them). An MTP layer reads the target's
last hidden state and the embedding of the next token, and predicts the token after it.

Two backends, two drafters:
- llama.cpp (`LlamaMtpDrafter`): a GGUF with nextn layers inside (`<arch>.nextn_predict_layers`) or an
  `mtp-*.gguf` head beside it, run by llama.cpp's MTP context (engine.backends.llama_cpp_mtp) as its own
  `--spec-type draft-mtp` runs it. One head re-applies itself for k > 1; chained heads (Step-3.5) draft one
  token each, so k ≤ heads there. Qwen 3.5/3.6 are hybrid (linear attention): their target rolls back through
  llama.cpp's per-token state snapshots.
- transformers (`MtpDrafter`): transformers' `MtpModel` (loaded from the target's checkpoint, sharing its
  embedding and head), layers chained as `generate(use_mtp=True)` runs them, so k ≤ MTP layers. It serves the
  architectures `MtpModel` converts (DeepSeek-V3, GLM-4.5 MoE, Mellum, Step-3.7, …); for Qwen 3.5/3.6 and
  Qwen3-Next transformers drops the `mtp.*` weights on load, so they are refused there with the way out (their
  GGUF on llama.cpp). The drafter keeps the MTP layers' own KV cache (`MtpCache`) in step with our rollbacks: an
  entry of layer i at position p read the tokens up to p+i+1, so it stays valid while those tokens are still
  the context; the rest is recomputed each round.

Touches the target's weights read-only, the target runner's hidden states and the MTP head's own cache.
"""

from __future__ import annotations

from engine.backends import LoadedModel, Runner, common_prefix_length
from engine.core.config import check_backend
from engine.core.drafting import PickingDrafter, Proposal
from engine.core.errors import ConfigError
from engine.core.methods import MethodSpec

NAME = "mtp"


# transformers 5.24 drops these models' `mtp.*` weights on load (MtpModel does not convert them)
_NO_TRANSFORMERS_MTP = ("qwen3_5", "qwen3_5_moe", "qwen3_5_text", "qwen3_5_moe_text", "qwen3_next")


def mtp_layer_count(target: LoadedModel) -> int:
    """How many MTP layers the target's config declares (0: none)."""
    if target.model is None:
        return 0
    config = target.model.config.get_text_config()
    return int(getattr(config, "num_mtp_layers", None) or getattr(config, "mtp_num_hidden_layers", None) or 0)


def check_mtp(target: LoadedModel, k: int, draft: str | None = None) -> int:
    """Refuse `mtp` for a target without MTP layers, on another backend, or with k beyond chained layers."""
    check_backend(NAME, target.backend)
    if target.backend == "llama.cpp":
        return _llama_head(target, draft).n_heads if k <= 1 else _check_llama_k(_llama_head(target, draft), k)
    model_type = getattr(target.model.config, "model_type", "") if target.model is not None else ""
    if model_type in _NO_TRANSFORMERS_MTP:
        raise ConfigError(f"method {NAME}: transformers does not load {target.label}'s MTP layers ({model_type}: "
                          "its mtp.* weights are dropped); run its GGUF on llama.cpp, where they draft "
                          "(--backend llama.cpp), or use another method")
    layers = mtp_layer_count(target)
    if layers < 1:
        raise ConfigError(f"method {NAME} needs a model that carries multi-token-prediction layers; {target.label} "
                          "has none in its config (num_mtp_layers): use another method")
    if k > layers:
        raise ConfigError(f"method {NAME} drafts at most {layers} token{'s' if layers > 1 else ''} a round with "
                          f"{target.label} (one per MTP layer, chained), got k={k}")
    return layers


def load_mtp_model(target: LoadedModel):
    """transformers' MtpModel with the MTP weights of the target's checkpoint; ConfigError when it has none."""
    import torch
    from transformers.modeling_layers import MtpModel
    try:
        mtp = MtpModel.from_pretrained(target.model, device_map={"": target.device})
    except (RuntimeError, ValueError, OSError, KeyError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise ConfigError(f"method {NAME}: {target.label} declares {mtp_layer_count(target)} MTP layer(s) but its "
                          f"checkpoint has no usable MTP weights ({first})") from None
    if not all(bool(torch.isfinite(p).all()) for p in mtp.parameters()):
        # a checkpoint key the conversion did not map leaves its tensor uninitialized instead of missing
        raise ConfigError(f"method {NAME}: the MTP weights of {target.label} did not load cleanly (non-finite "
                          "values); its checkpoint layout is not one transformers' MtpModel converts")
    return mtp.eval()


class MtpDrafter(PickingDrafter):
    """Drafts k ≤ (MTP layers) tokens per round from the target's last hidden states (engine.backends Runner
    recording them), one chained MTP layer per token."""

    name = NAME
    free_to_propose = False  # every drafted token is a pass of one MTP layer
    note: str | None = None  # nothing to say at the start of a generation

    def __init__(self, target: LoadedModel, target_runner: Runner) -> None:
        super().__init__()
        self.n_layers = check_mtp(target, 1)
        self.mtp = load_mtp_model(target)
        self._mtp_config = target.model.config.get_mtp_config()
        self.cache = self._new_cache()
        self.target_runner = target_runner
        target_runner.record_outputs()
        self.device = target.device
        self._seen: list[int] = []  # the context + drafts the MTP cache entries were computed with

    def _new_cache(self):
        from transformers.cache_utils import MtpCache
        cache = MtpCache(config=self._mtp_config)
        cache.activate_past_recording()  # sliding MTP layers can then be rolled back too
        return cache

    def _layer_length(self, layer: int) -> int:
        return int(self.cache.get_seq_length(layer)) if layer < len(self.cache.layers) else 0

    def _start(self, context_ids: list[int], k: int) -> int:
        """The first position every layer used this round recomputes: entries of layer i at position p stay
        valid while the tokens up to p+i+1 are unchanged; crop every used layer back to that position."""
        same = common_prefix_length(self._seen, context_ids)
        start = min(min(self._layer_length(i), max(0, same - i - 1)) for i in range(k))
        start = min(start, len(context_ids) - 2)  # the last position is always run: its output drafts
        for layer in range(min(k, len(self.cache.layers))):
            self.cache.layers[layer].crop(-(self._layer_length(layer) - start))
        return start

    def propose(self, context_ids: list[int], k: int) -> Proposal:
        import torch
        k = min(k, self.n_layers)
        n_cached = len(context_ids) - 1  # the target holds every id but the last (its own token)
        if k < 1 or n_cached < 1:
            return Proposal.empty()
        start = self._start(context_ids, k)
        hidden = self.target_runner.hidden.rows(start) if self.target_runner.hidden is not None else None
        if hidden is None or hidden.shape[0] != n_cached - start:
            raise RuntimeError("the target runner did not keep the hidden states MTP drafting needs")
        hidden = hidden.unsqueeze(0)
        sequence = list(context_ids)
        draft_ids, rows = [], []
        for layer in range(k):
            # layer `layer` at position p reads the token layer+1 ahead, at RoPE position p+layer+1
            tokens = torch.tensor([sequence[start + layer + 1:n_cached + layer + 1]], dtype=torch.long,
                                  device=self.device)
            positions = torch.arange(start + layer + 1, n_cached + layer + 1, device=self.device).unsqueeze(0)
            hidden = self.mtp.forward_layer(layer, hidden, positions, self.cache, input_ids=tokens)
            logits = self.mtp._project_to_logits(hidden[:, -1:, :])[0, -1].float()
            token, row = self.pick(logits)
            draft_ids.append(token)
            rows.append(row)
            sequence.append(token)
        self._seen = sequence
        return self.proposal(draft_ids, rows)

    def observe(self, n_accepted: int) -> None:
        pass  # the next propose() compares the new context with what the MTP cache saw

    def release(self) -> None:
        self.cache = self._new_cache()
        self._seen = []


# ------------------------------------------------------------------ llama.cpp

_heads: dict[tuple, object] = {}  # (target, sidecar) → MtpHead: checked once, shared by check and build


def _llama_head(target: LoadedModel, draft: str | None):
    """The target's MTP head on llama.cpp (its own layers, the sidecar beside it or `draft`), loaded once."""
    from engine.backends.llama_cpp import mtp_bindings
    from engine.backends.llama_cpp_mtp import MtpHead
    mtp_bindings()  # the bindings, checked every time: one line naming the version where they are missing
    key = (id(target.native), draft)
    head = _heads.get(key)
    if head is None or head.target is not target.native:
        head = MtpHead(target.native, draft)
        _heads.clear()  # one target at a time: an earlier one's head (and a sidecar's weights) go
        _heads[key] = head
    return head


def _check_llama_k(head, k: int) -> int:
    if head.chained and k > head.n_heads:
        raise ConfigError(f"method {NAME}: {head.label} chains {head.n_heads} MTP heads, one drafted token each, "
                          f"so k is at most {head.n_heads}, got k={k}")
    return head.n_heads


class LlamaMtpDrafter(PickingDrafter):
    """Drafts with the target's MTP head on llama.cpp, from the hidden states of the target runner."""

    name = NAME
    free_to_propose = False  # every drafted token is a pass of the MTP layer

    def __init__(self, target: LoadedModel, target_runner: Runner, draft: str | None) -> None:
        super().__init__()
        self._target, self._runner, self._draft = target, target_runner, draft
        self._attach()
        where = f"{self.head.sidecar.name} beside the model" if self.head.sidecar else "inside the model"
        self.note = (f"MTP on llama.cpp: {self.head.n_heads} chained heads ({where}), one drafted token each"
                     if self.head.chained else
                     f"MTP on llama.cpp: 1 head ({where}), re-applied on its own guess for each drafted "
                     "token after the first")

    def _attach(self) -> None:
        """The head and its context, reading every pass's states of the target runner from now on."""
        from engine.backends.llama_cpp_mtp import MtpContext
        self.head = _llama_head(self._target, self._draft)
        self.context = MtpContext(self.head, self._runner)

    def begin(self, sampling, generator) -> None:
        super().begin(sampling, generator)
        if self.context is None:  # released since the last generation: attached again before the prefill
            self._attach()

    def propose(self, context_ids: list[int], k: int) -> Proposal:
        return self.proposal_from(self.context.draft, context_ids, k)

    def observe(self, n_accepted: int) -> None:
        pass  # the next propose() catches the head's cache up with what the target kept

    def release(self) -> None:
        """Free the head's context (and a sidecar's weights) and stop reading the target's states; the next
        generation's begin() attaches them again."""
        if self.context is not None:
            self.context.release()
            self.context = None
        _heads.clear()


def build(spec, target: LoadedModel, draft, target_runner: Runner | None):
    if target_runner is None:
        raise ValueError(f"{NAME} drafts from the target's runner; pass target_runner")
    if target.backend == "llama.cpp":
        return LlamaMtpDrafter(target, target_runner, spec.draft)
    return MtpDrafter(target, target_runner)


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
        if entry.model_type in _NO_TRANSFORMERS_MTP:
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
    if entry.n_mtp_layers and entry.model_type in _NO_TRANSFORMERS_MTP:
        return (f"transformers does not load {entry.label}'s MTP layers ({entry.model_type}); its GGUF drafts "
                "with them on llama.cpp")
    return f"{entry.label} has no MTP layers"


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
    own_drafter=lambda entry, pairs: own_words(entry), why_unusable=lambda entry, pairs: no_mtp_layers(entry))
