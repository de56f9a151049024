"""Drafts that can help: the draft list offers smaller models only (those of another tokenizer:
test_gui_cross_drafts), says when the draft is the target itself or when none is installed (with the known-good
pair to download); a model that fails to load never changes the chat's settings; a folder that is not a model is
never ready; out-of-range values are refused with their range."""

import json

import pytest

from engine.core.errors import ModelLoadError
from engine.models.pairs import DRAFT_IS_TARGET
from fakes import FakeEngine
from gui import theme
from gui.views.main.window import MainWindow

WAIT_MS = 20_000


@pytest.fixture(autouse=True)
def empty_hub_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))


def bogus_folder(root):
    folder = root / "not-a-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (folder / "model.safetensors").write_bytes(b"x")
    return folder


def test_no_compatible_smaller_draft_is_said_with_the_known_pair(make_window, qtbot):
    window = make_window()
    controls = window.controls
    with qtbot.waitSignal(window.draft_choices_shown, timeout=WAIT_MS) as blocker:
        controls.apply(method="draft-model")
    choices = blocker.args[0]
    assert choices.names == () and "default" in choices.target_aliases
    assert controls.draft.count() == 0  # the target itself is not offered as its own draft
    note = controls.draft_note.text()
    assert "No compatible, smaller draft is installed for SmolLM2-135M-Instruct (built-in)" in note
    assert "load HuggingFaceTB/SmolLM2-1.7B-Instruct as the target" in note
    assert controls.draft_download.isVisibleTo(controls)
    assert controls.draft_download.text() == "Download SmolLM2-1.7B-Instruct"  # the repo's name; the tip's the id
    assert "HuggingFaceTB/SmolLM2-1.7B-Instruct" in controls.draft_download.toolTip()
    # typing the target itself as the draft: the settings panel says what the Models window says
    controls.apply(draft="default")
    assert controls.draft_note.text() == f"⚠ {DRAFT_IS_TARGET}"
    assert controls.usable_draft() is None
    controls.apply(draft="/models/SmolLM2-135M-Instruct.Q2_K.gguf")  # a draft given: it is checked when it loads
    assert not controls.draft_note.isVisibleTo(controls) and not controls.draft_download.isVisibleTo(controls)
    controls.apply(draft="")
    assert "No compatible, smaller draft" in controls.draft_note.text() and controls.draft_download.isVisibleTo(controls)
    controls.apply(method="prompt-lookup")
    assert not controls.draft_note.isVisibleTo(controls) and not controls.draft_download.isVisibleTo(controls)


def test_out_of_range_values_are_refused_with_the_range(make_window):
    window = make_window()  # the fake model has 12 layers
    controls = window.controls
    controls.apply(method="early-exit")
    controls.param_controls["layers"].setValue(40)
    assert controls.param_controls["layers"].value() == 40  # not silently 4
    assert "from 1 to 11 for this model (12 layers), got 40" in controls.problem.text()
    assert not window.send_button.isEnabled()
    controls.apply(method="prompt-lookup", layers=0)
    controls.k.setValue(70)
    assert "k must be an integer from 1 to 64, got 70" in controls.problem.text()
    controls.k.setValue(4)
    assert not controls.problem.isVisibleTo(controls) and window.send_button.isEnabled()


def test_a_failed_load_never_changes_the_chats_settings(qtbot, tmp_path):
    folder = str(bogus_folder(tmp_path))
    engine = FakeEngine()

    def loader(name, progress=None, **options):
        if name == folder:
            raise ModelLoadError("Couldn't instantiate the backend tokenizer")
        return engine

    window = MainWindow(loader=loader, palette=theme.LIGHT, persist=True)
    qtbot.addWidget(window)
    try:
        with qtbot.waitSignal(window.model_ready, timeout=WAIT_MS):
            window.start()
        window.controls.apply(method="prompt-lookup", k=3)
        before = window.controls.values()
        with qtbot.waitSignal(window.request_failed, timeout=WAIT_MS):
            window.tools.load_from_manager(folder, folder, "auto", "auto")  # the Models window's Load
        assert window.controls.values() == before  # still prompt lookup, no draft, the loaded target
        assert window.controls.method_name() == "prompt-lookup" and window.controls.model_name() == "default"
    finally:
        window.shutdown()
    assert window.settings.chat_values()["method"] == "prompt-lookup"
    assert window.settings.chat_values().get("draft", "") != folder  # nothing of it survives a restart


def test_a_bogus_folder_is_never_ready_in_the_models_window(make_window, qtbot, tmp_path):
    folder = bogus_folder(tmp_path)
    window = make_window()
    manager = window.open_models()
    qtbot.addWidget(manager)
    with qtbot.waitSignal(manager.catalog_listed, timeout=WAIT_MS):
        manager.add_path(str(folder))
    row = next(r for r in range(manager.table.rowCount()) if manager.table.item(r, 0).text() == "not-a-model")
    status = manager.table.item(row, manager.table.columnCount() - 1).text()
    assert status == "its weights cannot be read (not safetensors, or cut short)"
    assert manager.target.findData(str(folder)) < 0 and manager.draft.findData(str(folder)) < 0
    manager.select(str(folder))
    assert not manager.use_draft_button.isEnabled() and not manager.use_target_button.isEnabled()


def test_eagle_takes_a_head_folder_from_the_draft_field_and_ignores_a_model_name(make_window, tmp_path):
    controls = make_window().controls
    controls.apply(method="eagle", draft=str(tmp_path))
    assert controls.draft.isEnabled()
    assert controls.read().spec.draft == str(tmp_path)
    controls.apply(draft="default")  # a model name left from draft-model: eagle looks for the model's own head
    assert controls.read().spec.draft is None
    controls.apply(method="draft-model")
    assert controls.read().spec.draft == "default"
