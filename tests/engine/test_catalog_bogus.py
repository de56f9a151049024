"""A folder that is not a model is never listed as usable: unreadable weights, no tokenizer."""

import json

from engine import catalog


def test_a_27_byte_folder_is_not_ready(tmp_path):
    folder = tmp_path / "not-a-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (folder / "model.safetensors").write_bytes(b"x")
    entry = catalog.describe_path(folder)
    assert not entry.usable
    assert "weights cannot be read" in entry.problem and "no tokenizer" in entry.problem
    assert entry not in catalog.compatible_drafts(entry, [entry])


def test_a_model_without_a_tokenizer_is_not_ready(tmp_path):
    from safetensors.numpy import save
    import numpy as np

    folder = tmp_path / "weights-only"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}))
    (folder / "model.safetensors").write_bytes(save({"w": np.zeros((2, 2), np.float32)}))
    entry = catalog.describe_path(folder)
    assert entry.n_parameters == 4 and not entry.usable
    assert entry.problem == "it has no tokenizer (tokenizer.json, tokenizer.model or vocab.json)"
