"""Drafts of another tokenizer are offered after those of the target's own, marked with what they give (they draft
through text, slower per draft, exact): in the settings panel's draft list, whose field keeps the model's name
(the draft read back), and in the Models window's list of drafts found."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QStyleOptionViewItem

from engine.core.compat import CROSS_DRAFT_WORDS
from test_gui_models import add_cached_repo, model_files, open_manager, tokenizers  # noqa: F401  (a fixture)

WAIT_MS = 20_000


@pytest.fixture
def cache_with(tmp_path, monkeypatch, tokenizers):  # noqa: F811
    """cache_with(*names): a hub cache holding acme/big-chat (the target), and of acme/small-chat (its tokenizer)
    and other/stranger (another tokenizer, smaller still) those named."""
    tiny, other = tokenizers
    models = {"acme/big-chat": (tiny, 4000, 4), "acme/small-chat": (tiny, 500, 2), "other/stranger": (other, 300, 1)}

    def make(*names: str):
        cache = tmp_path / "hf" / "hub"
        monkeypatch.setenv("HF_HUB_CACHE", str(cache))
        for name in ("acme/big-chat", *names):
            tokenizer, rows, layers = models[name]
            add_cached_repo(cache, name, model_files(tmp_path / "src" / name, tokenizer, rows=rows, layers=layers))
        return cache
    return make


def shown(combo, row: int) -> str:
    """What the open list shows for a row (its delegate's text)."""
    option = QStyleOptionViewItem()
    combo.view().itemDelegate().initStyleOption(option, combo.model().index(row, 0))
    return option.text


def draft_list_for_big_chat(window, qtbot):
    with qtbot.waitSignal(window.model_ready, timeout=WAIT_MS):
        window.load_model("acme/big-chat")
    with qtbot.waitSignal(window.draft_choices_shown, timeout=WAIT_MS) as blocker:
        window.controls.apply(method="draft-model")
    return blocker.args[0]


def test_the_settings_draft_list_marks_a_draft_of_another_tokenizer_after_the_targets_own(make_window, qtbot,
                                                                                          cache_with):
    cache_with("acme/small-chat", "other/stranger")
    window = make_window()
    controls, draft = window.controls, window.controls.draft
    choices = draft_list_for_big_chat(window, qtbot)
    assert choices.names == ("acme/small-chat", "other/stranger") and choices.cross_tokenizer == {"other/stranger"}
    assert [draft.itemText(i) for i in range(draft.count())] == ["acme/small-chat", "other/stranger"]
    assert draft.currentText() == "acme/small-chat"  # the target's own tokenizer stays the default
    assert shown(draft, 0) == "acme/small-chat" and not draft.itemData(0, Qt.ItemDataRole.ToolTipRole)
    assert shown(draft, 1) == f"other/stranger — {CROSS_DRAFT_WORDS}"
    assert CROSS_DRAFT_WORDS in draft.itemData(1, Qt.ItemDataRole.ToolTipRole)
    assert not controls.draft_note.isVisibleTo(controls)
    draft.setCurrentIndex(1)  # picked in the list: the field holds the name, read back as the draft
    assert draft.currentText() == "other/stranger" and controls.usable_draft() == "other/stranger"
    assert controls.read().spec.draft == "other/stranger"
    assert controls.draft_note.isVisibleTo(controls)
    assert controls.draft_note.text() == f"other/stranger has {CROSS_DRAFT_WORDS}."


def test_only_a_draft_of_another_tokenizer_is_offered_without_the_none_installed_note(make_window, qtbot,
                                                                                     cache_with):
    cache_with("other/stranger")
    window = make_window()
    controls = window.controls
    choices = draft_list_for_big_chat(window, qtbot)
    assert choices.names == ("other/stranger",) and choices.note == "" and choices.download is None
    assert controls.draft.currentText() == "other/stranger" and controls.usable_draft() == "other/stranger"
    assert controls.draft_note.text() == f"other/stranger has {CROSS_DRAFT_WORDS}."
    assert "No compatible" not in controls.draft_note.text() and not controls.draft_download.isVisibleTo(controls)


def test_the_models_window_lists_a_draft_of_another_tokenizer_after_the_targets_own(make_window, qtbot,
                                                                                   cache_with):
    cache_with("other/stranger", "acme/small-chat")
    window = make_window()
    manager = open_manager(window, qtbot)
    qtbot.addWidget(manager)
    with qtbot.waitSignal(manager.pair_checked, timeout=WAIT_MS,
                          check_params_cb=lambda v: v.target == "acme/big-chat" and v.draft is None) as blocker:
        manager.set_pair(target="acme/big-chat", draft=None)
    assert [(d.entry.name, d.same_tokenizer) for d in blocker.args[0].drafts] == [
        ("acme/small-chat", True), ("other/stranger", False)]
    assert manager.compatible_draft_names() == ["acme/small-chat", "other/stranger"]
    own, stranger = manager.drafts_list.item(0), manager.drafts_list.item(1)
    assert "another tokenizer" not in own.text() and "shares the target's tokenizer" in own.toolTip()
    assert stranger.text().startswith("other/stranger") and stranger.text().endswith(f" — {CROSS_DRAFT_WORDS}")
    assert CROSS_DRAFT_WORDS in stranger.toolTip()
    with qtbot.waitSignal(manager.pair_checked, timeout=WAIT_MS,
                          check_params_cb=lambda v: v.draft == "other/stranger") as blocker:
        manager.drafts_list.itemDoubleClicked.emit(stranger)
    assert blocker.args[0].compatible is True
    assert manager.verdict_label.text().startswith("✓ Different tokenizers: cross-tokenizer drafting")
