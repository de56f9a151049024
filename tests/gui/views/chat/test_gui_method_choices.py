"""The settings panel's method list follows the loaded model's method table (engine.models.availability): every
method is listed, one the model can't use is disabled with the reason as its tooltip; a method that runs on
another backend says why and what plain decoding costs on each (a stored plain speed, else "not measured yet");
the draft field's hints are the chosen method's own."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from engine.core.methods import method_spec, methods as registered_methods
from engine.models import catalog
from engine.models.availability import entry_choices
from fakes import FakeEngine, FakeModel
from gui.sessions.baselines import baseline_key
from gui.views.main.window import MainWindow

WAIT_MS = 20_000


@pytest.fixture(autouse=True)
def empty_hub_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))


def open_on(qtbot, backend: str) -> MainWindow:
    """The built-in model ("default") on `backend` as the loader gives it (a fake engine), its method table
    looked up from its real catalog entry."""
    def load(name, progress=None, **options):
        on = backend if (options.get("backend") or "auto") == "auto" else options["backend"]
        return FakeEngine(target=FakeModel(name=name, backend=on, dtype="Q4_1" if on == "llama.cpp" else "float32"))
    window = MainWindow(loader=load, persist=False)
    qtbot.addWidget(window)
    window.show()
    with qtbot.waitSignal(window.model_ready, timeout=WAIT_MS):
        window.start()
    qtbot.waitUntil(lambda: window.controls.method_choice("none") is not None, timeout=WAIT_MS)
    return window


def listed(controls) -> dict[str, tuple[bool, str]]:
    """method -> (enabled, tooltip) as the list shows them."""
    combo = controls.method
    return {combo.itemData(row): (combo.model().item(row).isEnabled(),
                                  combo.itemData(row, Qt.ItemDataRole.ToolTipRole)) for row in range(combo.count())}


@pytest.mark.parametrize("loaded", ["llama.cpp", "transformers"])
def test_the_disabled_methods_are_the_tables_refusals(qtbot, loaded):
    window = open_on(qtbot, loaded)
    try:
        table = {c.method: c for c in entry_choices(catalog.describe_name("default"), "auto", loaded)}
        shown = listed(window.controls)
        assert sorted(shown) == sorted(m.name for m in registered_methods() if m.offered)  # every method listed
        for name, (enabled, tooltip) in shown.items():
            choice = table[name]
            assert enabled == choice.usable, name
            assert tooltip == (method_spec(name).description if choice.usable else choice.refusal), name
        disabled = {name for name, (enabled, _) in shown.items() if not enabled}
        assert disabled == {name for name, choice in table.items() if not choice.usable} and disabled
        mtp = method_spec("mtp").name
        assert shown[mtp][1] == "SmolLM2-135M-Instruct (built-in) has no MTP layers (a llama model)"
        # a disabled method set anyway (a remembered setting) is refused with its reason: Send stays off
        window.controls.apply(method=mtp)
        assert window.controls.config_problem() == table[mtp].refusal
        assert not window.send_button.isEnabled()
    finally:
        window.shutdown()


def test_a_moved_method_names_the_stored_plain_speeds(qtbot):
    window = open_on(qtbot, "llama.cpp")
    controls, session = window.controls, window.session
    try:
        session.record_baseline(80.0, replace=True, at=0.0)
        window.loading.baseline_changed()
        controls.apply(method="early-exit")
        on_llama = session.baselines[baseline_key(session.model_info)].describe()
        assert f"Plain decoding on llama.cpp: {on_llama}; on transformers: not measured yet." in \
            controls.backend_note.text()
        with qtbot.waitSignal(window.reply_finished, timeout=WAIT_MS):
            assert window.send("hello")  # loads the model on transformers too: its plain speed is looked up
        there = session.loaded_as["transformers"]
        session.baselines[baseline_key(there)] = type(session.baseline())(20.0, 0.0)
        window.loading.loaded_elsewhere(there)
        assert controls.backend_note.text().endswith(
            f"Plain decoding on llama.cpp: {on_llama}; on transformers: {session.baselines[baseline_key(there)].describe()}.")
        assert "80.0 tok/s" in on_llama and "20.0 tok/s" in controls.backend_note.text()
    finally:
        window.shutdown()


def test_the_draft_hints_are_the_chosen_methods(qtbot):
    """The draft-model hint (no compatible smaller draft installed, a download) is for the method that drafts
    with a smaller model; the assistant's field says what its draft is instead."""
    window = open_on(qtbot, "llama.cpp")
    controls = window.controls
    try:
        with qtbot.waitSignal(window.draft_choices_shown, timeout=WAIT_MS):
            controls.apply(method="draft-model")
        assert "No compatible, smaller draft is installed" in controls.draft_note.text()
        assert controls.draft_download.isVisibleTo(controls)
        assistant = method_spec("assistant")
        controls.apply(method=assistant.name)
        assert not controls.draft_note.isVisibleTo(controls) and not controls.draft_download.isVisibleTo(controls)
        assert controls.draft.lineEdit().placeholderText() == assistant.draft_help
        assert assistant.draft_help in controls.draft.toolTip()
    finally:
        window.shutdown()
