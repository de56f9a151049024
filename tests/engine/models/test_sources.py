"""engine.models.sources (names → sources, which backend serves them) and engine.core.compat's facts (a
backend's own, and the HF reading)."""

from __future__ import annotations

import pytest

from engine.backends import backend_named
from engine.core.compat import OwnFactsTokenizer, TokenizerFacts, compatibility_facts, tokenizer_difference
from engine.core.errors import ModelLoadError
from engine.models.sources import backend_for, is_server_url, resolve_source


def test_names_become_sources(tmp_path):
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF")
    source = resolve_source(str(gguf))
    assert (source.kind, source.gguf_file, source.label, source.file) == ("gguf", "tiny.gguf", "tiny", gguf)
    (tmp_path / "folder").mkdir()
    with pytest.raises(ModelLoadError, match="no config.json"):
        resolve_source(str(tmp_path / "folder"))
    with pytest.raises(ModelLoadError, match="model not found"):
        resolve_source("./nowhere")
    # auto: a .gguf runs on llama.cpp where llama-cpp-python is installed, else on transformers
    assert backend_for(source) == ("llama.cpp" if backend_named("llama.cpp").available() else "transformers")
    assert backend_for(source, "transformers") == "transformers"
    (tmp_path / "folder" / "config.json").write_text("{}")
    assert backend_for(resolve_source(str(tmp_path / "folder"))) == "transformers"
    with pytest.raises(ModelLoadError, match="unknown backend"):
        backend_for(source, "onnx")


def test_a_server_address_is_not_model_files():
    assert is_server_url(" HTTPS://host:8080/v1") and not is_server_url("org/name")
    with pytest.raises(ModelLoadError, match="server address"):
        resolve_source("http://localhost:8080")


class AdapterTokenizer(OwnFactsTokenizer):
    """A backend's tokenizer adapter that states its own facts (as llama.cpp's does), declared as such."""

    def __init__(self, pieces: list[str]) -> None:
        self.pieces = pieces

    def own_compatibility_facts(self) -> TokenizerFacts:
        return TokenizerFacts("BPE", len(self.pieces), 0, self.pieces[0], 1, self.pieces[1],
                              piece=lambda i: self.pieces[i] if i < len(self.pieces) else None)


def test_a_backend_adapter_gives_its_own_facts(tiny_tokenizer):
    pieces = ["<s>", "</s>", "a", "b"]
    assert compatibility_facts(AdapterTokenizer(pieces)).size == 4
    assert tokenizer_difference(AdapterTokenizer(pieces), AdapterTokenizer(pieces)) is None
    other = tokenizer_difference(AdapterTokenizer(pieces), AdapterTokenizer(["<s>", "</s>", "a", "c"]))
    assert (other.kind, other.token_id, other.target, other.draft) == ("token", 3, "b", "c")
    facts = compatibility_facts(tiny_tokenizer)
    assert (facts.vocab_kind, facts.size, facts.eos_id) == ("BPE", len(tiny_tokenizer), tiny_tokenizer.eos_token_id)
    assert facts.piece(tiny_tokenizer.eos_token_id) == "<|im_end|>"
