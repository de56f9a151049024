"""Method `assistant`: a Gemma 4 assistant drafter (`google/gemma-4-…-it-assistant`, transformers'
`Gemma4AssistantForCausalLM`) drafts from the target's own states, as transformers'
`SinglePositionMultiTokenCandidateGenerator` does: it has no KV cache of its own but cross-attends to the
target's shared key/value states, and each step reads the embedding of the last token beside a hidden state
(the target's for the first step, its own projected one after), always at the position of the context's last
token. So it skips the prefill entirely and k is bounded only by MAX_K.

One drafter, written once against the target's head context (`LoadedModel.heads`, engine.backends.heads):
- transformers (engine.backends.transformers_heads): the target must be a Gemma 4 (or Gemma 3n) model that
  returns shared K/V states; the assistant's torch module reads them and the target's input embedding.
- llama.cpp (engine.backends.llama_cpp_heads): the assistant's GGUF (`gemma4-assistant`, loaded as the draft
  with no runner of its own) in an MTP context sharing the Gemma 4 target's KV cache, as llama.cpp's draft-mtp
  runs it.
Touches nothing itself: the head context (its backend's) reads the target runner's states, never its cache.
"""

from __future__ import annotations

from engine.backends import LoadedModel, Runner
from engine.backends.transformers_heads import TARGET_PREFIXES
from engine.core.config import check_backend
from engine.core.drafting import PickingDrafter, Proposal
from engine.core.methods import MethodSpec

NAME = "assistant"


def check_assistant(target: LoadedModel, draft: LoadedModel | None) -> None:
    """Refuse a draft that isn't a Gemma 4 assistant, or a target of another family (with what to use): what the
    target's backend says (LoadedModel.heads)."""
    check_backend(NAME, target.backend)
    target.heads.check_assistant(target, draft)


class AssistantDrafter(PickingDrafter):
    """Drafts k tokens per round with a Gemma 4 assistant from the target runner's own states (its shared K/V
    states and last hidden state), through the head context the target's backend makes (engine.backends.heads)."""

    name = NAME
    free_to_propose = False  # every drafted token is a pass of the assistant

    def __init__(self, target: LoadedModel, draft: LoadedModel, target_runner: Runner) -> None:
        super().__init__()
        check_backend(NAME, target.backend)
        self.context = target.heads.assistant(target, draft, target_runner)
        self.note = self.context.note

    def begin(self, sampling, generator) -> None:
        super().begin(sampling, generator)
        self.context.begin()  # attached again before the prefill where it was released

    def prefill(self, context_ids: list[int]) -> None:
        self.context.prefill(context_ids)

    def propose(self, context_ids: list[int], k: int) -> Proposal:
        return self.proposal_from(self.context.draft, context_ids, k)

    def observe(self, n_accepted: int) -> None:
        pass  # no state of its own: the next round reads the target's states again

    def release(self) -> None:
        """Free what the context keeps (the weights are the draft model's); the next begin() takes it up again."""
        self.context.release()


def build(spec, target: LoadedModel, draft: LoadedModel | None, target_runner: Runner | None):
    if target_runner is None:
        raise ValueError(f"{NAME} drafts from the target's runner; pass target_runner")
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
    assistant = entry.assistant_file  # an engine.models.catalog.CatalogEntry
    if assistant is not None:
        return f"drafts with its assistant {assistant.name} (method {NAME}, llama.cpp)"
    pair = next((p for p in pairs if p.method == NAME), None)
    return None if pair is None else f"drafts with its assistant {pair.draft} (method {NAME})"


def own_assistant_settings(entry, pairs) -> dict:
    """The assistant beside the model, else the known assistant of its family, as the draft."""
    assistant = entry.assistant_file  # an engine.models.catalog.CatalogEntry
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
