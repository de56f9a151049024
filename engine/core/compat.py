"""Tokenizer compatibility between a target and a draft: the first difference as data, worded in one place.

`tokenizer_difference` compares two tokenizers' facts (vocabulary kind and size, BOS/EOS, the text of every
id) and returns a `TokenizerDifference` or None. `str(difference)` is the short engine wording (logs, the
error's detail); `explain_mismatch(difference)` is the plain-words version for people. No regex reads a
message back: every wording comes from the fields. Touches nothing but the tokenizers it is given.

A tokenizer here is the subset of the HF API the contract in engine/backends names: `len()`, `get_vocab()`,
`bos_token_id`/`eos_token_id` (and `bos_token`/`eos_token`), `backend_tokenizer` when it has one. A backend's
tokenizer adapter may instead give its own facts: it declares so by subclassing `OwnFactsTokenizer`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from engine.core.errors import TokenizerMismatchError

VOCAB_SIZE_TOLERANCE = 128  # as llama.cpp allows between target and draft
_ADVICE = ("The draft's guesses would mean different text to the target, so it cannot speed it up. Pick a draft "
           "from the same family (for example Qwen3-0.6B for Qwen3-32B, Llama-3.2-1B for Llama-3.1-8B).")
# what a pair of different tokenizers gets with the draft-model method (engine.drafters.cross_tokenizer)
CROSS_TOKENIZER_WORDS = "different tokenizers: cross-tokenizer drafting (slower per draft, exact)"
# the same, said of one draft of another tokenizer in a list of the drafts installed for a target
CROSS_DRAFT_WORDS = "another tokenizer: drafts through text (slower per draft, exact)"


@dataclass(frozen=True, slots=True)
class TokenizerFacts:
    """What compatibility is decided on. `piece(id)` is the vocabulary text of an id (None if unused)."""

    vocab_kind: str  # BPE, Unigram, WordPiece, WordLevel, … (the tokenizer model's type)
    size: int  # with added tokens
    bos_id: int | None
    bos_token: str | None
    eos_id: int | None
    eos_token: str | None
    piece: Callable[[int], str | None] = field(repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class TokenizerDifference:
    """The first difference that makes a draft unusable for a target.

    kind: "vocab-kind" (target/draft: the kinds), "vocab-size" (the sizes), "bos" / "eos" (the ids, with
    their token texts in target_text/draft_text), "token" (token_id; target/draft: the texts) or "encoding" (a
    text, in target_text, that the two encode to other ids: target/draft, the id tuples; a target whose vocabulary
    is not read here, a server's)."""

    kind: str
    target: object
    draft: object
    token_id: int | None = None
    target_text: str | None = None
    draft_text: str | None = None

    def __str__(self) -> str:
        if self.kind == "vocab-kind":
            return f"vocabulary types differ: target {self.target}, draft {self.draft}"
        if self.kind == "vocab-size":
            return (f"vocabulary sizes differ by {abs(self.target - self.draft)} (target {self.target}, draft "
                    f"{self.draft}; at most {VOCAB_SIZE_TOLERANCE} allowed)")
        if self.kind in ("bos", "eos"):
            return (f"{self.kind.upper()} tokens differ: target {self.target} ({self.target_text!r}), "
                    f"draft {self.draft} ({self.draft_text!r})")
        if self.kind == "encoding":
            return f"{self.target_text!r} encodes to {list(self.target)} for the target, {list(self.draft)} for the draft"
        return f"token {self.token_id} differs: target {self.target!r}, draft {self.draft!r}"


class OwnFactsTokenizer:
    """A backend's tokenizer adapter that tells its own facts (llama.cpp's, naming its vocabulary kind as HF
    does) instead of being read through the HF API."""

    def own_compatibility_facts(self) -> TokenizerFacts:
        raise NotImplementedError


def compatibility_facts(tokenizer) -> TokenizerFacts:
    """The facts of a tokenizer: its own where it is an OwnFactsTokenizer, else read through the HF API (the
    vocabulary is read once, lazily, on the first `piece` call)."""
    if isinstance(tokenizer, OwnFactsTokenizer):
        return tokenizer.own_compatibility_facts()
    backend = getattr(tokenizer, "backend_tokenizer", None)
    kind = type(backend.model).__name__ if backend is not None else type(tokenizer).__name__
    by_id: dict[int, str] = {}

    def piece(token_id: int) -> str | None:
        if not by_id:
            by_id.update((i, t) for t, i in tokenizer.get_vocab().items())
        return by_id.get(token_id)

    return TokenizerFacts(vocab_kind=kind, size=len(tokenizer), bos_id=tokenizer.bos_token_id,
                          bos_token=getattr(tokenizer, "bos_token", None), eos_id=tokenizer.eos_token_id,
                          eos_token=getattr(tokenizer, "eos_token", None), piece=piece)


def size_difference(target_size: int, draft_size: int) -> TokenizerDifference | None:
    """The cheap first check: vocabularies more than VOCAB_SIZE_TOLERANCE ids apart."""
    if abs(target_size - draft_size) > VOCAB_SIZE_TOLERANCE:
        return TokenizerDifference("vocab-size", target_size, draft_size)
    return None


def facts_difference(target: TokenizerFacts, draft: TokenizerFacts) -> TokenizerDifference | None:
    """The first difference between two tokenizers' facts, or None when the draft can draft for the target."""
    if target.vocab_kind != draft.vocab_kind:
        return TokenizerDifference("vocab-kind", target.vocab_kind, draft.vocab_kind)
    sizes = size_difference(target.size, draft.size)
    if sizes:
        return sizes
    for which in ("bos", "eos"):
        t_id, d_id = getattr(target, f"{which}_id"), getattr(draft, f"{which}_id")
        if t_id != d_id:
            return TokenizerDifference(which, t_id, d_id, target_text=getattr(target, f"{which}_token"),
                                       draft_text=getattr(draft, f"{which}_token"))
    for token_id in range(min(target.size, draft.size)):
        t_piece, d_piece = target.piece(token_id), draft.piece(token_id)
        if t_piece != d_piece:
            return TokenizerDifference("token", t_piece, d_piece, token_id=token_id)
    return None


def _facts(tokenizer) -> TokenizerFacts:
    return tokenizer if isinstance(tokenizer, TokenizerFacts) else compatibility_facts(tokenizer)


def tokenizer_difference(target_tok, draft_tok) -> TokenizerDifference | None:
    """The first difference that makes `draft_tok` unusable as a drafter for `target_tok` (tokenizers or
    their TokenizerFacts), or None. A target tokenizer that can't list its vocabulary here (a server's) tells its
    own difference from the draft's (`difference_from`)."""
    own = getattr(target_tok, "difference_from", None)
    if own is not None:
        return own(draft_tok)
    return facts_difference(_facts(target_tok), _facts(draft_tok))


def check_tokenizers(target_tok, draft_tok, target_name: str = "target", draft_name: str = "draft") -> None:
    """TokenizerMismatchError (carrying the structured difference) unless the draft can draft for the target."""
    difference = tokenizer_difference(target_tok, draft_tok)
    if difference:
        raise TokenizerMismatchError(
            f"{draft_name} cannot draft for {target_name}: their tokenizers differ ({difference})", difference)


def explain_mismatch(difference: TokenizerDifference) -> str:
    """Plain words for a tokenizer difference, with what to do about it."""
    d = difference
    if d.kind == "vocab-kind":
        detail = f"the target uses a {d.target} vocabulary and the draft a {d.draft} one"
    elif d.kind == "vocab-size":
        detail = f"the target knows {d.target:,} pieces and the draft {d.draft:,} ({abs(d.target - d.draft):,} apart)"
    elif d.kind in ("bos", "eos"):
        where = "start" if d.kind == "bos" else "end"
        detail = (f"they mark the {where} of a text with different tokens (target {d.target} ({d.target_text!r}), "
                  f"draft {d.draft} ({d.draft_text!r}))")
    elif d.kind == "encoding":
        detail = f"{d.target_text!r} is pieces {list(d.target)} for the target but {list(d.draft)} for the draft"
    else:
        detail = f"piece number {d.token_id:,} is {d.target!r} for the target but {d.draft!r} for the draft"
    return f"These two models split text into different pieces: {detail}. {_ADVICE}"
