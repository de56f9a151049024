"""engine.models.sources (names → sources, the one device/dtype resolver, the file stamp, the GGUF magic check) and
engine.core.compat's facts (a backend's own, and the HF reading)."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from engine.core.compat import TokenizerFacts, tokenizer_difference, tokenizer_facts
from engine.core.errors import ModelLoadError
from engine.models.sources import (backend_for, check_gguf, converted_folder, default_dtype, dtype_label, file_stamp,
                            gguf_problem, resolve_dtype, resolve_source)


def test_the_file_stamp_changes_with_the_file(tmp_path):
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF" + b"\0" * 12)
    first = file_stamp(path)
    assert first == file_stamp(path) and len(first) == 16
    path.write_bytes(b"GGUF" + b"\0" * 13)
    assert file_stamp(path) != first
    assert converted_folder(path).name == f"m-{file_stamp(path)}"


def test_the_gguf_magic_check(tmp_path):
    good, bad = tmp_path / "good.gguf", tmp_path / "bad.gguf"
    good.write_bytes(b"GGUF\3\0\0\0")
    bad.write_bytes(b"PK\3\4")
    assert gguf_problem(good) is None
    check_gguf(good)
    assert "not a GGUF file" in gguf_problem(bad)
    with pytest.raises(ModelLoadError, match="not a GGUF file"):
        check_gguf(bad)
    assert gguf_problem(tmp_path / "missing.gguf").startswith("cannot read")


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
    assert backend_for(source) == ("llama.cpp" if importlib.util.find_spec("llama_cpp") else "transformers")
    assert backend_for(source, "transformers") == "transformers"
    (tmp_path / "folder" / "config.json").write_text("{}")
    assert backend_for(resolve_source(str(tmp_path / "folder"))) == "transformers"
    with pytest.raises(ModelLoadError, match="unknown backend"):
        backend_for(source, "onnx")


def test_one_dtype_resolver_for_loading_and_estimates(monkeypatch):
    assert resolve_dtype("bf16", "cpu") is torch.bfloat16 and resolve_dtype("torch.float16", "cpu") is torch.float16
    monkeypatch.setattr("engine.host.native_bf16", lambda: False)  # a CPU without bf16 in hardware
    assert resolve_dtype(None, torch.device("cpu")) is torch.float32 and resolve_dtype("auto", "mps") is torch.float16
    monkeypatch.setattr("engine.host.native_bf16", lambda: True)  # AVX512-BF16 or AMX (engine.host)
    assert resolve_dtype(None, "cpu") is torch.bfloat16 and resolve_dtype("float32", "cpu") is torch.float32
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert default_dtype("cuda") is torch.float16  # no CUDA here to say it supports bf16
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert resolve_dtype(None, "cuda:1") is torch.bfloat16
    with pytest.raises(ModelLoadError, match="unknown dtype 'int3'"):
        resolve_dtype("int3", "cpu")
    assert dtype_label(torch.bfloat16) == "bfloat16" and dtype_label("Q4_1") == "Q4_1"


class AdapterTokenizer:
    """A backend's tokenizer adapter that states its own facts (as llama.cpp's may)."""

    def __init__(self, pieces: list[str]) -> None:
        self.pieces = pieces

    def tokenizer_facts(self) -> TokenizerFacts:
        return TokenizerFacts("BPE", len(self.pieces), 0, self.pieces[0], 1, self.pieces[1],
                              piece=lambda i: self.pieces[i] if i < len(self.pieces) else None)


def test_a_backend_adapter_gives_its_own_facts(tiny_tokenizer):
    pieces = ["<s>", "</s>", "a", "b"]
    assert tokenizer_facts(AdapterTokenizer(pieces)).size == 4
    assert tokenizer_difference(AdapterTokenizer(pieces), AdapterTokenizer(pieces)) is None
    other = tokenizer_difference(AdapterTokenizer(pieces), AdapterTokenizer(["<s>", "</s>", "a", "c"]))
    assert (other.kind, other.token_id, other.target, other.draft) == ("token", 3, "b", "c")
    facts = tokenizer_facts(tiny_tokenizer)
    assert (facts.vocab_kind, facts.size, facts.eos_id) == ("BPE", len(tiny_tokenizer), tiny_tokenizer.eos_token_id)
    assert facts.piece(tiny_tokenizer.eos_token_id) == "<|im_end|>"
