"""Known-good target/draft pairs: the drafts worth downloading for a model family, as data.

A draft helps only when it shares the target's tokenizer and is much smaller. These pairs are known to do
both; the model manager offers them (with a download button) when no compatible smaller draft is installed,
and `specscope models list` can name them. A target is matched by its hub id, folder or file name, or
architecture, case-insensitively (`Qwen/Qwen3-8B`, `qwen3-8b-q4_k_m.gguf`, a folder called `Qwen3-32B`).

Pure data and one lookup; no files, no network, no Qt.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


DRAFT_IS_TARGET = ("The draft is the target itself: it would only add work. Pick a smaller model with the same "
                   "tokenizer.")  # the Models window and the settings panel say the same


@dataclass(frozen=True, slots=True)
class KnownPair:
    """A model family's targets and the draft that is known to help them."""

    family: str  # what the user reads: "Qwen3"
    targets: tuple[str, ...]  # hub ids of targets the draft helps
    draft: str  # the draft's hub id (what to download)
    target_pattern: str  # a regex on a lower-cased model name that says "this is one of the targets"
    note: str = ""
    method: str = "draft-model"  # the method the draft is used with (Gemma 4 assistants: assistant)


KNOWN_PAIRS: tuple[KnownPair, ...] = (
    KnownPair("Qwen3", ("Qwen/Qwen3-32B", "Qwen/Qwen3-14B", "Qwen/Qwen3-8B", "Qwen/Qwen3-4B"), "Qwen/Qwen3-0.6B",
              r"qwen3[-_]?(4|8|14|32)b"),
    KnownPair("Llama 3.1 / 3.2", ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-70B-Instruct"),
              "meta-llama/Llama-3.2-1B-Instruct", r"llama[-_ ]?3\.[13][-_ ]?(3|8|70)b",
              "gated on the Hugging Face Hub: accept the licence and set a token first"),
    KnownPair("SmolLM2", ("HuggingFaceTB/SmolLM2-1.7B-Instruct", "HuggingFaceTB/SmolLM2-360M-Instruct"),
              "HuggingFaceTB/SmolLM2-135M-Instruct", r"smollm2[-_ ]?(1\.7b|360m)"),
    # Gemma 4: each size has its own assistant drafter (a small MTP model that reads the target's cache)
    *(KnownPair("Gemma 4", (f"google/gemma-4-{size}-it",), f"google/gemma-4-{size}-it-assistant",
                rf"gemma[-_ ]?4[-_ ]?{size.lower()}(?!.*assistant)",
                "its assistant drafter; gated on the Hugging Face Hub (licence and token)", method="assistant")
      for size in ("E2B", "E4B", "26B-A4B")),
)


def _key(name: str) -> str:
    """A model name as the patterns read it: the last path part (a hub id's name, a folder, a file), lower."""
    return re.split(r"[\\/]", name.strip().rstrip("/\\"))[-1].lower()


def pairs_for(*names: str | None) -> list[KnownPair]:
    """The known pairs whose targets match any of `names` (a model's name, label, hub id, architecture)."""
    keys = [_key(n) for n in names if n]
    return [pair for pair in KNOWN_PAIRS if any(re.search(pair.target_pattern, key) for key in keys)]


def pairs_drafted_by(*names: str | None) -> list[KnownPair]:
    """The known pairs whose draft is one of `names`: the model is small enough to draft for a bigger one."""
    keys = [_key(n) for n in names if n]
    return [pair for pair in KNOWN_PAIRS if _key(pair.draft) in keys
            or any(key.startswith(_key(pair.draft)) for key in keys)]


def suggestion(*names: str | None) -> str:
    """One sentence naming the known-good drafts for a target (or, for a model that is itself a known draft,
    the bigger target it helps), or "" when none is known."""
    found = pairs_for(*names)
    if found:
        parts = [f"{p.draft} for {p.family}" + (f" ({p.note})" if p.note else "") for p in found]
        return "Known-good draft: " + "; ".join(parts) + "."
    drafted = pairs_drafted_by(*names)
    if drafted:
        pair = drafted[0]
        return (f"This model is itself a known-good draft: load {pair.targets[0]} as the target and use this one "
                "as its draft.")
    return ""


def known_pairs_table() -> list[dict]:
    """Every known pair, JSON-ready (for `specscope models list`)."""
    return [{"family": p.family, "targets": list(p.targets), "draft": p.draft, "note": p.note, "method": p.method}
            for p in KNOWN_PAIRS]


__all__ = ["DRAFT_IS_TARGET", "KnownPair", "KNOWN_PAIRS", "pairs_for", "pairs_drafted_by", "suggestion",
           "known_pairs_table"]
