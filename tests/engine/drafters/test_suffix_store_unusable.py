"""Suffix decoding's store where it can't be opened (engine.drafters.suffix_store.StoreUnavailable): a data folder
that can't be made, a store another process holds. Nothing is put aside (what was learned stays), and the
drafter runs without learning for that run, saying why once as a warning."""

from __future__ import annotations

import sqlite3

import pytest

from engine.core.config import SamplingConfig, SpecConfig
from engine.drafters import make_drafter
from engine.drafters.suffix_store import STORE_NAME, StoreUnavailable, SuffixStore, forget_replies


def test_a_store_under_a_file_is_unavailable_and_nothing_is_made(tmp_path):
    file = tmp_path / "a-file"
    file.write_text("not a folder")
    with pytest.raises(StoreUnavailable, match=rf"the suffix-decoding store {file}/x/{STORE_NAME} can't be opened "
                                               r"\(\[Errno 20\] Not a directory"):
        SuffixStore(file / "x" / STORE_NAME)
    assert file.read_text() == "not a folder"


def test_a_store_another_process_holds_is_unavailable_not_started_afresh(tmp_path):
    path = tmp_path / STORE_NAME
    store = SuffixStore(path)
    store.add("m", [1, 2, 3], 10)
    store.close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreUnavailable, match="locked"):
            SuffixStore(path)
        assert "a deleted chat's replies are still in it" in forget_replies([[1, 2, 3]], path)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    again = SuffixStore(path)
    assert again.replies("m", 10) == [[1, 2, 3]] and again.warning is None  # what was learned is still there
    again.close()


def test_learning_without_a_usable_data_folder_is_off_for_the_run_said_once(tmp_path, monkeypatch, tiny_model):
    file = tmp_path / "a-file"
    file.write_text("")
    monkeypatch.setenv("SPECSCOPE_DATA_DIR", str(file / "data"))
    drafter = make_drafter(SpecConfig(method="suffix", params={"learn": True}), tiny_model)
    assert drafter.learned is None
    drafter.begin(SamplingConfig(), None)
    assert drafter.warning.startswith("suffix: learning is off for this run: the suffix-decoding store ")
    assert "Not a directory" in drafter.warning and drafter.note is None
    assert drafter.propose([1, 2, 3, 1, 2], 2).ids == [3, 1]  # it still drafts from the conversation
    drafter.learn([4, 5, 6])  # a finished reply: nothing to keep it in, nothing raised
    drafter.begin(SamplingConfig(), None)
    assert drafter.warning is None and drafter.note is None
