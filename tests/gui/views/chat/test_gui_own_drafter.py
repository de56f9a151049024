"""A model that drafts for itself (engine.models.catalog.own_drafter: MTP layers, a known Gemma 4 assistant): the
settings panel offers its method first with a one-line note, selects it unless a method was chosen (k capped
at the MTP layers where they chain, the assistant draft filled in), and the Models window says so; a model
without changes nothing. A GGUF's MTP layers (inside, or an mtp-*.gguf head beside it) draft on llama.cpp,
where the draft field takes an mtp-*.gguf head file."""

import os
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402

from engine.models import catalog  # noqa: E402
from engine.core.methods import methods as registered_methods  # noqa: E402
from gui.views.chat.controls import ControlsPanel  # noqa: E402

WAIT_MS = 20_000


@pytest.fixture(autouse=True)
def empty_hub_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))


@pytest.fixture(scope="module")
def plain_entry():
    return catalog.describe_default()  # the built-in model: no MTP layers, no assistant


@pytest.fixture(scope="module")
def folder_entry(plain_entry):
    """The built-in model as a Hugging Face folder would describe it (its MTP layers draft on transformers)."""
    return replace(plain_entry, kind="folder", path=Path("/models/tiny-mtp"), weights_format="safetensors")


@pytest.fixture(scope="module")
def mtp_ggufs(tmp_path_factory):
    """A qwen35 GGUF with its nextn layer inside, and a target with its mtp-*.gguf head beside it."""
    from tests.fixtures.tiny_gguf import build, tiny_tokenizer
    root, tokenizer = tmp_path_factory.mktemp("mtp-ggufs"), tiny_tokenizer()
    inside, = build("qwen35-mtp", root / "inside" / "qwen35-mtp.gguf", tokenizer)
    target, head = build("qwen35-mtp-sidecar", root / "pair" / "tiny-qwen35.gguf", tokenizer)
    return {"inside": inside, "target": target, "head": head}


def methods(panel: ControlsPanel) -> list[str]:
    return [panel.method.itemData(i) for i in range(panel.method.count())]


def test_a_model_with_mtp_layers_offers_mtp_first_with_k_capped(qtbot, folder_entry):
    panel = ControlsPanel()
    qtbot.addWidget(panel)
    panel.k.setValue(4)
    panel.set_own_drafter(replace(folder_entry, n_mtp_layers=2))
    assert methods(panel)[0] == "mtp" and sorted(methods(panel)) == sorted(m.name for m in registered_methods())
    assert panel.method_name() == "mtp" and panel.k.value() == 2
    assert not panel.own_note.isHidden()
    assert panel.own_note.text() == "This model drafts for itself: 2 MTP layers (method mtp, k ≤ 2)."
    assert panel.read().spec.method == "mtp"


def test_a_chosen_method_is_kept_and_mtp_still_comes_first(qtbot, folder_entry):
    panel = ControlsPanel()
    qtbot.addWidget(panel)
    panel.apply(method="prompt-lookup", k=5)
    panel.set_own_drafter(replace(folder_entry, n_mtp_layers=1))
    assert methods(panel)[0] == "mtp"
    assert panel.method_name() == "prompt-lookup" and panel.k.value() == 5
    assert "drafts for itself" in panel.own_note.text()


def test_a_gemma_4_target_prefills_its_assistant(qtbot, plain_entry):
    panel = ControlsPanel()
    qtbot.addWidget(panel)
    panel.set_own_drafter(replace(plain_entry, name="google/gemma-4-E2B-it", label="google/gemma-4-E2B-it"))
    assert methods(panel)[0] == "assistant" and panel.method_name() == "assistant"
    assert panel.draft_name() == "google/gemma-4-E2B-it-assistant"
    assert "assistant google/gemma-4-E2B-it-assistant" in panel.own_note.text()


def test_a_model_without_its_own_drafter_changes_nothing(qtbot, plain_entry, monkeypatch):
    panel = ControlsPanel()
    qtbot.addWidget(panel)
    panel.set_own_drafter(plain_entry)
    assert methods(panel) == [m.name for m in registered_methods()] and panel.method_name() == registered_methods()[0].name
    assert panel.own_note.isHidden() and panel.own_note.text() == ""
    # after a model that had one, the next without one puts the list back and hides the note
    monkeypatch.setattr(catalog, "own_drafter", lambda entry: ("mtp", "drafts for itself: 1 MTP layer"))
    panel.apply(method="early-exit")
    panel.set_own_drafter(replace(plain_entry, n_mtp_layers=1))
    assert methods(panel)[0] == "mtp"
    monkeypatch.setattr(catalog, "own_drafter", lambda entry: None)
    panel.set_own_drafter(plain_entry)
    assert methods(panel) == [m.name for m in registered_methods()] and panel.method_name() == "early-exit"
    assert panel.own_note.isHidden()


def test_the_window_offers_the_loaded_targets_own_drafter(make_window, qtbot, monkeypatch):
    described = catalog.describe_name
    monkeypatch.setattr(catalog, "describe_name", lambda name: replace(described(name), n_mtp_layers=1,
                                                                       path=Path("/models/tiny-mtp")))
    window = make_window()
    controls = window.controls
    qtbot.waitUntil(lambda: controls.method.itemData(0) == "mtp", timeout=WAIT_MS)
    assert controls.own_note.text() == "This model drafts for itself: 1 MTP layer (method mtp, k ≤ 1)."
    assert not controls.own_note.isHidden()


def test_a_gguf_with_mtp_layers_picks_mtp_on_llama_cpp_with_k_kept(qtbot, mtp_ggufs, tmp_path, monkeypatch):
    """One head on llama.cpp re-applies itself: mtp is picked, k left as it was, the note says llama.cpp."""
    monkeypatch.setenv("SPECSCOPE_CACHE_DIR", str(tmp_path))  # the GGUF facts are cached here
    for name, words in (("inside", "1 MTP layer (llama.cpp)"),
                        ("target", "1 MTP layer in mtp-tiny-qwen35.gguf (llama.cpp)")):
        panel = ControlsPanel()
        qtbot.addWidget(panel)
        panel.k.setValue(6)
        panel.set_own_drafter(catalog.describe_path(mtp_ggufs[name]))
        assert methods(panel)[0] == "mtp" and panel.method_name() == "mtp" and panel.k.value() == 6, name
        assert panel.own_note.text() == f"This model drafts for itself: {words}."
        assert panel.read().spec.method == "mtp" and panel.read().spec.k == 6


def test_the_draft_field_of_mtp_takes_an_mtp_head_file(qtbot, mtp_ggufs, tmp_path):
    """mtp's draft names an mtp-*.gguf head (its MethodSpec.head_file); eagle's a head folder; anything else typed
    there (a draft model left from another method, the target itself) is not a head: the model's own is used."""
    from engine.core.methods import head_method
    panel = ControlsPanel()
    qtbot.addWidget(panel)
    panel.apply(method="mtp", draft=str(mtp_ggufs["head"]))
    assert panel.draft.isEnabled() and panel.draft_name() == str(mtp_ggufs["head"])
    assert panel.read().spec.draft == str(mtp_ggufs["head"])
    assert panel.draft.lineEdit().placeholderText() == "an mtp-*.gguf head (empty: the model's own)"
    for not_a_head in (mtp_ggufs["target"], mtp_ggufs["target"].parent, tmp_path / "mtp-gone.gguf"):
        panel.apply(draft=str(not_a_head))
        assert panel.draft_name() is None, not_a_head
    panel.apply(method="eagle", draft=str(tmp_path))
    assert panel.draft_name() == str(tmp_path)
    assert panel.draft.lineEdit().placeholderText() == "a head folder (empty: the model's own)"
    panel.apply(draft=str(mtp_ggufs["head"]))
    assert panel.draft_name() is None  # a file is no eagle head
    assert head_method() == "eagle"  # the trained head the training dialog selects, not mtp's file


def test_the_models_window_says_a_model_drafts_for_itself(monkeypatch, qtbot, plain_entry):
    from gui import theme
    from gui.persistence.settings import AppSettings
    from gui.views.dialogs.models import COLUMNS, ModelManager

    monkeypatch.setattr(catalog, "own_drafter", lambda entry: ("mtp", "drafts for itself: 3 MTP layers"))
    manager = ModelManager(AppSettings(), theme.LIGHT)
    qtbot.addWidget(manager)
    manager.entries = [plain_entry]
    manager._fill_table()
    status = manager.table.item(0, COLUMNS.index("Status")).text()
    assert status.endswith(" · this model drafts for itself: 3 MTP layers")
    assert "This model drafts for itself: 3 MTP layers." in manager.table.item(0, 0).toolTip()
    manager.shutdown()
