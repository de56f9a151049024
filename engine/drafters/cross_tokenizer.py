"""Drafting with a model of another tokenizer, for the `draft-model` method: the draft drafts in its own
tokens, the text it wrote is re-tokenized in the target's vocabulary, and the target verifies that (universal
assisted generation: Timor et al., arXiv 2502.05202; transformers' AssistedCandidateGeneratorDifferentTokenizers).

Greedy drafts are proposed one-hot (p_draft None), so greedy output is the target's own. Sampled drafts are
restricted to the shared vocabulary (ids whose text is the same in both tokenizers, one to one), each draw a
target id with its probability row in the target's vocabulary, so rejection sampling stays exact.

Touches only the draft's runner and the two tokenizers it is given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.backends import LoadedModel, Runner
from engine.core.config import SamplingConfig
from engine.core.drafting import Drafter, Proposal
from engine.core.errors import ConfigError
from engine.core.runner import take_in

if TYPE_CHECKING:
    import torch

ANCHOR_TOKENS = 8  # context tokens re-tokenized with the drafted text, so the boundary merges as the target's would
MIN_SHARED_FRACTION = 0.1  # of the smaller vocabulary: below it, sampled drafts would say too little
MIN_SHARED_TOKENS = 32


# ---------------------------------------------------------------- text ↔ ids

def piece_ends(tokenizer, ids: list[int], before: list[int] = ()) -> list[int]:
    """Where the text of each of `ids` ends in decode(before + ids), counted from the end of decode(before). A
    token that ends inside a character ends where its character's text is complete."""
    start = len(_whole(tokenizer.decode(list(before))))
    return [len(_whole(tokenizer.decode(list(before) + ids[:i + 1]))) - start for i in range(len(ids))]


def _whole(text: str) -> str:
    """The text without a trailing partial character (decoders write it as U+FFFD)."""
    return text.rstrip("\ufffd")


def continuation(tokenizer, before: list[int], ids: list[int]) -> str:
    """The text `ids` add after `before` (complete characters only)."""
    head, whole = tokenizer.decode(list(before)), tokenizer.decode(list(before) + list(ids))
    if not whole.startswith(_whole(head)):  # the decoder rewrote the boundary: take the ids' text alone
        return _whole(tokenizer.decode(list(ids)))
    return _whole(whole[len(_whole(head)):])


def retokenize(tokenizer, anchor_ids: list[int], text: str) -> list[int]:
    """The target ids that spell `text` after a context ending in `anchor_ids` (non-special ids): the anchor's
    text and `text` are tokenized together and the anchor's own ids cut off, so the first new id is split as
    the target splits text there. Where the new text merges with the anchor's last ids, `text` alone."""
    if not text:
        return []
    anchor_text = tokenizer.decode(list(anchor_ids)) if anchor_ids else ""
    ids = tokenizer.encode(anchor_text + text, add_special_tokens=False)
    if anchor_ids and ids[:len(anchor_ids)] == list(anchor_ids):
        return ids[len(anchor_ids):]
    return tokenizer.encode(text, add_special_tokens=False)


def ends_inside_word(text: str) -> bool:
    return bool(text) and (text[-1].isalnum() or text[-1] == "_")


@dataclass(frozen=True, slots=True)
class Translation:
    ids: list[int]  # target ids
    sources: tuple[str, ...]  # for each, the draft's pieces whose text it covers, joined by " · "


def translate(target_tok, anchor_ids: list[int], draft_pieces: list[str], k: int) -> Translation:
    """The target's ids for the text of `draft_pieces` (the draft's drafted tokens, as text), at most k. When the
    text ends inside a word its last target id is dropped: the word may go on, and merge differently."""
    text = "".join(draft_pieces)
    ids = retokenize(target_tok, anchor_ids, text)
    if len(ids) > 1 and ends_inside_word(text):
        ids = ids[:-1]
    ids = ids[:k]
    ends = piece_ends(target_tok, ids, anchor_ids)
    return Translation(ids, tuple(sources_of(ends, draft_pieces)))


def sources_of(target_ends: list[int], draft_pieces: list[str]) -> list[str]:
    """For each target token (by where its text ends), the draft pieces its text overlaps."""
    draft_spans, at = [], 0
    for piece in draft_pieces:
        draft_spans.append((at, at + len(piece), piece))
        at += len(piece)
    sources, start = [], 0
    for end in target_ends:
        overlapping = [p for a, b, p in draft_spans if a < max(end, start + 1) and b > start]
        sources.append(" · ".join(overlapping))
        start = end
    return sources


# ---------------------------------------------------------------- the shared vocabulary

def _texts(tokenizer) -> dict[str, int]:
    """Each id's text → the id, for ids that are not special, decode to whole characters and are the only
    id with that text."""
    special = set(getattr(tokenizer, "all_special_ids", ()) or ())
    seen: dict[str, int | None] = {}
    for token_id in range(len(tokenizer)):
        if token_id in special:
            continue
        text = tokenizer.decode([token_id])
        if not text or "\ufffd" in text:
            continue
        seen[text] = None if text in seen else token_id
    return {text: token_id for text, token_id in seen.items() if token_id is not None}


_shared_cache: dict[tuple[int, int], tuple[list[int], list[int]]] = {}


def shared_vocabulary(target_tok, draft_tok) -> tuple[list[int], list[int]]:
    """(draft ids, target ids) of the tokens spelled the same in both, one to one; cached per tokenizer pair."""
    key = (id(target_tok), id(draft_tok))
    if key not in _shared_cache:
        target_texts, draft_texts = _texts(target_tok), _texts(draft_tok)
        pairs = sorted((draft_texts[t], target_texts[t]) for t in draft_texts.keys() & target_texts.keys())
        _shared_cache[key] = ([d for d, _ in pairs], [t for _, t in pairs])
    return _shared_cache[key]


def shared_vocabulary_refusal(n_shared: int, target_size: int, draft_size: int) -> str | None:
    """Why sampled cross-tokenizer drafts are refused with this many shared tokens, or None."""
    floor = max(MIN_SHARED_TOKENS, int(MIN_SHARED_FRACTION * min(target_size, draft_size)))
    if n_shared >= floor:
        return None
    return (f"the two tokenizers share {n_shared:,} tokens (at least {floor:,} are needed to draft while "
            "sampling); use greedy decoding, or a draft of the target's tokenizer")


def shared_vocabulary_words(target_tok, draft_tok) -> str:
    """One sentence on the pair's shared vocabulary: its size, and whether sampled drafts can use it."""
    n_shared = len(shared_vocabulary(target_tok, draft_tok)[0])
    words = (f"They share {n_shared:,} tokens (spelled the same in both; target {len(target_tok):,}, "
             f"draft {len(draft_tok):,})")
    refusal = shared_vocabulary_refusal(n_shared, len(target_tok), len(draft_tok))
    if refusal:
        return f"{words}: greedy drafting only, sampling is refused ({refusal})."
    return f"{words}: greedy drafts go through text, sampled drafts use the shared tokens."


# ---------------------------------------------------------------- the drafter

class CrossTokenizerDrafter(Drafter):
    """`draft-model` with a draft whose tokenizer differs from the target's; `name` is the method's (its
    module, engine.drafters.draft_model, says it)."""

    free_to_propose = False
    note = "the draft's tokenizer differs from the target's: cross-tokenizer drafting (slower per draft, exact)"

    def __init__(self, draft: LoadedModel, target: LoadedModel, name: str) -> None:
        self.name = name
        self.runner: Runner = draft.new_runner()
        self.draft_tok, self.target_tok = draft.tokenizer, target.tokenizer
        self._target_special = frozenset(getattr(self.target_tok, "all_special_ids", ()) or ())
        self._draft_special = frozenset(getattr(self.draft_tok, "all_special_ids", ()) or ())
        # the target's special tokens the draft knows by the same text (a chat template's markers): kept in the
        # text the draft reads; the others are left out of it
        draft_markers = {self.draft_tok.decode([i]) for i in self._draft_special}
        self._dropped = self._target_special - {i for i in self._target_special
                                                if self.target_tok.decode([i]) in draft_markers}
        self._sampling = SamplingConfig()
        self._generator = None
        self._shared = None  # (draft ids, target ids) tensors while sampling

    def begin(self, sampling: SamplingConfig, generator) -> None:
        self._sampling, self._generator = sampling, generator
        self._shared = None if sampling.greedy else self._shared_tensors()

    def _shared_tensors(self):
        import torch
        draft_ids, target_ids = shared_vocabulary(self.target_tok, self.draft_tok)
        refusal = shared_vocabulary_refusal(len(draft_ids), len(self.target_tok), len(self.draft_tok))
        if refusal:
            raise ConfigError(f"cross-tokenizer drafting can't sample here: {refusal}")
        return torch.tensor(draft_ids, dtype=torch.long), torch.tensor(target_ids, dtype=torch.long)

    def _draft_context(self, context_ids: list[int]) -> list[int]:
        """The context as the draft's ids: its text re-tokenized (the special tokens it shares parsed as its own)."""
        text = self.target_tok.decode([t for t in context_ids if t not in self._dropped])
        return self.draft_tok.encode(text, add_special_tokens=False)

    def _anchor(self, context_ids: list[int]) -> list[int]:
        tail = context_ids[-ANCHOR_TOKENS:]
        cut = max((i + 1 for i, t in enumerate(tail) if t in self._target_special), default=0)
        return tail[cut:]

    def prefill(self, context_ids: list[int]) -> None:
        """The prompt, as the draft's ids, into the draft's cache now (its first pass feeds the last of them)."""
        draft_context = self._draft_context(context_ids)
        if draft_context:
            take_in(self.runner, draft_context)

    def propose(self, context_ids: list[int], k: int) -> Proposal:
        if k < 1:
            return Proposal.empty()
        draft_context = self._draft_context(context_ids)
        if not draft_context:
            return Proposal.empty()
        if self._shared is not None:
            return self._propose_shared(draft_context, k)
        return self._propose_greedy(context_ids, draft_context, k)

    def _propose_greedy(self, context_ids: list[int], draft_context: list[int], k: int) -> Proposal:
        import torch
        feed, drafted = self.runner.sync(draft_context), []
        for _ in range(k):
            token = int(torch.argmax(self.runner.forward(feed, 1)[-1]))
            if token in self._draft_special:  # the draft would end its turn: the target says how it ends
                break
            drafted.append(token)
            feed = [token]
        if not drafted:
            return Proposal.empty()
        tail = draft_context[-ANCHOR_TOKENS:]
        ends = piece_ends(self.draft_tok, drafted, tail)
        text = continuation(self.draft_tok, tail, drafted)
        pieces = [text[a:b] for a, b in zip([0] + ends[:-1], ends)]
        # bytes that make no character can't be told to the target as text: the draft ends before them
        pieces = pieces[:next((i for i, piece in enumerate(pieces) if "\ufffd" in piece), len(pieces))]
        translation = translate(self.target_tok, self._anchor(context_ids), pieces, k)
        return Proposal(translation.ids, None, sources=translation.sources)

    def _propose_shared(self, draft_context: list[int], k: int) -> Proposal:
        """Each draw from the draft's distribution restricted to the shared vocabulary, as a target id with its
        row in the target's vocabulary (the rejection rule's p_draft)."""
        import torch

        from engine.core.sampling import probabilities, sample
        shared_draft, shared_target = self._shared
        feed, ids, rows, sources = self.runner.sync(draft_context), [], [], []
        for _ in range(k):
            logits = self.runner.forward(feed, 1)[-1]
            # the draft's logits on the shared tokens only, then the generation's settings (top-k, top-p…)
            restricted = probabilities(logits[shared_draft.to(logits.device)].clone(), self._sampling)
            pick = int(sample(restricted, self._generator))
            row = torch.zeros(len(self.target_tok), dtype=restricted.dtype, device=restricted.device)
            row[shared_target.to(row.device)] = restricted
            draft_id = int(shared_draft[pick])
            ids.append(int(shared_target[pick]))
            rows.append(row)
            sources.append(self.draft_tok.decode([draft_id]))
            feed = [draft_id]
        if not ids:
            return Proposal.empty()
        return Proposal(ids, torch.stack(rows), sources=tuple(sources))

    def observe(self, n_accepted: int) -> None:
        pass  # the next propose() re-reads the context as text and syncs the draft's cache by common prefix

    def release(self) -> None:
        self.runner.release()
