"""llama.cpp's n-gram pools in the window, with nothing written for them outside their modules: the settings
panel lists ngram-mod and ngram-map (enabled on both backends, their descriptions as tooltips), shows their
parameters with llama.cpp's defaults, reads them back into the setting, and refuses one out of range in one
line; the compare window's rows and the fastest-setting sweep offer them too."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from engine.core.methods import method_spec
from engine.measure.fastest import sweep_methods
from fakes import FakeEngine, FakeModel
from gui.views.chat.methods import add_method_items
from gui.views.main.window import MainWindow

WAIT_MS = 20_000
POOLS = ("ngram-mod", "ngram-map")


@pytest.fixture(autouse=True)
def empty_hub_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))


def open_on(qtbot, backend: str) -> MainWindow:
    def load(name, progress=None, **options):
        return FakeEngine(target=FakeModel(name=name, backend=backend,
                                           dtype="Q4_1" if backend == "llama.cpp" else "float32"))
    window = MainWindow(loader=load, persist=False)
    qtbot.addWidget(window)
    window.show()
    with qtbot.waitSignal(window.model_ready, timeout=WAIT_MS):
        window.start()
    qtbot.waitUntil(lambda: window.controls.method_choice("none") is not None, timeout=WAIT_MS)
    return window


@pytest.mark.parametrize("backend", ["llama.cpp", "transformers"])
def test_the_panel_offers_the_pools_with_llama_cpps_parameters(qtbot, backend):
    window = open_on(qtbot, backend)
    controls = window.controls
    try:
        combo = controls.method
        for name in POOLS:
            row = combo.findData(name)
            assert row >= 0, name
            assert combo.model().item(row).isEnabled(), name
            assert combo.itemData(row, Qt.ItemDataRole.ToolTipRole) == method_spec(name).description
        controls.apply(method="ngram-mod", k=64)
        assert controls.param_controls["n_match"].value() == 24 and controls.param_controls["n_min"].value() == 48
        controls.apply(n_match=8)
        spec = controls.read().spec
        assert spec.label() == "ngram-mod:k=64,n_match=8" and spec.param("n_max") == 64
        controls.apply(n_match=2000)
        assert controls.config_problem() == "ngram-mod n_match must be from 1 to 1024, got 2000"
        assert not window.send_button.isEnabled()
        controls.apply(method="ngram-map", four_values=True)
        assert controls.read().spec.label() == "ngram-map:k=64,four_values=1"
    finally:
        window.shutdown()


def test_the_compare_rows_and_the_fastest_sweep_offer_the_pools(qtbot):
    from PySide6.QtWidgets import QComboBox

    from engine.core.methods import speculative_methods
    combo = QComboBox()
    qtbot.addWidget(combo)
    add_method_items(combo, speculative_methods())  # what a compare row lists
    assert all(combo.findData(name) >= 0 for name in POOLS)
    assert set(POOLS) <= {m.name for m in sweep_methods()}
