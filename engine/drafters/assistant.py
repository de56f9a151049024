"""Method `assistant`: a Gemma 4 assistant drafter (`google/gemma-4-…-it-assistant`, transformers'
`Gemma4AssistantForCausalLM`) drafts from the target's own states, as transformers'
`SinglePositionMultiTokenCandidateGenerator` does: it has no KV cache of its own but cross-attends to the
target's shared key/value states, and each step reads the embedding of the last token beside a hidden state
(the target's for the first step, its own projected one after), always at the position of the context's last
token. So it skips the prefill entirely and k is bounded only by MAX_K.

- transformers (`AssistantDrafter`): the target must be a Gemma 4 (or Gemma 3n) model that returns shared K/V
  states. Touches the assistant's torch module, the target's input embedding (read-only) and the target runner's
  kept outputs (`TransformersRunner.record_outputs(shared_kv=True)`), never the target's cache.
- llama.cpp (`LlamaAssistantDrafter`): the assistant's GGUF (`gemma4-assistant`, loaded as the draft with no
  runner of its own) in an MTP context sharing the Gemma 4 target's KV cache, as llama.cpp's draft-mtp runs it
  (engine.backends.llama_cpp_assistant). Touches that context and the target runner's hidden states.
"""

from __future__ import annotations

from engine.backends import LoadedModel, Runner
from engine.core.config import check_backend
from engine.core.drafting import PickingDrafter, Proposal
from engine.core.errors import ConfigError
from engine.core.methods import MethodSpec

NAME = "assistant"

ASSISTANT_CLASSES = ("Gemma4AssistantForCausalLM", "Gemma4UnifiedAssistantForCausalLM")
TARGET_PREFIXES = ("Gemma4", "Gemma3n")  # the targets whose forward returns shared K/V states


def is_assistant(model: LoadedModel) -> bool:
    return model.model is not None and type(model.model).__name__ in ASSISTANT_CLASSES


def check_assistant(target: LoadedModel, draft: LoadedModel | None) -> None:
    """Refuse a draft that isn't a Gemma 4 assistant, or a target of another family (with what to use)."""
    check_backend(NAME, target.backend)
    if target.backend == "llama.cpp":
        check_llama_assistant(target, draft)
        return
    if draft is None or not is_assistant(draft):
        kind = "no draft" if draft is None else type(draft.model).__name__ if draft.model is not None else \
            draft.backend
        raise ConfigError(f"method {NAME} needs a Gemma 4 assistant drafter as --draft (e.g. "
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


class AssistantDrafter(PickingDrafter):
    """Drafts k tokens per round with a Gemma 4 assistant over the target runner's shared K/V states."""

    name = NAME
    free_to_propose = False  # every drafted token is a pass of the assistant
    note: str | None = None  # nothing to say at the start of a generation

    def __init__(self, target: LoadedModel, draft: LoadedModel, target_runner: Runner) -> None:
        super().__init__()
        check_assistant(target, draft)
        self.assistant = draft.model
        self.embed = target.model.get_input_embeddings()
        self.target_runner = target_runner
        target_runner.record_outputs(shared_kv=True)
        self.device = target.device

    def _inputs(self, context_ids: list[int]):
        """The target's states the first step reads: its hidden state at the last cached position and its
        shared K/V states cut to the cached positions."""
        n_cached = len(context_ids) - 1
        runner = self.target_runner
        hidden = runner.hidden.rows(n_cached - 1) if runner.hidden is not None else None
        shared_kv = runner.shared_kv_states(n_cached)
        if hidden is None or hidden.shape[0] != 1 or shared_kv is None:
            raise RuntimeError("the target runner did not keep the states the assistant drafts from")
        return hidden.view(1, 1, -1), shared_kv

    def propose(self, context_ids: list[int], k: int) -> Proposal:
        import torch

        if k < 1 or len(context_ids) < 2:
            return Proposal.empty()
        hidden, shared_kv = self._inputs(context_ids)
        position = torch.tensor([[len(context_ids) - 1]], device=self.device)
        token = context_ids[-1]
        draft_ids, rows = [], []
        for _ in range(k):
            embedding = self.embed(torch.tensor([[token]], device=self.device))
            out = self.assistant(inputs_embeds=torch.cat([embedding, hidden], dim=-1), position_ids=position,
                                 shared_kv_states=shared_kv, use_cache=False)
            token, row = self.pick(out.logits[0, -1].float())
            draft_ids.append(token)
            rows.append(row)
            hidden = out.last_hidden_state
        return self.proposal(draft_ids, rows)

    def observe(self, n_accepted: int) -> None:
        pass  # no state of its own: the next round reads the target's states again

    def release(self) -> None:
        pass  # the K/V states are the target runner's


# ------------------------------------------------------------------ llama.cpp

def check_llama_assistant(target: LoadedModel, draft: LoadedModel | None) -> None:
    """On llama.cpp: the draft must be a Gemma 4 assistant GGUF, the target a Gemma 4 GGUF whose cache it can
    read (the size it was made for)."""
    from engine.backends.llama_cpp_assistant import ASSISTANT_ARCHITECTURE, TARGET_ARCHITECTURES, AssistantWeights
    if draft is None or not isinstance(draft.native, AssistantWeights):
        header = getattr(draft.native, "header", None) if draft is not None else None
        kind = "no draft" if draft is None else \
            f"{draft.label} (a {header.architecture!r} model)" if header is not None else draft.label
        raise ConfigError(f"method {NAME} on llama.cpp needs a Gemma 4 assistant GGUF as --draft "
                          f"({ASSISTANT_ARCHITECTURE}, converted from google/gemma-4-…-it-assistant), got {kind}; "
                          "use draft-model for other drafts")
    architecture = target.native.header.architecture
    if architecture not in TARGET_ARCHITECTURES:
        raise ConfigError(f"{draft.label} is a Gemma 4 assistant: it drafts only for a Gemma 4 target, and "
                          f"{target.label} is a {architecture!r} model")
    problem = draft.native.mismatch(target.native)
    if problem:
        raise ConfigError(problem)


class LlamaAssistantDrafter(PickingDrafter):
    """Drafts k tokens per round with a Gemma 4 assistant GGUF reading the llama.cpp target runner's cache."""

    name = NAME
    free_to_propose = False  # every drafted token is a pass of the assistant
    note = ("Gemma 4 assistant on llama.cpp: it reads the target's KV cache (shared memory), one pass per drafted "
            "token at the last token's position")

    def __init__(self, target: LoadedModel, draft: LoadedModel, target_runner: Runner) -> None:
        super().__init__()
        check_llama_assistant(target, draft)
        self._models, self._runner = (draft.native, target.native), target_runner
        self._attach()

    def _attach(self) -> None:
        """The assistant's context, reading the target runner's cache and states from now on."""
        from engine.backends.llama_cpp_assistant import AssistantContext
        self.context = AssistantContext(*self._models, self._runner)

    def begin(self, sampling, generator) -> None:
        super().begin(sampling, generator)
        if self.context is None:  # released since the last generation: attached again before the prefill
            self._attach()

    def propose(self, context_ids: list[int], k: int) -> Proposal:
        return self.proposal_from(self.context.draft, context_ids, k)

    def observe(self, n_accepted: int) -> None:
        pass  # no state of its own: the next round reads the target's cache and states again

    def release(self) -> None:
        """Free the context and stop reading the target (the weights are the draft model's); the next
        generation's begin() attaches it again."""
        if self.context is not None:
            self.context.release()
            self.context = None


def build(spec, target: LoadedModel, draft: LoadedModel | None, target_runner: Runner | None):
    if target_runner is None:
        raise ValueError(f"{NAME} drafts from the target's runner; pass target_runner")
    if target.backend == "llama.cpp":
        return LlamaAssistantDrafter(target, draft, target_runner)
    return AssistantDrafter(target, draft, target_runner)


def hf_kwargs(spec, engine) -> dict:
    """transformers generate() with the same assistant; its candidate generator reads k from the assistant's
    own config."""
    assistant = engine.drafts.draft_model(spec.draft).model
    assistant.generation_config.num_assistant_tokens = spec.k
    return {"assistant_model": assistant}


def own_assistant(entry, pairs) -> str | None:
    """Words for a model with its assistant's GGUF beside it (llama.cpp), or a known assistant drafter of its
    family (engine.models.pairs)."""
    assistant = getattr(entry, "assistant_file", None)
    if assistant is not None:
        return f"drafts with its assistant {assistant.name} (method {NAME}, llama.cpp)"
    pair = next((p for p in pairs if p.method == NAME), None)
    return None if pair is None else f"drafts with its assistant {pair.draft} (method {NAME})"


def own_assistant_settings(entry, pairs) -> dict:
    """The assistant beside the model, else the known assistant of its family, as the draft."""
    assistant = getattr(entry, "assistant_file", None)
    if assistant is not None:
        return {"draft": str(assistant)}
    pair = next((p for p in pairs if p.method == NAME), None)
    return {} if pair is None else {"draft": pair.draft}


def not_a_gemma_4(entry, pairs) -> str | None:
    """Why a described model can't use an assistant: it is no Gemma 4 (or Gemma 3n) model and has no assistant
    of its own (beside it, or known for its family); None where it may."""
    if own_assistant(entry, pairs) is not None:
        return None
    from engine.backends.gguf_file import ASSISTANT_TARGETS
    kind = entry.architecture or entry.model_type or "model of unknown kind"
    if entry.architecture in ASSISTANT_TARGETS or kind.startswith(TARGET_PREFIXES):
        return None
    return f"{entry.label} is not a Gemma 4 model ({kind}): a Gemma 4 assistant drafts only for one"


METHOD = MethodSpec(
    name=NAME, label="Gemma 4 assistant",
    description="A Gemma 4 assistant (--draft google/gemma-4-…-assistant, or its GGUF on llama.cpp) drafts from the "
                "target's own KV cache and last hidden state, one token per pass at a fixed position; any k.",
    needs_draft=True, backends=("transformers", "llama.cpp"),
    why_not="the assistant reads the target's key/value cache, which the transformers and llama.cpp backends share",
    check=lambda spec, target, draft: check_assistant(target, draft), build=build, needs_target_runner=True,
    hf_generate_kwargs=hf_kwargs, own_drafter=own_assistant, own_settings=own_assistant_settings,
    why_unusable=not_a_gemma_4,
    draft_help="a Gemma 4 assistant drafter (on llama.cpp: its GGUF, gemma4-assistant)")
