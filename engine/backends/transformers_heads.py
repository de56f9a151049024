"""Heads on a transformers target (engine.backends.heads): its multi-token-prediction layers, run by
transformers' `MtpModel` (DeepSeek-V3 arXiv 2412.19437 §2.2, GLM-4.5 MoE, Mellum, Step-3.7, …), and a Gemma 4
assistant (`Gemma4AssistantForCausalLM`), which cross-attends to the target's shared key/value states as
transformers' `SinglePositionMultiTokenCandidateGenerator` runs it.

MTP layers chain as `generate(use_mtp=True)` runs them, one drafted token each, so k ≤ MTP layers. Their own KV
cache (`MtpCache`) is kept in step with our rollbacks: an entry of layer i at position p read the tokens up to
p+i+1, so it stays valid while those tokens are still the context; the rest is recomputed each round. For Qwen
3.5/3.6 and Qwen3-Next transformers drops the `mtp.*` weights on load, so they are refused with the way out
(their GGUF on llama.cpp).

An assistant has no KV cache of its own: each step reads the embedding of the last token beside a hidden state
(the target's for the first step, its own after), always at the position of the context's last token.

Touches the target's torch modules read-only, the MTP layers' own cache, the assistant's module and the target
runner's kept outputs (Runner.record_outputs / hidden_rows / shared_kv_states). torch and transformers are
imported where a head runs, not with this module. No Qt.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from engine.backends import TRANSFORMERS
from engine.backends.heads import HeadDrafting
from engine.core.errors import ConfigError

if TYPE_CHECKING:
    import torch

    from engine.backends import LoadedModel
    from engine.core.runner import Runner

# transformers 5.24 drops these models' `mtp.*` weights on load (MtpModel does not convert them)
NO_TRANSFORMERS_MTP = ("qwen3_5", "qwen3_5_moe", "qwen3_5_text", "qwen3_5_moe_text", "qwen3_next")
ASSISTANT_CLASSES = ("Gemma4AssistantForCausalLM", "Gemma4UnifiedAssistantForCausalLM")
TARGET_PREFIXES = ("Gemma4", "Gemma3n")  # the targets whose forward returns shared K/V states


def mtp_layer_count(target: "LoadedModel") -> int:
    """How many MTP layers the target's config declares (0: none)."""
    if target.model is None:
        return 0
    config = target.model.config.get_text_config()
    return int(getattr(config, "num_mtp_layers", None) or getattr(config, "mtp_num_hidden_layers", None) or 0)


def load_mtp_model(target: "LoadedModel"):
    """transformers' MtpModel with the MTP weights of the target's checkpoint; ConfigError when it has none."""
    import torch
    from transformers.modeling_layers import MtpModel
    try:
        mtp = MtpModel.from_pretrained(target.model, device_map={"": target.device})
    except (RuntimeError, ValueError, OSError, KeyError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise ConfigError(f"method mtp: {target.label} declares {mtp_layer_count(target)} MTP layer(s) but its "
                          f"checkpoint has no usable MTP weights ({first})") from None
    if not all(bool(torch.isfinite(p).all()) for p in mtp.parameters()):
        # a checkpoint key the conversion did not map leaves its tensor uninitialized instead of missing
        raise ConfigError(f"method mtp: the MTP weights of {target.label} did not load cleanly (non-finite "
                          "values); its checkpoint layout is not one transformers' MtpModel converts")
    return mtp.eval()


def is_assistant(model: "LoadedModel") -> bool:
    """Whether `model` is a Gemma 4 assistant drafter (by its torch module's class)."""
    return model.model is not None and type(model.model).__name__ in ASSISTANT_CLASSES


class MtpLayers:
    """The target's MTP layers drafting k ≤ (MTP layers) tokens per round from the target runner's last hidden
    states, one chained layer per token (engine.backends.heads.HeadContext)."""

    note: str | None = None  # nothing to say at the start of a generation

    def __init__(self, target: "LoadedModel", target_runner: "Runner", n_layers: int) -> None:
        self.n_layers = n_layers
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
        from engine.backends import common_prefix_length
        same = common_prefix_length(self._seen, context_ids)
        start = min(min(self._layer_length(i), max(0, same - i - 1)) for i in range(k))
        start = min(start, len(context_ids) - 2)  # the last position is always run: its output drafts
        for layer in range(min(k, len(self.cache.layers))):
            self.cache.layers[layer].crop(-(self._layer_length(layer) - start))
        return start

    def begin(self) -> None:
        pass  # the target runner keeps its states from the drafter's start on

    def prefill(self, context_ids: list[int]) -> None:
        pass  # the first draft() runs over what it needs of the target's states

    def draft(self, context_ids: list[int], k: int, choose: Callable[["torch.Tensor"], int]
              ) -> tuple[list[int], list["torch.Tensor"]]:
        import torch

        from engine.backends.device import device_ids
        k = min(k, self.n_layers)
        n_cached = len(context_ids) - 1  # the target holds every id but the last (its own token)
        if k < 1 or n_cached < 1:
            return [], []
        start = self._start(context_ids, k)
        hidden = self.target_runner.hidden_rows(start)  # (n_cached − start, hidden)
        if hidden is None or hidden.shape[0] != n_cached - start:
            raise RuntimeError("the target runner did not keep the hidden states MTP drafting needs")
        hidden = hidden.unsqueeze(0)
        sequence = list(context_ids)
        draft_ids, rows = [], []
        for layer in range(k):
            # layer `layer` at position p reads the token layer+1 ahead, at RoPE position p+layer+1
            tokens = device_ids(sequence[start + layer + 1:n_cached + layer + 1], self.device)
            positions = torch.arange(start + layer + 1, n_cached + layer + 1, device=self.device).unsqueeze(0)
            hidden = self.mtp.forward_layer(layer, hidden, positions, self.cache, input_ids=tokens)
            logits = self.mtp._project_to_logits(hidden[:, -1:, :])[0, -1].float()  # (vocab,)
            token = choose(logits)
            draft_ids.append(token)
            rows.append(logits)
            sequence.append(token)
        self._seen = sequence
        return draft_ids, rows

    def release(self) -> None:
        self.cache = self._new_cache()
        self._seen = []


class AssistantStates:
    """A Gemma 4 assistant drafting k tokens per round over the target runner's shared K/V states
    (engine.backends.heads.HeadContext). It keeps nothing of its own between rounds."""

    note: str | None = None  # nothing to say at the start of a generation

    def __init__(self, target: "LoadedModel", draft: "LoadedModel", target_runner: "Runner") -> None:
        self.assistant = draft.model
        self.embed = target.model.get_input_embeddings()
        self.target_runner = target_runner
        target_runner.record_outputs(shared_kv=True)
        self.device = target.device

    def _inputs(self, context_ids: list[int]):
        """The target's states the first step reads: its hidden state at the last cached position (1, 1, hidden)
        and its shared K/V states cut to the cached positions."""
        n_cached = len(context_ids) - 1
        runner = self.target_runner
        hidden = runner.hidden_rows(n_cached - 1)
        shared_kv = runner.shared_kv_states(n_cached)
        if hidden is None or hidden.shape[0] != 1 or shared_kv is None:
            raise RuntimeError("the target runner did not keep the states the assistant drafts from")
        return hidden.view(1, 1, -1), shared_kv

    def begin(self) -> None:
        pass  # the target runner keeps its states from the drafter's start on

    def prefill(self, context_ids: list[int]) -> None:
        pass  # the first draft() runs over what it needs of the target's states

    def draft(self, context_ids: list[int], k: int, choose: Callable[["torch.Tensor"], int]
              ) -> tuple[list[int], list["torch.Tensor"]]:
        import torch

        from engine.backends.device import device_ids
        hidden, shared_kv = self._inputs(context_ids)
        position = torch.full((1, 1), len(context_ids) - 1, device=self.device)  # no copy from the host
        token = context_ids[-1]
        draft_ids, rows = [], []
        for _ in range(k):
            embedding = self.embed(device_ids([token], self.device))
            out = self.assistant(inputs_embeds=torch.cat([embedding, hidden], dim=-1), position_ids=position,
                                 shared_kv_states=shared_kv, use_cache=False)
            logits = out.logits[0, -1].float()  # (vocab,)
            token = choose(logits)
            draft_ids.append(token)
            rows.append(logits)
            hidden = out.last_hidden_state
        return draft_ids, rows

    def release(self) -> None:
        pass  # the K/V states are the target runner's


class TransformersHeads(HeadDrafting):
    """MTP layers and Gemma 4 assistants on a transformers target."""

    def check_mtp(self, target: "LoadedModel", k: int, draft: str | None) -> int:
        model_type = getattr(target.model.config, "model_type", "") if target.model is not None else ""
        if model_type in NO_TRANSFORMERS_MTP:
            raise ConfigError(f"method mtp: transformers does not load {target.label}'s MTP layers ({model_type}: "
                              "its mtp.* weights are dropped); run its GGUF on llama.cpp, where they draft "
                              "(--backend llama.cpp), or use another method")
        layers = mtp_layer_count(target)
        if layers < 1:
            raise ConfigError(f"method mtp needs a model that carries multi-token-prediction layers; {target.label} "
                              "has none in its config (num_mtp_layers): use another method")
        if k > layers:
            raise ConfigError(f"method mtp drafts at most {layers} token{'s' if layers > 1 else ''} a round with "
                              f"{target.label} (one per MTP layer, chained), got k={k}")
        return layers

    def mtp(self, target: "LoadedModel", target_runner: "Runner", draft: str | None) -> MtpLayers:
        return MtpLayers(target, target_runner, self.check_mtp(target, 1, draft))

    def check_assistant(self, target: "LoadedModel", draft: "LoadedModel | None") -> None:
        if draft is None or not is_assistant(draft):
            kind = "no draft" if draft is None else type(draft.model).__name__ if draft.model is not None else \
                draft.backend
            raise ConfigError(f"method assistant needs a Gemma 4 assistant drafter as --draft (e.g. "
                              f"google/gemma-4-E2B-it-assistant), got {kind}; use draft-model for other drafts")
        target_class = type(target.model).__name__ if target.model is not None else target.backend
        if not target_class.startswith(TARGET_PREFIXES):
            raise ConfigError(f"{draft.label} is a Gemma 4 assistant: it drafts only for a Gemma 4 target, and "
                              f"{target.label} is {target_class}")
        backbone = int(draft.model.config.backbone_hidden_size)
        hidden = int(target.model.config.get_text_config().hidden_size)
        if backbone != hidden:
            raise ConfigError(f"{draft.label} was made for a Gemma 4 target of hidden size {backbone}; "
                              f"{target.label} has {hidden}: use the assistant of this model size")

    def assistant(self, target: "LoadedModel", draft: "LoadedModel", target_runner: "Runner") -> AssistantStates:
        self.check_assistant(target, draft)
        return AssistantStates(target, draft, target_runner)


TRANSFORMERS_HEADS = TransformersHeads(TRANSFORMERS)
