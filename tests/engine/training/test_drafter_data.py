"""The training data of `drafter train` (engine/training/data.py): batched replies equal the engine's own
greedy replies, a run stopped by its budget resumes without writing anything twice, cancel stops mid-batch,
and the job order puts held-out prompts early and extra sampled rounds last; --from-history reads the chat history
in the data folder (engine.host.history_path)."""

from __future__ import annotations

import json
import sqlite3
import threading
import time

import pytest

from engine.core.config import SamplingConfig, SpecConfig
from engine.core.errors import ConfigError
from engine.training.data import (Job, generate_batch, history_prompts, read_replies, reply_jobs, write_replies,
                                  _batches)
from engine.measure.prompts import Prompt
from engine.runtime import local_engine
from engine_testkit import run


def prompts(n: int, start: int = 0) -> list[Prompt]:
    return [Prompt(f"p{i}", "test", f"tell me about number {i} " * (1 + i % 3)) for i in range(start, start + n)]


def test_batched_greedy_replies_equal_the_engines_one_by_one(tiny_model):
    engine = local_engine(tiny_model)
    prompt_ids = [engine.prompt_ids([{"role": "user", "content": p.text}]) for p in prompts(5)]
    assert len({len(p) for p in prompt_ids}) > 1  # left padding is exercised
    batched = generate_batch(tiny_model.model, prompt_ids, "greedy", max_new_tokens=12, eos_ids=tiny_model.eos_ids,
                             seed=0, stop=lambda: False)
    for ids, reply in zip(prompt_ids, batched):
        _, _, finished = run(engine, ids, max_new_tokens=12, spec=SpecConfig(), sampling=SamplingConfig())
        assert reply == list(finished.output_ids)


def test_sampled_replies_follow_the_seed(tiny_model):
    engine = local_engine(tiny_model)
    prompt_ids = [engine.prompt_ids([{"role": "user", "content": p.text}]) for p in prompts(3)]
    once = generate_batch(tiny_model.model, prompt_ids, "sampled", max_new_tokens=10, eos_ids=tiny_model.eos_ids,
                          seed=7, stop=lambda: False)
    again = generate_batch(tiny_model.model, prompt_ids, "sampled", max_new_tokens=10, eos_ids=tiny_model.eos_ids,
                           seed=7, stop=lambda: False)
    other = generate_batch(tiny_model.model, prompt_ids, "sampled", max_new_tokens=10, eos_ids=tiny_model.eos_ids,
                           seed=8, stop=lambda: False)
    assert once == again and once != other


def test_a_stopped_run_resumes_without_writing_a_reply_twice(tiny_model, tmp_path):
    jobs = reply_jobs(prompts(12), prompts(3, start=100), rounds=2)
    calls = {"n": 0}

    def say(fraction, message):
        calls["n"] += 1
    first = write_replies(tiny_model, jobs, tmp_path, max_new_tokens=6, batch=4, seed=0, until=time.monotonic() - 1,
                          say=say, cancel=threading.Event())
    assert first == [] and calls["n"] == 0  # the budget was spent before the first batch
    cancel = threading.Event()
    partial = write_replies(tiny_model, jobs, tmp_path, max_new_tokens=6, batch=4, seed=0,
                            until=time.monotonic() + 600, say=lambda f, m: cancel.set(), cancel=cancel)
    assert 0 < len(partial) <= 4  # cancelled after the first batch
    whole = write_replies(tiny_model, jobs, tmp_path, max_new_tokens=6, batch=4, seed=0,
                          until=time.monotonic() + 600, say=say, cancel=threading.Event())
    keys = [(r["prompt"], r["mode"]) for r in read_replies(tmp_path)]
    assert len(keys) == len(set(keys)) == len(jobs) == len(whole)
    for record in whole:
        assert record["ids"][:record["prompt_length"]] and len(record["ids"]) > record["prompt_length"]
    assert {r["held_out"] for r in whole} == {True, False}


def test_a_line_cut_by_a_crash_is_dropped(tmp_path):
    good = {"prompt": "a", "mode": "greedy", "held_out": False, "ids": [1, 2, 3], "prompt_length": 2}
    (tmp_path / "replies.jsonl").write_text(json.dumps(good) + "\n" + json.dumps(good)[:20], encoding="utf-8")
    assert read_replies(tmp_path) == [good]


def test_job_order_and_batches():
    train, held = prompts(20), prompts(4, start=100)
    jobs = reply_jobs(train, held, rounds=4)
    assert [j.held_out for j in jobs[:2]] == [True, True]
    assert sum(j.held_out for j in jobs) == 4
    assert [j.mode for j in jobs[-20:]] == ["sampled-3"] * 20
    assert len(jobs) == 4 + 20 * 4
    pairs = [(job, [0] * (1 + len(job.prompt.text) // 10)) for job in jobs]
    groups = _batches(pairs, 4)
    assert all(len({job.mode for job, _ in group}) == 1 and len(group) <= 4 for group in groups)
    assert sorted(id(j) for g in groups for j, _ in g) == sorted(id(j) for j, _ in pairs)
    assert isinstance(jobs[0], Job)


def test_history_prompts_read_the_chat_history_in_the_data_folder(tmp_path, monkeypatch):
    """--from-history reads the user's messages from <SPECSCOPE_DATA_DIR>/history.sqlite3, the GUI's history."""
    monkeypatch.setenv("SPECSCOPE_DATA_DIR", str(tmp_path / "data"))
    with pytest.raises(ConfigError, match="no chat history"):
        history_prompts()
    (tmp_path / "data").mkdir()
    with sqlite3.connect(tmp_path / "data" / "history.sqlite3") as conn:
        conn.execute("CREATE TABLE messages (id INTEGER PRIMARY KEY, role TEXT, content TEXT)")
        conn.executemany("INSERT INTO messages (role, content) VALUES (?, ?)",
                         [("user", "first question"), ("assistant", "an answer"), ("user", "  "), ("user", "second")])
    conn.close()
    assert [p.text for p in history_prompts()] == ["first question", "second"]
