"""What a GGUF file's header says (architecture, parameter count, shapes, MTP facts), read once and kept in
SpecScope's cache folder: reading the header with gguf's reader costs seconds on a big vocabulary, so the facts
are cached per file, keyed by path, size and modification time (and FACTS_VERSION: what they hold).

Reads the GGUF header (engine.backends.gguf_file) and writes one small JSON file per model under
engine.host's cache_root()/facts; a read-only cache only costs time. No weights are loaded.
"""

from __future__ import annotations

import json
from pathlib import Path

from engine.backends.source import file_stamp, read_json_dict
from engine.core.validation import write_text_atomic
from engine.host import cache_root

__all__ = ["FACTS_VERSION", "facts_file", "gguf_facts"]

_GGUF_TOKENIZER_FAMILIES = {"gpt2": "BPE", "llama": "BPE", "bert": "WordPiece", "t5": "Unigram"}
FACTS_VERSION = 2  # 2: the MTP facts (nextn layers, a head alone, the shape a head must share)


def facts_file(path: Path) -> Path:
    """Where the facts of the GGUF at `path` are cached (whether or not they are yet)."""
    return cache_root() / "facts" / f"{path.stem}-{file_stamp(path)}-v{FACTS_VERSION}.json"


def gguf_facts(path: Path) -> dict:
    """Architecture, parameter count and shapes of a GGUF file, from its header (cached)."""
    cached = facts_file(path)
    facts = read_json_dict(cached)
    if facts is not None:
        return facts
    facts = _read_facts(path)
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(cached, json.dumps(facts))
    except OSError:  # a read-only cache only costs time
        pass
    return facts


def _read_facts(path: Path) -> dict:
    """The facts from the header itself (string arrays such as the vocabulary are counted, not decoded)."""
    from gguf import GGMLQuantizationType

    from engine.backends.gguf_file import mtp_shape, read_header
    header = read_header(path)
    by_type = header.elements_by_type
    n_heads = header.get("attention.head_count")
    embedding = header.get("embedding_length")
    family = header.metadata.get("tokenizer.ggml.model")
    facts = {
        "architecture": header.architecture,
        "n_parameters": sum(by_type.values()),
        "dtype": GGMLQuantizationType(max(by_type, key=by_type.get)).name if by_type else None,
        "tokenizer_family": _GGUF_TOKENIZER_FAMILIES.get(family, family),
        "vocab_size": header.metadata.get("tokenizer.ggml.tokens") or header.get("vocab_size"),
        "n_layers": header.get("block_count"),
        "n_kv_heads": header.get("attention.head_count_kv") or n_heads,
        "head_dim": header.get("attention.key_length") or (embedding // n_heads if embedding and n_heads
                                                           else None),
        "context_length": header.get("context_length"),
        "nextn_layers": header.nextn_layers,  # multi-token-prediction layers declared (inside, or a head alone)
        "mtp_only": header.mtp_only,  # an mtp-*.gguf head alone: no model of its own
        **mtp_shape(header),  # architecture, embedding_length, n_tokens: what a head and its target share
    }
    return {k: (int(v) if isinstance(v, (int, float)) and k != "dtype" and not isinstance(v, bool) else v)
            for k, v in facts.items()}
