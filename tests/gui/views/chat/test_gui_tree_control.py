"""The tree control (gui.views.chat.tree_control): in the settings panel it is enabled only for a method whose
MethodSpec branches (else disabled, its tooltip saying the method drafts chains), gives the SpecConfig its node
budget, and is remembered with the other fields and restored from a reopened chat's record; in the compare
window's rows it sets each setting's tree, so a chain and a tree compare side by side."""

import dataclasses

import pytest

from engine.core.config import MAX_TREE, SamplingConfig, SpecConfig
from engine.core.methods import method_spec, methods, registered
from gui.persistence.replay import apply_values
from gui.persistence.settings import AppSettings, app_settings
from gui.sessions.chat import Settings, settings_record
from gui.views.chat.controls import ControlsPanel
from gui.views.compare.parts import SettingRow


@pytest.fixture
def branching():
    """A method that drafts trees: the draft model's, said to branch, under a name of its own."""
    with registered(dataclasses.replace(method_spec("draft-model"), name="tree-toy", label="tree toy",
                                        branches=True)) as spec:
        yield spec


@pytest.fixture
def chains():
    """A method that drafts chains only: the draft model's, said not to branch, under a name of its own."""
    with registered(dataclasses.replace(method_spec("draft-model"), name="chain-toy", label="chain toy",
                                        branches=False)) as spec:
        yield spec


def panel_of(qtbot) -> ControlsPanel:
    panel = ControlsPanel()
    qtbot.addWidget(panel)
    return panel


def test_the_control_is_enabled_only_for_a_method_that_branches(qtbot, branching, chains):
    panel = panel_of(qtbot)
    assert (panel.tree.minimum(), panel.tree.maximum()) == (0, MAX_TREE)
    for method in (m for m in methods() if m.offered):
        panel.apply(method=method.name)
        assert panel.tree.isEnabled() == method.branches, method.name
        if not method.branches:
            assert "drafts chains" in panel.tree.toolTip()
    panel.apply(method=branching.name, draft="default", k=3, tree=12)
    assert panel.tree.isEnabled() and "drafts chains" not in panel.tree.toolTip()
    assert panel.read().spec.tree == 12 and panel.values()["tree"] == 12
    panel.apply(method=chains.name)
    assert not panel.tree.isEnabled() and panel.read().spec.tree == 0  # a chain method is given no tree
    assert panel.tree.toolTip() == "chain toy drafts chains: one continuation a round, no tree"


def test_the_tree_is_remembered_and_restored_from_a_reopened_chat(qtbot, branching):
    panel = panel_of(qtbot)
    panel.apply(method=branching.name, draft="default", k=3, tree=24)
    remembered = AppSettings(app_settings())
    remembered.set_chat_values(panel.values())
    again = panel_of(qtbot)
    again.apply(**remembered.chat_values())
    assert again.read().spec.tree == 24
    spec = SpecConfig(method=branching.name, k=3, draft="default", tree=40)
    reopened = panel_of(qtbot)
    reopened.apply(**apply_values(settings_record(Settings(model="default", spec=spec, sampling=SamplingConfig(),
                                                                 max_new_tokens=64, system_prompt=""), "default")))
    assert reopened.read().spec == spec


def test_a_compare_row_sets_its_settings_tree(qtbot, branching, chains):
    tree = SpecConfig(method=branching.name, k=3, draft="default", tree=16)
    row = SettingRow(tree)
    qtbot.addWidget(row)
    assert row.tree.isEnabled() and row.spec() == tree and "tree=16" in row.spec().label()
    chain = SettingRow(SpecConfig(method=chains.name, k=3, draft="default"))
    qtbot.addWidget(chain)
    assert not chain.tree.isEnabled() and chain.spec().tree == 0 and "drafts chains" in chain.tree.toolTip()
    row.method.setCurrentIndex(row.method.findData(chains.name))
    assert not row.tree.isEnabled() and row.spec().tree == 0


def test_the_command_lines_tree_goes_into_the_panel(qtbot, branching):
    from types import SimpleNamespace

    from gui import app as gui_app
    window = SimpleNamespace(controls=panel_of(qtbot))
    args = gui_app.parse_args(["--method", branching.name, "--draft", "default", "--tree", "8"])
    gui_app.apply_args(window, args)
    assert window.controls.read().spec.tree == 8 and gui_app.held_problem(window, args) is None
