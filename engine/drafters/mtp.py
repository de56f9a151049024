"""Method `mtp`: the target's own multi-token-prediction layers draft (DeepSeek-V3, arXiv 2412.19437 §2.2;
GLM-4.5, Qwen 3.5 and others ship them in the checkpoint). MTP layer i reads the target's last hidden state
chained through layers 0…i−1 and the embedding of the token i+1 ahead, and predicts the token i+2 ahead; the
layers run chained, one drafted token each, as transformers' `generate(use_mtp=True)` runs them. So k is at
most the number of MTP layers (a model with one MTP layer drafts one token a round).

The layers and their weights are transformers' `MtpModel` (loaded from the target's checkpoint, sharing its
embedding and head); the loop, the verification and the events are ours. The drafter keeps the MTP layers'
own KV cache (`MtpCache`) in step with our rollbacks: an entry of layer i at position p read the tokens up to
p+i+1, so it stays valid while those tokens are still the context; the rest is recomputed each round.

Transformers backend only. Touches the target's torch modules read-only, the target runner's hidden states
(`TransformersRunner.record_outputs`) and its own MTP cache.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.backends import LoadedModel, Runner, common_prefix_length
from engine.core.config import SamplingConfig, check_backend
from engine.core.drafting import Proposal
from engine.core.errors import ConfigError
from engine.core.methods import MethodSpec

if TYPE_CHECKING:
    import torch

NAME = "mtp"


def mtp_layer_count(target: LoadedModel) -> int:
    """How many MTP layers the target's config declares (0: none)."""
    if target.model is None:
        return 0
    return int(getattr(target.model.config.get_text_config(), "num_mtp_layers", None) or 0)


def check_mtp(target: LoadedModel, k: int) -> int:
    """Refuse `mtp` for a target without MTP layers, on another backend, or with k beyond its layers."""
    check_backend(NAME, target.backend)
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


class MtpDrafter:
    """Drafts k ≤ (MTP layers) tokens per round from the target's last hidden states (engine.backends Runner
    recording them), one chained MTP layer per token."""

    name = NAME
    free_to_propose = False  # every drafted token is a pass of one MTP layer
    note: str | None = None  # nothing to say at the start of a generation

    def __init__(self, target: LoadedModel, target_runner: Runner) -> None:
        self.n_layers = check_mtp(target, 1)
        self.mtp = load_mtp_model(target)
        self._mtp_config = target.model.config.get_mtp_config()
        self.cache = self._new_cache()
        self.target_runner = target_runner
        target_runner.record_outputs()
        self.device = target.device
        self._seen: list[int] = []  # the context + drafts the MTP cache entries were computed with
        self._sampling = SamplingConfig()
        self._generator: torch.Generator | None = None

    def _new_cache(self):
        from transformers.cache_utils import MtpCache
        cache = MtpCache(config=self._mtp_config)
        cache.activate_past_recording()  # sliding MTP layers can then be rolled back too
        return cache

    def begin(self, sampling: SamplingConfig, generator: torch.Generator) -> None:
        self._sampling = sampling
        self._generator = generator

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

    def _pick(self, logits: torch.Tensor) -> tuple[int, torch.Tensor]:
        """A drafted token and the row it was drawn from (logits when greedy: softmaxed once, later)."""
        import torch

        from engine.core.sampling import probabilities, sample
        if self._sampling.greedy:
            return int(torch.argmax(logits)), logits
        probs = probabilities(logits, self._sampling)
        return int(sample(probs, self._generator)), probs

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
            token, row = self._pick(logits)
            draft_ids.append(token)
            rows.append(row)
            sequence.append(token)
        self._seen = sequence
        stacked = torch.stack(rows)
        return Proposal(draft_ids, torch.softmax(stacked, dim=-1) if self._sampling.greedy else stacked)

    def observe(self, n_accepted: int) -> None:
        pass  # the next propose() compares the new context with what the MTP cache saw

    def release(self) -> None:
        self.cache = self._new_cache()
        self._seen = []


def build(spec, target: LoadedModel, draft, target_runner: Runner | None) -> MtpDrafter:
    if target_runner is None:
        raise ValueError(f"{NAME} drafts from the target's runner; pass target_runner")
    return MtpDrafter(target, target_runner)


METHOD = MethodSpec(
    name=NAME, label="MTP heads (the model drafts for itself)",
    description="The target's own multi-token-prediction layers draft, chained as transformers runs them: one "
                "token per MTP layer, so k is at most the number of MTP layers (DeepSeek-V3, GLM-4.5: 1).",
    backends=("transformers",),
    why_not="llama-cpp-python binds llama.cpp's MTP context, but feeding it the target's hidden state is not "
            "wired here yet",
    check=lambda spec, target, draft: check_mtp(target, spec.k), build=build, needs_target_runner=True,
    # transformers drafts one token per MTP layer (and loads them on every call)
    hf_generate_kwargs=lambda spec, engine: {"use_mtp": True},
    own_settings=lambda entry, pairs: {"max_k": entry.n_mtp_layers},
    own_drafter=lambda entry, pairs: (f"drafts for itself: {entry.n_mtp_layers} MTP layer"
                                      f"{'s' if entry.n_mtp_layers > 1 else ''} (method {NAME}, "
                                      f"k ≤ {entry.n_mtp_layers})") if entry.n_mtp_layers else None)
