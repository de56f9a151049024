"""A fuzz table of the command line: bad inputs to `generate`, `bench`, `models` and the scripted `gui`, each
built here (corrupt files, odd bytes, edge numbers, markup characters, unwritable paths). Every one must end
with exit 2 and exactly one error line on stderr (warnings aside), no traceback, no "unexpected error", no
file left half-written, and return within a bounded time (a thread join / subprocess timeout: a hang fails,
a slow run does not).

Most cases run in-process through engine.cli.main.main (they are refused before any model loads: the checks
come first); a sample runs as `specscope` subprocesses, and the scripted GUI cases (Qt, offscreen) run as
subprocesses only. A planted model that would write a marker file if its code ran checks that no model
code runs without --trust-remote-code.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest


from engine.cli.main import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
LAUNCH = "import sys; from gui.launch import main; sys.exit(main(sys.argv[1:]))"
CASE_TIMEOUT_S = 120  # a bound on a hang, not a speed assertion
SURROGATE = "caf\udce9 \udcff"  # what argv holds for bytes that aren't UTF-8 (surrogateescape)
MARKUP = "[bold red]boom[/] [link=file:///etc]x[/link] [/]"


# ---------------------------------------------------------------- the bad files

def _tiny_folder(folder: Path) -> Path:
    from engine_testkit import build_tiny_tokenizer, save_tiny_model
    return save_tiny_model(folder, build_tiny_tokenizer())


def _variant(base: Path, target: Path, change) -> Path:
    shutil.copytree(base, target)
    change(target)
    return target


def _plant_remote_code(folder: Path, marker: Path) -> None:
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="specscope_planted", architectures=["PlantedForCausalLM"],
                  auto_map={"AutoConfig": "planted.PlantedConfig", "AutoModelForCausalLM": "planted.PlantedModel",
                            "AutoTokenizer": ["planted.PlantedTokenizer", None]})
    (folder / "config.json").write_text(json.dumps(config))
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
    tokenizer_config["auto_map"] = {"AutoTokenizer": ["planted.PlantedTokenizer", None]}
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    (folder / "planted.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n")


def _pickle_only(folder: Path) -> None:
    import torch
    from safetensors.torch import load_file
    weights = folder / "model.safetensors"
    torch.save(load_file(weights), folder / "pytorch_model.bin")
    weights.unlink()


def _cut(path: Path, keep) -> None:
    data = path.read_bytes()
    path.write_bytes(keep(data))


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("fuzz")
    tiny = _tiny_folder(root / "tiny")
    weights = "model.safetensors"
    paths = {"tiny": tiny, "marker": root / "MARKER", "out": root / "out"}
    paths["out"].mkdir()
    paths["planted"] = _variant(tiny, root / "planted", lambda f: _plant_remote_code(f, paths["marker"]))
    paths["pickle"] = _variant(tiny, root / "pickle", _pickle_only)
    paths["truncated"] = _variant(tiny, root / "truncated", lambda f: _cut(f / weights, lambda d: d[:len(d) * 9 // 10]))
    paths["cut_header"] = _variant(tiny, root / "cut_header", lambda f: _cut(f / weights, lambda d: d[:1000]))
    paths["empty_weights"] = _variant(tiny, root / "empty_weights", lambda f: (f / weights).write_bytes(b""))
    paths["garbage_weights"] = _variant(tiny, root / "garbage_weights",
                                        lambda f: (f / weights).write_bytes(os.urandom(4096)))
    paths["bad_config"] = _variant(tiny, root / "bad_config", lambda f: (f / "config.json").write_text("{nope"))
    paths["empty_config"] = _variant(tiny, root / "empty_config", lambda f: (f / "config.json").write_text(""))
    paths["list_config"] = _variant(tiny, root / "list_config", lambda f: (f / "config.json").write_text("[1, 2]"))
    paths["no_config"] = _variant(tiny, root / "no_config", lambda f: (f / "config.json").unlink())
    paths["empty_dir"] = root / "empty_dir"
    paths["empty_dir"].mkdir()
    for name, content in {"empty.gguf": b"", "garbage.gguf": b"GGUF" + os.urandom(64),
                          "magic.gguf": b"NOPE" + bytes(60), "text.gguf": b"hello"}.items():
        (root / name).write_bytes(content)
        paths[name.replace(".", "_")] = root / name
    prompts = {"empty.jsonl": "", "blank.jsonl": "\n\n", "number.jsonl": '{"prompt": 5}\n',
               "null.jsonl": '{"prompt": null}\n', "list.jsonl": '{"prompt": ["a"]}\n',
               "object.jsonl": '{"prompt": {"a": 1}}\n', "turns_empty.jsonl": '{"turns": []}\n',
               "turns_number.jsonl": '{"turns": [7]}\n', "not_json.jsonl": "{prompt: hi}\n",
               "array_line.jsonl": '["hi"]\n', "string_line.jsonl": '"hi"\n',
               "markup.jsonl": json.dumps({"prompt": "hi", "category": MARKUP}) + "\n",
               "good.jsonl": '{"prompt": "hi"}\n'}
    for name, text in prompts.items():
        (root / name).write_text(text, encoding="utf-8")
        paths[name.replace(".", "_")] = root / name
    (root / "latin1.jsonl").write_bytes('{"prompt": "café"}\n'.encode("latin-1"))
    (root / "utf16.jsonl").write_bytes('{"prompt": "hi"}\n'.encode("utf-16"))
    (root / "binary.jsonl").write_bytes(os.urandom(256))
    (root / "a_file").write_text("x")
    for name in ("latin1.jsonl", "utf16.jsonl", "binary.jsonl"):
        paths[name.replace(".", "_")] = root / name
    paths["a_file"] = root / "a_file"
    return {name: str(path) for name, path in paths.items()}


# ---------------------------------------------------------------- the table

G, B = ["generate"], ["bench", "--prompts", "{good_jsonl}"]
NUMBERS = [  # (option, value): every one refused before a model loads
    ("--seed", "2147483648"), ("--seed", "1180591620717411303424"), ("--seed", "-1"), ("--seed", "1e3"),
    ("--seed", "0x10"), ("--seed", ""), ("--seed", "9" * 200), ("--temperature", "nan"), ("--temperature", "inf"),
    ("--temperature", "-inf"), ("--temperature", "-0.1"), ("--temperature", "1e-50"), ("--temperature", "1e-45"),
    ("--temperature", "0.001"), ("--temperature", "5.01"), ("--temperature", "1e309"), ("--temperature", "abc"),
    ("--top-p", "0"), ("--top-p", "-0.5"), ("--top-p", "1.5"), ("--top-p", "nan"), ("--top-p", "1e-400"),
    ("--top-k", "-1"), ("--top-k", "100001"), ("--top-k", "1e5"), ("--top-k", str(2**70)),
    ("--max-new-tokens", "0"), ("--max-new-tokens", "-5"), ("--max-new-tokens", "1000001"),
    ("--max-new-tokens", str(2**64)), ("--max-new-tokens", "3.5"), ("--k", "0"), ("--k", "65"), ("--k", "-1"),
    ("--k", str(2**80)), ("--k", "٣"), ("--ngram-max", "0"), ("--ngram-min", "-2"), ("--ngram-max", str(2**65)),
]
CASES: list[tuple[str, list[str], str]] = [  # (id, argv, a fragment of the error line)
    *[(f"generate {o} {v!r}", [*G, o, v, "hi"], "") for o, v in NUMBERS],
    ("layers 0", [*G, "--method", "early-exit", "--layers", "0", "hi"], "layers must be ≥ 1"),
    ("layers -3", [*G, "--method", "early-exit", "--layers", "-3", "hi"], "layers"),
    ("layers huge", [*G, "--method", "early-exit", "--layers", str(2**70), "hi"], "layers"),
    ("ngram min > max", [*G, "--method", "prompt-lookup", "--ngram-min", "4", "--ngram-max", "2", "hi"], "n-gram"),
    ("draft-model without draft", [*G, "--method", "draft-model", "hi"], "needs a draft model"),
    ("unknown method", [*G, "--method", "magic", "hi"], "invalid choice"),
    ("unknown device", [*G, "--device", "tpu9", "hi"], "device"),
    ("unknown dtype", [*G, "--dtype", "float3", "hi"], "dtype"),
    ("empty prompt", [*G, ""], "the prompt is empty"),
    ("blank prompt", [*G, "  \n\t "], "the prompt is empty"),
    ("surrogate prompt, bad seed", [*G, "--seed", "-4", SURROGATE], "seed"),
    ("surrogate system, bad k", [*G, "--system", SURROGATE, "--k", "0", "hi"], "k must be"),
    ("markup prompt, bad top-p", [*G, "--top-p", "2", MARKUP], "top-p"),
    ("markup model", [*G, "--model", MARKUP, "hi"], "not found"),
    ("surrogate model", [*G, "--model", "/no/" + SURROGATE, "hi"], "not found"),
    ("missing model", [*G, "--model", "/no/such/model", "hi"], "not found"),
    ("empty folder", [*G, "--model", "{empty_dir}", "hi"], "config.json"),
    ("no config", [*G, "--model", "{no_config}", "hi"], "config.json"),
    ("a file as model", [*G, "--model", "{a_file}", "hi"], ""),
    ("empty gguf", [*G, "--model", "{empty_gguf}", "hi"], "empty.gguf"),
    ("garbage gguf", [*G, "--model", "{garbage_gguf}", "hi"], "garbage.gguf"),
    ("bad magic gguf", [*G, "--model", "{magic_gguf}", "hi"], "magic.gguf"),
    ("text gguf", [*G, "--model", "{text_gguf}", "hi"], "text.gguf"),
    ("truncated safetensors", [*G, "--model", "{truncated}", "hi"], "model.safetensors"),
    ("cut safetensors header", [*G, "--model", "{cut_header}", "hi"], "model.safetensors"),
    ("empty safetensors", [*G, "--model", "{empty_weights}", "hi"], "model.safetensors"),
    ("garbage safetensors", [*G, "--model", "{garbage_weights}", "hi"], "model.safetensors"),
    ("config not json", [*G, "--model", "{bad_config}", "hi"], "config"),
    ("config empty", [*G, "--model", "{empty_config}", "hi"], "config"),
    ("config a list", [*G, "--model", "{list_config}", "hi"], ""),
    ("planted code", [*G, "--model", "{planted}", "hi"], "--trust-remote-code"),
    ("planted code as draft", [*G, "--model", "{tiny}", "--draft", "{planted}", "hi"], "--trust-remote-code"),
    ("pickle only", [*G, "--model", "{pickle}", "hi"], "--allow-pickle"),
    ("pickle only as draft", [*G, "--model", "{tiny}", "--draft", "{pickle}", "hi"], "--allow-pickle"),
    ("trust but corrupt", [*G, "--trust-remote-code", "--model", "{truncated}", "hi"], "model.safetensors"),
    ("corrupt draft", [*G, "--model", "{tiny}", "--draft", "{garbage_weights}", "hi"], "model.safetensors"),
    ("no prompt", G, "prompt"),
    ("option without value", [*G, "hi", "--k"], "--k"),
    ("unknown option", [*G, "--frobnicate", "hi"], "unrecognized"),
    ("no command", [], "no command"),
    ("unknown command", ["frobnicate"], "invalid choice"),
    # bench
    ("bench missing prompts", ["bench", "--prompts", "/no/such.jsonl"], "not found"),
    ("bench prompts folder", ["bench", "--prompts", "{empty_dir}"], "not found"),
    *[(f"bench {name}", ["bench", "--prompts", "{" + name + "}"], fragment) for name, fragment in (
        ("empty_jsonl", "no prompts"), ("blank_jsonl", "no prompts"), ("number_jsonl", "must be text"),
        ("null_jsonl", "must be text"), ("list_jsonl", "must be text"), ("object_jsonl", "must be text"),
        ("turns_empty_jsonl", "neither"), ("turns_number_jsonl", "must be text"), ("not_json_jsonl", "neither"),
        ("array_line_jsonl", "neither"), ("string_line_jsonl", "neither"), ("latin1_jsonl", "not UTF-8"),
        ("utf16_jsonl", "not UTF-8"), ("binary_jsonl", ""))],
    ("bench unknown category", [*B, "--category", MARKUP], "no prompts"),
    ("bench limit 0", [*B, "--limit", "0"], "--limit"),
    ("bench limit -1", [*B, "--limit", "-1"], "--limit"),
    ("bench max-new-tokens 0", [*B, "--max-new-tokens", "0"], "max new tokens"),
    ("bench temperature nan", [*B, "--temperature", "nan"], "finite"),
    ("bench seed huge", [*B, "--seed", str(2**64)], "seed"),
    ("bench bad config", [*B, "--config", "magic:k=3"], "unknown method"),
    ("bench config k 0", [*B, "--config", "prompt-lookup:k=0"], "k must be"),
    ("bench config k text", [*B, "--config", "prompt-lookup:k=abc"], "integer"),
    ("bench config markup", [*B, "--config", MARKUP], ""),
    ("bench sweep 0-99", [*B, "--sweep-k", "0-99"], "sweep"),
    ("bench sweep text", [*B, "--sweep-k", "a-b"], "sweep"),
    ("bench json no folder", [*B, "--json", "/no/such/folder/out.json"], "does not exist"),
    ("bench json a folder", [*B, "--json", "{out}"], "is a folder"),
    ("bench json under a file", [*B, "--json", "{a_file}/out.json"], "not a folder"),
    ("bench json in /proc", [*B, "--json", "/proc/specscope-fuzz.json"], "cannot write"),
    ("bench json empty", [*B, "--json", ""], "empty"),
    ("bench planted", [*B, "--model", "{planted}"], "--trust-remote-code"),
    ("bench pickle", [*B, "--model", "{pickle}"], "--allow-pickle"),
    ("bench planted draft", [*B, "--model", "{tiny}", "--config", "draft-model:k=2,draft={planted}"],
     "--trust-remote-code"),
    # models
    ("list context -1", ["models", "list", "--context", "-1"], "--context"),
    ("list context 0", ["models", "list", "--context", "0"], "--context"),
    ("list context huge", ["models", "list", "--context", str(2**70)], "--context"),
    ("list context text", ["models", "list", "--context", "lots"], "whole number"),
    ("check missing", ["models", "check", "default", "/no/such/model"], "not found"),
    ("check planted draft", ["models", "check", "default", "{planted}"], "--trust-remote-code"),
    ("check planted target", ["models", "check", "{planted}", "default"], "--trust-remote-code"),
    ("check empty folder", ["models", "check", "default", "{empty_dir}"], ""),
    ("check garbage gguf", ["models", "check", "default", "{garbage_gguf}"], "garbage.gguf"),
    ("check markup", ["models", "check", "default", MARKUP], "not found"),
    ("check surrogate", ["models", "check", "default", SURROGATE], "not found"),
    ("download bad id", ["models", "download", "bad id!!"], "repository id"),
    ("download markup id", ["models", "download", MARKUP], "repository id"),
    ("download empty id", ["models", "download", ""], "repository id"),
    ("prepare missing", ["models", "prepare", "/no/such/model"], "not found"),
    ("prepare pickle", ["models", "prepare", "{pickle}"], "--allow-pickle"),
    ("prepare planted", ["models", "prepare", "{planted}"], "--trust-remote-code"),
    ("prepare corrupt", ["models", "prepare", "{truncated}"], "model.safetensors"),
    ("models no subcommand", ["models"], "required"),
]
SUBPROCESS_SAMPLE = ("generate --seed '1180591620717411303424'", "planted code", "truncated safetensors",
                     "bench latin1_jsonl", "check planted draft", "markup model", "bench json in /proc")
GUI = ["gui", "--quit-when-done", "--max-new-tokens", "2"]
GUI_CASES: list[tuple[str, list[str], str]] = [
    ("gui seed 2^31 (was SIGABRT)", [*GUI, "--seed", "2147483648", "--temperature", "0.7", "--prompt", "hi"], "seed"),
    ("gui layers 99", [*GUI, "--model", "{tiny}", "--method", "early-exit", "--layers", "99", "--prompt", "hi"],
     "layers must be from 1 to 3"),
    ("gui temperature rounds", [*GUI, "--temperature", "0.015", "--prompt", "hi"], "cannot hold"),
    ("gui temperature tiny", [*GUI, "--temperature", "1e-40", "--prompt", "hi"], "temperature"),
    ("gui planted", [*GUI, "--model", "{planted}", "--prompt", "hi"], "--trust-remote-code"),
    ("gui pickle", [*GUI, "--model", "{pickle}", "--prompt", "hi"], "--allow-pickle"),
    ("gui truncated", [*GUI, "--model", "{truncated}", "--prompt", "hi"], "model.safetensors"),
    ("gui screenshot nowhere", [*GUI, "--prompt", "hi", "--screenshot", "/no/such/folder/shot.png"],
     "does not exist"),
    ("gui compare bad spec", [*GUI, "--prompt", "hi", "--compare", "magic:k=2"], "unknown method"),
    ("gui bad window size", [*GUI, "--prompt", "hi", "--window-size", "0x0"], "WIDTHxHEIGHT"),
    ("gui surrogate prompt, bad k", [*GUI, "--k", "0", "--prompt", SURROGATE], "k must be"),
]


# ---------------------------------------------------------------- running a case

def _argv(template: list[str], files: dict[str, str]) -> list[str]:
    return [part.format(**files) if "{" in part and "}" in part and "[" not in part else part
            for part in template]


def _run_in_process(argv: list[str]) -> tuple[int | None, str]:
    """engine.cli.main.main on a thread with stdout/stderr captured; (None, stderr) when it did not return in time."""
    outcome: dict = {}
    err, out = io.StringIO(), io.StringIO()

    def work():
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            try:
                outcome["code"] = main(argv)
            except SystemExit as exc:  # a command must return its status, but count an exit too
                outcome["code"] = exc.code
            except BaseException as exc:  # noqa: BLE001 — a traceback is what the test looks for
                import traceback
                traceback.print_exc()
                outcome["code"] = f"raised {type(exc).__name__}"

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(CASE_TIMEOUT_S)
    return outcome.get("code"), err.getvalue()


def _run_subprocess(argv: list[str], tmp_path: Path) -> tuple[int | None, str]:
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "SPECSCOPE_DATA_DIR": str(tmp_path / "data"),
           "XDG_CONFIG_HOME": str(tmp_path / "config"), "PYTHONPATH": str(ROOT)}
    encoded = [os.fsencode(part) for part in argv]  # lone surrogates go back to the bytes they stood for
    try:
        done = subprocess.run([sys.executable, "-c", LAUNCH, *encoded], cwd=ROOT, env=env, capture_output=True,
                              timeout=CASE_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        return None, (exc.stderr or b"").decode("utf-8", "replace")
    return done.returncode, done.stderr.decode("utf-8", "replace")


def _qt_noise(line: str) -> bool:
    return "propagateSizeHints" in line or line.startswith("qt.qpa.")


def check_outcome(case_id: str, code, err: str, fragment: str) -> list[str]:
    """What is wrong with a case's outcome (empty: handled)."""
    lines = [line for line in err.splitlines() if line.strip() and not _qt_noise(line)]
    errors = [line for line in lines if line.startswith("specscope") and ": error:" in line]
    others = [line for line in lines if line not in errors and ": warning:" not in line]
    problems = []
    if code is None:
        problems.append("did not return in time")
    elif code != 2:
        problems.append(f"exit {code}")
    if "Traceback" in err or "unexpected error" in err:
        problems.append("traceback or unexpected error")
    if len(errors) != 1 or others:
        problems.append(f"{len(errors)} error lines, {len(others)} other lines")
    if fragment and fragment not in err:
        problems.append(f"no {fragment!r} in the message")
    return [f"{case_id}: {problem}: {err.strip()[-300:]!r}" for problem in problems]


def _leftovers(files: dict[str, str]) -> list[str]:
    return sorted(os.listdir(files["out"]))


def test_the_table_is_big_enough():
    assert len(CASES) + len(GUI_CASES) >= 100


def test_bad_inputs_in_process(files, monkeypatch, tmp_path):
    """Every case of the table through engine.cli.main.main: handled, no file written, no planted code run."""
    monkeypatch.setenv("SPECSCOPE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    problems = []
    for case_id, template, fragment in CASES:
        code, err = _run_in_process(_argv(template, files))
        problems += check_outcome(case_id, code, err, fragment)
    assert not Path(files["marker"]).exists(), "a planted model's code ran"
    assert _leftovers(files) == [], "a file was left behind"
    print(f"fuzz table: {len(CASES)} in-process cases tried, {len(CASES) - len({p.split(':')[0] for p in problems})} "
          "handled")
    assert problems == [], "\n".join(problems)


def test_a_sample_as_the_specscope_command(files, tmp_path):
    """The same contract where argv really is bytes: a sample of the table as subprocesses."""
    chosen = [case for case in CASES if case[0] in SUBPROCESS_SAMPLE]
    assert len(chosen) == len(SUBPROCESS_SAMPLE)
    problems = []
    for case_id, template, fragment in chosen:
        code, err = _run_subprocess(_argv(template, files), tmp_path)
        problems += check_outcome(case_id, code, err, fragment)
    assert not Path(files["marker"]).exists(), "a planted model's code ran"
    assert problems == [], "\n".join(problems)


def test_hf_endpoint_over_plain_http_is_refused(files, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://hub.example")
    code, err = _run_in_process(["models", "download", "acme/tiny"])
    assert check_outcome("http endpoint", code, err, "https://") == []


def test_surrogates_in_a_prompt_are_replaced_and_said(files):
    code, err = _run_subprocess(["generate", "--model", files["tiny"], "--max-new-tokens", "2", "--json",
                                 SURROGATE], Path(files["out"]).parent)
    assert code == 0, err
    assert "not UTF-8" in err and "Traceback" not in err


@pytest.mark.slow
def test_scripted_gui_bad_inputs(files, tmp_path):
    """Scripted GUI runs (offscreen): never a modal question, a hang or an abort; one error line, exit 2, no
    screenshot left."""
    problems = []
    for case_id, template, fragment in GUI_CASES:
        code, err = _run_subprocess(_argv(template, files), tmp_path)
        problems += check_outcome(case_id, code, err, fragment)
    assert not Path(files["marker"]).exists(), "a planted model's code ran"
    assert not list(tmp_path.rglob("*.png"))
    print(f"fuzz table: {len(GUI_CASES)} scripted GUI cases tried")
    assert problems == [], "\n".join(problems)
