"""The `specscope` command's contract: names, exit codes, --json, the bench table and JSON, and the launcher
(gui/launch.py) that runs the engine's commands without Qt."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from engine.cli.main import main

pytestmark = pytest.mark.model
ROOT = Path(__file__).resolve().parents[2]
LAUNCH = "import sys; from gui.launch import main; sys.exit(main(sys.argv[1:]))"
# A sitecustomize that makes every Qt binding (and pyqtgraph) fail to import, as on a machine without the Qt
# libraries: the import fails the way a missing libGL or libxkbcommon makes it fail.
NO_QT = """
import sys
class NoQt:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("PySide6", "shiboken6", "pyqtgraph"):
            raise ImportError(f"{name}: libEGL.so.1: cannot open shared object file (blocked by the test)")
        return None
sys.meta_path.insert(0, NoQt())
"""


def assert_greedy_equal(row, n):
    """A bench row's greedy outputs equal plain decoding's: token for token in float32 on a CPU; on a GPU, whose
    batched and one-token kernels may round apart, up to near-ties told apart by engine.measure.divergence."""
    assert row["mismatches"] == 0 and row["identical_to_none"] + row["near_ties"] == n, row
    if not torch.cuda.is_available():
        assert row["identical_to_none"] == n


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
    pytest.param(["generate", "--backend", "transformers", "--device", "cuda", "hi"], "CUDA was asked for",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")),
    (["generate", "   "], "the prompt is empty"),
    (["generate", "--backend", "transformers", "--method", "early-exit", "--layers", "30", "hi"],
     "layers must be from 1 to 29"),
    (["generate", "--method", "early-exit", "--layers", "0", "hi"], "layers must be ≥ 1"),
    pytest.param(["generate", "--backend", "llama.cpp", "--method", "early-exit", "hi"],
                 "method early-exit needs the transformers backend, not llama.cpp",
                 marks=pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                                          reason="llama-cpp-python is not installed")),
    (["generate", "--backend", "onnx", "hi"], "invalid choice"),
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


def test_a_drafters_information_is_a_note_and_its_problem_a_warning(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSCOPE_DATA_DIR", str(tmp_path / "data"))
    code, out, err = run_cli(capsys, "generate", "--method", "suffix", "--learn", "--max-new-tokens", "4", "Say hi.")
    assert code == 0
    assert "note: suffix: learning from this model's replies (none kept yet" in err and "warning:" not in err
    code, out, err = run_cli(capsys, "generate", "--method", "ngram-mod", "--spec-ngram-mod-n-match", "4",
                             "--max-new-tokens", "4", "Say hi.")
    assert code == 0 and "warning: ngram-mod n_match=4 is short" in err


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
    code, out, err = run_cli(capsys, "generate", "--backend", "transformers", "--max-new-tokens", "16",
                             "What is the capital of France?")
    assert code == 0
    assert "Paris" in out
    assert "tok/s" in out and "stop:" in out


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python is not installed")
def test_generate_runs_the_builtin_model_on_llama_cpp_by_default(capsys):
    """(Its first word differs from transformers' float32 here: "L" 0.157 against "The" 0.123 on llama.cpp's
    Q4_1 kernels, 0.140 against 0.152 dequantized: a near tie, not an error.)"""
    code, out, err = run_cli(capsys, "generate", "--json", "--max-new-tokens", "8", "Name a colour.")
    assert code == 0
    events = [json.loads(line) for line in out.splitlines()]
    from engine.backends.llama_cpp import accelerators
    found = accelerators()  # the layers go to the first GPU llama.cpp finds, else they stay on the CPU
    assert events[0]["device"] == f"llama.cpp · {found[0] if found else 'CPU'}" and events[0]["dtype"] == "Q4_1"
    assert events[-1]["stats"]["committed_tokens"] >= 1


def test_bench_table_and_json(tmp_path, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps(row) for row in [
        {"question_id": 1, "category": "summarization", "turns": ["Summarise: cats sleep a lot. Cats sleep."]},
        {"question_id": 2, "category": "coding", "turns": ["Write hello world in Python."]},
        {"prompt": "Say yes."},
    ]))
    out_json = tmp_path / "out.json"
    code, out, err = run_cli(capsys, "bench", "--prompts", str(prompts), "--max-new-tokens", "12", "--backend",
                             "transformers", "--dtype", "float32", "--config", "prompt-lookup:k=3", "--compare-hf",
                             "--json", str(out_json))
    assert code == 0
    assert "overall" in out and "prompt-lookup:k=3" in out and "summarization" in out
    document = json.loads(out_json.read_text())
    configs = document["configs"]
    assert set(configs) == {"none", "prompt-lookup:k=3"}
    overall = configs["prompt-lookup:k=3"]["all"]
    assert overall["prompts"] == 3
    assert_greedy_equal(overall, 3)  # greedy speculation changes nothing
    assert configs["none"]["all"]["speedup"] == pytest.approx(1.0)
    assert overall["ours_over_hf"] > 0
    assert set(configs["none"]) == {"all", "summarization", "coding", "general"}


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python is not installed")
def test_bench_compare_llama(tmp_path, capsys):
    """Ours beside llama-cpp-python's own loop on the built-in GGUF, with the measured verify-cost curve; a
    config with backend=transformers runs on the same model loaded there, after plain decoding on it."""
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps(row) for row in [
        {"question_id": 1, "category": "coding", "turns": ["Write hello world in Python."]},
        {"question_id": 2, "category": "translation", "turns": ["Translate into French: good morning."]}]))
    out_json = tmp_path / "out.json"
    code, out, err = run_cli(capsys, "bench", "--prompts", str(prompts), "--max-new-tokens", "12", "--config",
                             "prompt-lookup:k=2", "--config", "draft-model:k=2,draft=default", "--compare-llama",
                             "--config", "prompt-lookup:k=2,backend=transformers", "--json", str(out_json))
    assert code == 0, err
    assert "verify cost on this machine (llama.cpp): n=1" in out and "ours/theirs" in out
    assert "verify cost on this machine (transformers): n=1" in out
    document = json.loads(out_json.read_text())
    assert document["backend"] == "llama.cpp" and len(document["verify_cost"]["seconds"]) >= 8  # n = 1…8 at least
    configs = document["configs"]
    for label in ("none", "prompt-lookup:k=2"):
        overall = configs[label]["all"]
        assert overall["llama_cpp_python_tok_per_s"] > 0 and overall["ours_over_llama_cpp_python"] > 0
        assert 0 <= overall["llama_cpp_python_identical"] <= 2
        assert overall["theoretical_speedup_measured_cost"] > 0
    assert "llama_cpp_python_tok_per_s" not in configs["draft-model:k=2,draft=default"]["all"]  # theirs can't
    assert_greedy_equal(configs["draft-model:k=2,draft=default"]["all"], 2)
    on_transformers = configs["none:backend=transformers"]["all"]
    assert on_transformers["speedup"] == pytest.approx(1.0) and on_transformers["plain_vs_none"] > 0
    assert configs["prompt-lookup:k=2,backend=transformers"]["all"]["prompts"] == 2


@pytest.mark.parametrize("argv, fragment", [
    (["--compare-hf"], "--compare-hf compares with transformers' own generate(); SmolLM2-135M-Instruct (built-in) "
                       "runs on llama.cpp"),
    (["--compare-llama", "--backend", "transformers"], "--compare-llama compares our llama.cpp backend"),
    (["--compare-llama", "--temperature", "0.7"], "--compare-llama compares greedy decoding"),
])
def test_bench_comparisons_need_their_backend(tmp_path, capsys, argv, fragment):
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "Say yes."}))
    code, out, err = run_cli(capsys, "bench", "--prompts", str(prompts), "--max-new-tokens", "4", *argv)
    assert code == 2 and fragment in err and len(err.strip().splitlines()) == 1


def test_console_script_version():
    result = subprocess.run([sys.executable, "-m", "engine.cli", "--version"], capture_output=True, text=True)
    assert result.returncode == 0
    assert result.stdout.startswith("specscope ")


@pytest.fixture
def no_qt_env(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(NO_QT)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path), str(ROOT),
                                                                     os.environ.get("PYTHONPATH")])))
    blocked = subprocess.run([sys.executable, "-c", "import PySide6"], env=env, capture_output=True, text=True)
    assert blocked.returncode != 0 and "blocked by the test" in blocked.stderr  # the blocker works
    return env


def launch(env, *argv, timeout=600):
    return subprocess.run([sys.executable, "-c", LAUNCH, *argv], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_generate_works_where_qt_is_missing(no_qt_env):
    result = launch(no_qt_env, "generate", "--json", "--max-new-tokens", "4", "Say hi.")
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout.splitlines()[-1])["type"] == "finished"


def test_help_lists_every_command_where_qt_is_missing(no_qt_env):
    result = launch(no_qt_env, "--help")
    assert result.returncode == 0, result.stderr[-2000:]
    for command in ("generate", "bench", "models", "gui", "bench-gui"):
        assert f"    {command} " in result.stdout
    models = launch(no_qt_env, "models", "list", "--json")
    assert models.returncode == 0 and json.loads(models.stdout)[0]["name"] == "default"


def test_the_window_needs_qt_and_the_launcher_imports_it_only_then(no_qt_env):
    """The same blocker stops the window, so the runs above really had no Qt."""
    result = launch(dict(no_qt_env, QT_QPA_PLATFORM="offscreen"), "gui", "--demo")
    assert result.returncode != 0 and "blocked by the test" in result.stderr


def test_engine_cli_runs_only_the_engine_commands(capsys):
    code, out, err = run_cli(capsys, "gui")
    assert code == 2 and "invalid choice: 'gui'" in err and len(err.strip().splitlines()) == 1
    code, out, err = run_cli(capsys)
    assert code == 2 and err.strip() == "specscope: error: no command given; choose generate, bench, models, drafter"


def test_bench_passes_compile_to_the_loader(capsys, monkeypatch, tmp_path):
    """`specscope bench --compile` loads the target (and its drafts) on compiled runners, as generate does."""
    import engine.runtime

    asked = {}

    class Loaded(Exception):
        pass

    def load_engine(name, progress=None, **options):
        asked.update(options)
        raise Loaded

    monkeypatch.setattr(engine.runtime, "load_engine", load_engine)
    with pytest.raises(Loaded):
        prompts = tmp_path / "p.jsonl"
        prompts.write_text(json.dumps({"prompt": "Say yes."}))
        main(["bench", "--compile", "--prompts", str(prompts), "--config", "none"])
    assert asked["compile"] is True
