"""Suffix decoding in the window, with nothing written for it outside its module: the settings panel lists it on
both backends, shows "Learn from my chats" (off by default) only while suffix is the method, reads it back into
the setting; a parameter out of range is refused in one line; the compare rows and the fastest sweep offer it."""

from __future__ import annotations

import pytest

from engine.core.methods import speculative_methods
from engine.measure.fastest import sweep_methods
from gui.views.chat.methods import add_method_items
from test_gui_ngram_pool import open_on


@pytest.fixture(autouse=True)
def empty_hub_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))


@pytest.mark.parametrize("backend", ["llama.cpp", "transformers"])
def test_the_panel_offers_suffix_with_learning_off_by_default(qtbot, backend):
    window = open_on(qtbot, backend)
    controls = window.controls
    try:
        row = controls.method.findData("suffix")
        assert row >= 0 and controls.method.model().item(row).isEnabled()
        learn = controls.param_controls["learn"]
        controls.apply(method="prompt-lookup", k=4)
        assert not controls.spec_form.isRowVisible(learn)
        controls.apply(method="suffix", k=8)
        assert controls.spec_form.isRowVisible(learn) and not learn.isChecked()
        assert controls.spec_form.labelForField(learn).text() == "Learn from my chats"
        assert controls.read().spec.label() == "suffix:k=8"
        learn.setChecked(True)
        spec = controls.read().spec
        assert spec.param("learn") is True and spec.label() == "suffix:k=8,learn=1"
        controls.apply(min_token_prob=2.0)
        assert controls.config_problem() == "suffix min_token_prob must be from 0 to 1, got 2.0"
    finally:
        window.shutdown()


def test_the_compare_rows_and_the_fastest_sweep_offer_suffix(qtbot):
    from PySide6.QtWidgets import QComboBox
    combo = QComboBox()
    qtbot.addWidget(combo)
    add_method_items(combo, speculative_methods())
    assert combo.findData("suffix") >= 0
    assert "suffix" in {m.name for m in sweep_methods()}


def test_a_reply_shows_the_drafters_notes_as_information_and_its_problems_as_warnings(qtbot):
    from PySide6.QtGui import QColor, QTextCursor

    from gui import theme
    from gui.sessions.session_model import Turn
    from gui.views.chat.transcript import TranscriptView

    palette = theme.LIGHT
    view = TranscriptView(lambda serial: None, palette)
    qtbot.addWidget(view)
    view.begin_assistant(Turn(role="assistant", spec_label="suffix:k=8,learn=1",
                              warnings=("the suffix store could not be read: started afresh",),
                              notes=("suffix: learning from this model's past replies (3 kept)",)))
    lines = view.toPlainText().splitlines()
    assert "⚠ the suffix store could not be read: started afresh" in lines
    assert "suffix: learning from this model's past replies (3 kept)" in lines  # no warning sign

    def colour_of(text: str) -> QColor:
        cursor = view.document().find(text)
        cursor.setPosition(cursor.selectionStart() + 1, QTextCursor.MoveMode.MoveAnchor)
        return cursor.charFormat().foreground().color()

    assert colour_of("the suffix store") == QColor(palette.warning)
    assert colour_of("learning from") == QColor(palette.text_dim) != QColor(palette.warning)
