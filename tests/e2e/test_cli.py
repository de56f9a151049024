"""The `specscope` command's contract: names, exit codes, --json, the bench table and JSON."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from engine.cli import main

pytestmark = pytest.mark.model


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("argv, fragment", [
    (["generate", "--k", "0", "hi"], "k must be an integer from 1 to 64"),
    (["generate", "--k", "65", "hi"], "k must be an integer from 1 to 64"),
    (["generate", "--temperature", "-1", "hi"], "temperature must be ≥ 0"),
    (["generate", "--top-p", "0", "hi"], "top-p must be in (0, 1]"),
    (["generate", "--top-p", "1.5", "hi"], "top-p must be in (0, 1]"),
    (["generate", "--method", "draft-model", "hi"], "needs a draft model"),
    (["generate", "--method", "magic", "hi"], "invalid choice"),
    (["generate", "--model", "/no/such/model", "hi"], "model not found"),
    (["generate", "--device", "cuda", "hi"], "CUDA was asked for"),
    (["generate", "   "], "the prompt is empty"),
    (["generate", "--method", "early-exit", "--layers", "30", "hi"], "layers must be from 1 to 29"),
    (["generate", "--method", "early-exit", "--layers", "0", "hi"], "layers must be ≥ 1"),
    (["bench", "--prompts", "/no/such.jsonl", "--config", "none"], "prompt file not found"),
    (["bench", "--prompts", "README.md", "--config", "none"], "neither Spec-Bench JSON"),
    (["bench", "--prompts", "README.md", "--config", "prompt-lookup:q=3"], "bad setting"),
])
def test_bad_input_exits_2_with_one_clear_line(capsys, argv, fragment):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2
    assert fragment in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_draft_with_a_method_that_takes_none_warns(capsys):
    code, out, err = run_cli(capsys, "generate", "--method", "prompt-lookup", "--draft", "default",
                             "--max-new-tokens", "4", "Say hi.")
    assert code == 0
    assert "warning: a draft model is ignored by method prompt-lookup" in err


def test_generate_json_streams_one_event_per_line(capsys):
    code, out, err = run_cli(capsys, "generate", "--json", "--method", "prompt-lookup", "--k", "3",
                             "--max-new-tokens", "24", "Repeat exactly: one two three four, one two three four")
    assert code == 0
    events = [json.loads(line) for line in out.splitlines()]
    assert events[0]["type"] == "started" and events[0]["method"] == "prompt-lookup"
    rounds = [e for e in events if e["type"] == "round"]
    assert rounds and all("committed_statuses" in r for r in rounds)
    assert events[-1]["type"] == "finished"
    stats = events[-1]["stats"]
    assert stats["committed_tokens"] == sum(len(r["committed_ids"]) for r in rounds)
    assert events[-1]["text"] == "".join("".join(r["committed_pieces"]) for r in rounds)


def test_generate_prints_reply_and_stats_line(capsys):
    code, out, err = run_cli(capsys, "generate", "--max-new-tokens", "16", "What is the capital of France?")
    assert code == 0
    assert "Paris" in out
    assert "tok/s" in out and "stop:" in out


def test_bench_table_and_json(tmp_path, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps(row) for row in [
        {"question_id": 1, "category": "summarization", "turns": ["Summarise: cats sleep a lot. Cats sleep."]},
        {"question_id": 2, "category": "coding", "turns": ["Write hello world in Python."]},
        {"prompt": "Say yes."},
    ]))
    out_json = tmp_path / "out.json"
    code, out, err = run_cli(capsys, "bench", "--prompts", str(prompts), "--max-new-tokens", "12",
                             "--config", "prompt-lookup:k=3", "--compare-hf", "--json", str(out_json))
    assert code == 0
    assert "overall" in out and "prompt-lookup:k=3" in out and "summarization" in out
    document = json.loads(out_json.read_text())
    configs = document["configs"]
    assert set(configs) == {"none", "prompt-lookup:k=3"}
    overall = configs["prompt-lookup:k=3"]["all"]
    assert overall["prompts"] == 3
    assert overall["identical_to_none"] == 3  # greedy speculation changes nothing
    assert configs["none"]["all"]["speedup"] == pytest.approx(1.0)
    assert overall["ours_over_hf"] > 0
    assert set(configs["none"]) == {"all", "summarization", "coding", "general"}


def test_console_script_version():
    result = subprocess.run([sys.executable, "-m", "engine.cli", "--version"], capture_output=True, text=True)
    assert result.returncode == 0
    assert result.stdout.startswith("specscope ")
