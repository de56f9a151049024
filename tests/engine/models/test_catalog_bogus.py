"""A folder that is not a model is never listed as usable: weights that cannot be read."""

import json

from engine.models import catalog, pairing


def test_a_27_byte_folder_is_not_ready(tmp_path):
    folder = tmp_path / "not-a-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (folder / "model.safetensors").write_bytes(b"x")
    entry = catalog.describe_path(folder)
    assert not entry.usable
    assert entry.problem == "its weights cannot be read (not safetensors, or cut short)"
    assert pairing.compatible_drafts(entry, [entry]) == []

