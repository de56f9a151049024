"""`specscope models prepare` converts a GGUF for the transformers backend (as README and install.sh's
SPECSCOPE_PREPARE_TRANSFORMERS say), although `auto` would run that GGUF on llama.cpp as it is stored: the first
run converts into the cache folder, the second reuses it; a model folder has nothing to convert."""

from __future__ import annotations

import pytest

from engine.backends.source import converted_folder
from engine.cli.main import main
from tests.fixtures.tiny_gguf import write_tiny_gguf


@pytest.fixture
def tiny_gguf(tmp_path, tiny_dir, tiny_tokenizer):
    from transformers import LlamaForCausalLM
    model = LlamaForCausalLM.from_pretrained(tiny_dir).eval()
    return write_tiny_gguf(tmp_path / "tiny.gguf", model, tiny_tokenizer)


def test_prepare_converts_a_gguf_for_transformers_once(tiny_gguf, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SPECSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    folder = converted_folder(tiny_gguf)
    assert str(folder).startswith(str(tmp_path / "cache")) and not folder.exists()
    assert main(["models", "prepare", str(tiny_gguf)]) == 0
    out = capsys.readouterr().out
    assert "converted and loaded on transformers" in out and str(folder) in out
    assert (folder / "config.json").is_file()
    assert main(["models", "prepare", str(tiny_gguf)]) == 0
    assert "loaded (already converted) on transformers" in capsys.readouterr().out


def test_prepare_says_a_model_folder_has_nothing_to_convert(tiny_dir, capsys):
    assert main(["models", "prepare", str(tiny_dir)]) == 0
    assert "not a GGUF: nothing to convert" in capsys.readouterr().out
