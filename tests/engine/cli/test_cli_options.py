"""The engine's command line (engine.cli.main, engine.cli.arguments): a stray option ends in one line, exit 2 (a
parameter of another method, an abbreviated option, a bad --method or --dtype); --method takes every combination
a SPEC takes; --compile where nothing compiles is a note, said even when stderr is piped; `generate --json`
names the backend and device at its start and its finish; suffix learning with an unusable data folder is off
for the run, said in one line. In-process (main()), on the tiny models of tests/engine/conftest.py."""

from __future__ import annotations

import argparse
import importlib.util
import json

import pytest

from engine.cli.main import build_parser, main

UNUSABLE_DATA_DIR = "/dev/null/x"  # under a file: no folder can be made there
LLAMA_CPP = importlib.util.find_spec("llama_cpp") is not None


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("argv, line", [
    (["generate", "--method", "prompt-lookup", "--layers", "8", "hi"],
     "specscope: error: --layers is early-exit's parameter; prompt-lookup takes --ngram-max, --ngram-min"),
    (["generate", "--layers", "8", "hi"],
     "specscope: error: --layers is early-exit's parameter; none takes no parameter of its own"),
    (["generate", "--draft", "default", "--ngram-max", "4", "hi"],  # --draft alone asks for draft-model
     "specscope: error: --ngram-max is prompt-lookup's parameter; draft-model takes no parameter of its own"),
    (["generate", "--method", "suffix", "--tree", "200", "hi"],
         "specscope: error: tree must be a whole number of nodes from 0 (a chain) to 128, got 200"),
    (["generate", "--method", "early-exit", "--lay", "8", "hi"], "unrecognized arguments: --lay"),
    (["bench", "--prompts", "p.jsonl", "--conf", "none"], "unrecognized arguments: --conf"),
    (["models", "list", "--pat", "x"], "unrecognized arguments: --pat"),
    (["generate", "--method", "magic", "hi"], "argument --method: invalid choice: 'magic' (choose from none, "),
    (["generate", "--method", "early-exit+prompt-lookup", "hi"],
     "the first method of a combination drafts from the text alone"),
    (["generate", "--dtype", "fp8", "hi"], "argument --dtype: expected auto, float32, bf16 or fp16, got 'fp8'"),
])
def test_a_stray_option_ends_in_one_line_exit_2(capsys, argv, line):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and out == ""
    assert line in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def _parsers(parser: argparse.ArgumentParser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


def test_no_parser_takes_an_abbreviated_option():
    parsers = list(_parsers(build_parser({"gui": "the window"})))
    assert len(parsers) >= 8 and all(not parser.allow_abbrev for parser in parsers)


def test_method_takes_every_combination_a_spec_takes_and_dtype_auto():
    parser = build_parser()
    args = parser.parse_args(["generate", "--method", "ngram-mod+early-exit", "--dtype", "auto", "hi"])
    assert (args.method, args.dtype) == ("ngram-mod+early-exit", "auto")
    assert parser.parse_args(["generate", "--method", "suffix+draft-model", "--dtype", "BF16", "hi"]).dtype == "bfloat16"


def test_a_note_on_an_unused_option_is_said_where_progress_is_not(capsys):
    from engine.backends import compile_note
    from engine.runtime import terminal_progress
    assert compile_note("transformers") is None
    progress = terminal_progress()  # stderr is not a terminal here
    progress("Loading the model…")
    progress(compile_note("llama.cpp"))
    assert capsys.readouterr().err.splitlines() == [
        "specscope: note: --compile is unused on llama.cpp: it compiles runners on transformers only; the model "
        "runs as it is"]


def test_json_names_the_backend_and_device_at_the_start_and_the_finish(capsys, tiny_dir, monkeypatch):
    monkeypatch.setenv("SPECSCOPE_DATA_DIR", UNUSABLE_DATA_DIR)
    code, out, err = run_cli(capsys, "generate", "--json", "--model", tiny_dir, "--backend", "transformers",
                             "--method", "suffix", "--learn", "--max-new-tokens", "3", "hi")
    assert code == 0 and err == ""
    events = [json.loads(line) for line in out.splitlines()]
    started, finished = events[0], events[-1]
    assert (started["type"], finished["type"]) == ("started", "finished")
    assert started["backend"] == finished["backend"] == "transformers"
    assert started["device"] and finished["device"] == started["device"]
    assert [w for w in started["warnings"] if "learning is off for this run" in w]


def test_suffix_learning_without_a_usable_data_folder_is_off_for_the_run_in_one_line(capsys, tiny_dir,
                                                                                      monkeypatch):
    monkeypatch.setenv("SPECSCOPE_DATA_DIR", UNUSABLE_DATA_DIR)
    code, out, err = run_cli(capsys, "generate", "--model", tiny_dir, "--backend", "transformers", "--method",
                             "suffix", "--learn", "--max-new-tokens", "3", "hi")
    assert code == 0 and "Traceback" not in err and "stop:" in out
    said = [line for line in err.splitlines() if "learning is off" in line]
    assert said == [f"warning: suffix: learning is off for this run: the suffix-decoding store {UNUSABLE_DATA_DIR}/"
                    f"suffix-store.sqlite3 can't be opened ([Errno 20] Not a directory: '{UNUSABLE_DATA_DIR}')"]


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    from tests.fixtures.tiny_gguf import build
    gguf, = build("llama", tmp_path_factory.mktemp("tiny-gguf") / "tiny-llama.gguf")
    return gguf


@pytest.mark.skipif(not LLAMA_CPP, reason="llama-cpp-python is not installed")
@pytest.mark.parametrize("backend", ["llama.cpp", "auto"])
def test_compile_on_llama_cpp_is_a_note_and_json_names_llama_cpp(capsys, tiny_gguf, backend):
    code, out, err = run_cli(capsys, "generate", "--json", "--compile", "--model", tiny_gguf, "--backend", backend,
                             "--max-new-tokens", "2", "hi")
    assert code == 0
    assert err.splitlines() == ["specscope: note: --compile is unused on llama.cpp: it compiles runners on "
                                "transformers only; the model runs as it is"]
    events = [json.loads(line) for line in out.splitlines()]
    assert events[0]["backend"] == events[-1]["backend"] == "llama.cpp"
    assert events[0]["device"].startswith("llama.cpp · ") and events[-1]["device"] == events[0]["device"]
