"""A model that drafts for itself (engine.models.catalog.own_drafter: MTP layers, a known Gemma 4 assistant): the
settings panel offers its method first with a one-line note, selects it unless a method was chosen (k capped
at the MTP layers, the assistant draft filled in), and the Models window says so; a model without changes
nothing."""

import os
from dataclasses import replace

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


def methods(panel: ControlsPanel) -> list[str]:
    return [panel.method.itemData(i) for i in range(panel.method.count())]


def test_a_model_with_mtp_layers_offers_mtp_first_with_k_capped(qtbot, plain_entry):
    panel = ControlsPanel()
    qtbot.addWidget(panel)
    panel.k.setValue(4)
    panel.set_own_drafter(replace(plain_entry, n_mtp_layers=2))
    assert methods(panel)[0] == "mtp" and sorted(methods(panel)) == sorted(m.name for m in registered_methods())
    assert panel.method_name() == "mtp" and panel.k.value() == 2
    assert not panel.own_note.isHidden()
    assert panel.own_note.text() == "This model drafts for itself: 2 MTP layers (method mtp, k ≤ 2)."
    assert panel.read().spec.method == "mtp"


def test_a_chosen_method_is_kept_and_mtp_still_comes_first(qtbot, plain_entry):
    panel = ControlsPanel()
    qtbot.addWidget(panel)
    panel.apply(method="prompt-lookup", k=5)
    panel.set_own_drafter(replace(plain_entry, n_mtp_layers=1))
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
    monkeypatch.setattr(catalog, "describe_name", lambda name: replace(described(name), n_mtp_layers=1))
    window = make_window()
    controls = window.controls
    qtbot.waitUntil(lambda: controls.method.itemData(0) == "mtp", timeout=WAIT_MS)
    assert controls.own_note.text() == "This model drafts for itself: 1 MTP layer (method mtp, k ≤ 1)."
    assert not controls.own_note.isHidden()


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
