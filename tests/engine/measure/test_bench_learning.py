"""A benchmark of a config that learns from past replies (suffix:learn=true): it learns into a store of the run's
own, never the user's; `--learn-pass` runs it once over the prompts untimed first, so the timed run drafts from
the replies it learned (the repeat-chat case), while a config that does not learn is untouched by the pass."""

from __future__ import annotations

import os
from pathlib import Path

from engine.core.config import SamplingConfig, parse_spec
from engine.drafters.suffix_store import STORE_NAME, default_store_path
from engine.host import DATA_DIR_VARIABLE, data_root
from engine.measure.bench import own_learning_store, run_benchmark, summarise
from engine.measure.prompts import Prompt
from engine.runtime import local_engine
from engine_testkit import PROMPTS

LEARNING = parse_spec("suffix:k=6,learn=true")
NOT_LEARNING = parse_spec("suffix:k=6")
PROMPT_SET = [Prompt(f"p{i}", category, text[:160]) for i, (category, text) in enumerate(PROMPTS.items())][:3]


def test_only_a_learning_config_gets_a_store_of_its_own_and_the_users_is_left_alone(tmp_path, monkeypatch):
    monkeypatch.setenv(DATA_DIR_VARIABLE, str(tmp_path))
    with own_learning_store([NOT_LEARNING]) as store:
        assert store is None and data_root() == tmp_path
    with own_learning_store([NOT_LEARNING, LEARNING]) as store:
        assert store is not None and data_root() == Path(store) != tmp_path
        assert default_store_path() == Path(store) / STORE_NAME  # where the suffix drafter's store opens
        assert os.environ[DATA_DIR_VARIABLE] == str(tmp_path)  # the environment is never edited
    assert data_root() == tmp_path  # put back
    assert not os.path.exists(store)  # thrown away
    monkeypatch.delenv(DATA_DIR_VARIABLE)
    with own_learning_store([LEARNING]) as store:
        assert data_root() == Path(store)
    assert DATA_DIR_VARIABLE not in os.environ and data_root() != Path(store)


def test_a_learning_pass_lets_the_timed_run_draft_from_the_replies_it_learned(tiny_model, tmp_path, monkeypatch):
    monkeypatch.setenv(DATA_DIR_VARIABLE, str(tmp_path))
    figures = {}
    for learn_pass in (False, True):
        with own_learning_store([LEARNING]):
            results = run_benchmark(local_engine(tiny_model), PROMPT_SET, [NOT_LEARNING, LEARNING], 32,
                                    SamplingConfig(), learn_pass=learn_pass)
        figures[learn_pass] = summarise(results, False)
    for learn_pass, summary in figures.items():
        learning = summary[LEARNING.label()]["all"]
        assert learning["identical"] == len(PROMPT_SET), learn_pass  # greedy: still the target's own output
    before, after = (figures[p][LEARNING.label()]["all"] for p in (False, True))
    assert after["accepted_tokens"] > before["accepted_tokens"]
    assert after["mean_accepted_length"] > before["mean_accepted_length"]
    # the config that does not learn drafts exactly as much with the pass as without
    plain_suffix = [figures[p][NOT_LEARNING.label()]["all"] for p in (False, True)]
    assert plain_suffix[0]["drafted_tokens"] == plain_suffix[1]["drafted_tokens"]
    assert not (tmp_path / STORE_NAME).exists()  # the user's data folder was never written
