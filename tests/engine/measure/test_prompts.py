"""Prompt sets (engine/measure/prompts.py): presets, Spec-Bench and {"prompt": …} files read one way, with categories,
limits and one clear error for a file in no known format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.core.errors import ConfigError
from engine.measure.prompts import Prompt, categories_of, load_prompts, select, shorten

PRESETS = Path(__file__).resolve().parents[3] / "assets" / "presets.json"


def write_lines(path: Path, rows) -> Path:
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n", encoding="utf-8")
    return path


def test_presets_keep_their_ids_categories_and_titles():
    document = json.loads(PRESETS.read_text(encoding="utf-8"))["presets"]
    prompts = load_prompts(PRESETS)
    assert len(prompts) == len(document)
    assert [(p.id, p.category, p.title, p.text) for p in prompts] == \
        [(d["id"], d["category"], d["title"], d["prompt"]) for d in document]
    assert categories_of(prompts)[0] == document[0]["category"]


def test_spec_bench_and_prompt_lines(tmp_path):
    path = write_lines(tmp_path / "q.jsonl", [
        {"question_id": 81, "category": "writing", "turns": ["Write a haiku about rain.", "Now another."]},
        {"prompt": "Say yes."},
        {"prompt": "   " + "word " * 30, "category": "long"},
    ])
    prompts = load_prompts(path)
    assert prompts[0] == Prompt("81", "writing", "Write a haiku about rain.", "Write a haiku about rain.")
    assert (prompts[1].id, prompts[1].category) == ("2", "general")  # the line number, the default category
    assert len(prompts[2].title) == 60 and prompts[2].title.endswith("…") and "\n" not in prompts[2].title


def test_categories_and_limit(tmp_path):
    path = write_lines(tmp_path / "q.jsonl", [{"prompt": f"p{i}", "category": "ab"[i % 2]} for i in range(6)])
    assert [p.text for p in load_prompts(path, ["b"])] == ["p1", "p3", "p5"]
    assert [p.text for p in load_prompts(path, limit=1)] == ["p0", "p1"]
    assert [p.text for p in select(load_prompts(path), ["a"], limit=2)] == ["p0", "p2"]
    with pytest.raises(ConfigError, match="no prompts in .* for categories c"):
        load_prompts(path, ["c"])


@pytest.mark.parametrize("content, message", [
    ("# a README\n", r"q.txt:1 is neither Spec-Bench JSON"),
    ('{"prompt": "ok"}\n{"turns": []}\n', r"q.txt:2 is neither Spec-Bench JSON"),
    ("\n\n", "no prompts in"),
    ('{"prompt": 42}\n', r"q.txt:1: the prompt must be text \(a JSON string\), got int"),
])
def test_bad_files_get_one_clear_message(tmp_path, content, message):
    path = tmp_path / "q.txt"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError, match=message):
        load_prompts(path)


def test_missing_and_unreadable_files(tmp_path):
    with pytest.raises(ConfigError, match="prompt file not found"):
        load_prompts(tmp_path / "none.jsonl")
    binary = tmp_path / "b.jsonl"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ConfigError, match=r"is not UTF-8 text \(byte 0\); save it as UTF-8"):
        load_prompts(binary)


def test_shorten():
    assert shorten("  two\nlines  ") == "two lines"
    assert shorten("x" * 100, width=10) == "x" * 9 + "…"
