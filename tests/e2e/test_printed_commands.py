"""Every command SpecScope tells you to run works: README.md's `specscope` lines that need no network (its shell
blocks, fenced or indented; a line naming a hub id is only parsed, in test_readme.py), the next step
`specscope drafter train` prints (built by engine.cli.drafter.use_command, the function that prints it) and the
command in eagle's refusal for a model without a head. Each runs in-process
through engine.cli.main.main, its budgets cut small (--max-new-tokens, --limit, --minutes) and its placeholders
filled (the prompt "…", DIR, TARGET DRAFT)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from engine.cli.main import main
from tests.e2e.readme_kit import block_commands, hub_ids

pytestmark = pytest.mark.model
ROOT = Path(__file__).resolve().parents[2]
ENGINE_COMMANDS = ("generate", "bench", "models", "drafter")  # what engine.cli.main runs (the window is gui's)
NEEDS_NETWORK = (("models", "download"),)
NEEDS_A_HEAD = "DIR"  # the README lines that train a head and use it (run in order by a test of their own)
SMALL = {"--max-new-tokens": "8", "--limit": "1", "--minutes": "0.5", "--sweep-k": "1-2"}  # 0.5: drafter train's least


def readme_commands() -> list[str]:
    """The `specscope …` lines of README.md's shell blocks (continuations joined)."""
    return block_commands()


def runnable(line: str) -> bool:
    argv = shlex.split(line, comments=True)[1:]
    return bool(argv) and argv[0] in ENGINE_COMMANDS and tuple(argv[:2]) not in NEEDS_NETWORK and not hub_ids(argv)


def as_argv(line: str, tmp_path: Path, head: Path | None = None) -> list[str]:
    """`line` as arguments for engine.cli.main.main: placeholders filled, outputs under `tmp_path`, budgets small."""
    words = {"DIR": str(head), "TARGET": "default", "DRAFT": "default", "[MODEL]": "default", "[--json]": "--json"}
    argv = [words.get(word, word.replace("…", "the sea")) for word in shlex.split(line, comments=True)[1:]]
    if argv[0] == "bench" and "--json" in argv:  # bench's --json names the file it writes
        argv[argv.index("--json") + 1] = str(tmp_path / "out.json")
    return small(argv)


def small(argv: list[str]) -> list[str]:
    """`argv` with its budgets cut to SMALL: the values given replaced, --max-new-tokens added to a generation."""
    argv = list(argv)
    for flag, value in SMALL.items():
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        elif (flag == "--max-new-tokens" and argv[0] in ("generate", "bench")) or \
                (flag == "--limit" and argv[0] == "bench"):
            argv += [flag, value]
    return argv


def run(capsys, argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_the_readme_names_the_commands_run_here():
    lines = readme_commands()
    run_here = [line for line in lines if runnable(line)]
    assert any(" generate " in f" {line} " for line in run_here) and any("drafter train" in line for line in run_here)
    assert all(runnable(line) or shlex.split(line, comments=True)[1:2] in ([], ["gui"]) or "download" in line
               or hub_ids(shlex.split(line, comments=True)) for line in lines)  # the rest: the window, the network


@pytest.mark.parametrize("line", [line for line in readme_commands() if runnable(line) and NEEDS_A_HEAD not in
                                  shlex.split(line, comments=True)],
                         ids=lambda line: shlex.join(shlex.split(line, comments=True)[1:])[:70])
def test_a_readme_command_runs(line, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)  # its paths are the checkout's (assets/…, ../shared/benchmarks/…)
    argv = as_argv(line, tmp_path)
    missing = [word for word in argv if word.startswith(("assets/", "../")) and not (ROOT / word).exists()]
    if missing:
        pytest.skip(f"{missing[0]} is not in this checkout")
    code, out, err = run(capsys, argv)
    assert code == 0, (argv, err[-2000:])
    if argv[0] == "generate" and "--json" not in argv:  # its start line names the backend it runs on
        assert re.search(r" on (transformers|llama\.cpp) \(", err), err


@pytest.mark.slow
def test_the_readme_trains_a_head_and_its_printed_next_step_and_example_run(tmp_path, capsys, monkeypatch):
    """`drafter train` (30 s here), then the command it printed, then README's own line that uses the head."""
    monkeypatch.chdir(ROOT)
    head = tmp_path / "head"
    train, use = [line for line in readme_commands() if NEEDS_A_HEAD in shlex.split(line, comments=True)]
    code, out, err = run(capsys, as_argv(train, tmp_path, head))
    assert code == 0 and any(head.iterdir()), err[-2000:]
    printed = next(line for line in out.splitlines() if line.startswith("use it: "))
    argv = shlex.split(printed.removeprefix("use it: "))
    assert argv[0] == "specscope"
    for argv in (small(argv[1:]), as_argv(use, tmp_path, head)):
        code, out, err = run(capsys, argv)
        assert code == 0, (argv, err[-2000:])
        assert " on transformers (" in err  # auto took the model where eagle runs


def test_the_next_step_of_a_training_run_works(tmp_path, capsys):
    """The command `drafter train` prints (engine.cli.drafter.use_command) for a head trained on a tiny model."""
    from engine.cli.drafter import use_command
    from engine.training.train import TrainOptions, train
    from tests.engine.engine_testkit import build_tiny_tokenizer, save_tiny_model
    model = save_tiny_model(tmp_path / "tiny", build_tiny_tokenizer(), seed=0)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(f'{{"prompt": "tell me about number {i}"}}\n' for i in range(24)), encoding="utf-8")
    out, _ = train(TrainOptions(model=str(model), out=tmp_path / "head", minutes=0.1, prompt_files=(str(prompts),),
                                builtin_prompts=False, held_out_prompts=4, max_new_tokens=12, window=32, batch=4,
                                reply_batch=8, draft_vocab=256, device="cpu", dtype="float32"), lambda progress: None)
    argv = use_command(str(model), out)
    assert "--prompt" not in argv  # the prompt is positional
    code, printed, err = run(capsys, small(argv))
    assert code == 0, err[-2000:]
    assert " on transformers (" in err and "eagle" in err


@pytest.mark.slow
def test_the_command_in_eagles_refusal_trains_a_head_that_eagle_then_uses(tmp_path, capsys, monkeypatch):
    """The built-in model without a head: eagle's refusal names `specscope drafter train …`; that command (its
    budget cut to 30 s) writes the head where eagle looks, and eagle then runs (on transformers, by auto)."""
    from engine.host import cache_root
    converted = cache_root() / "converted"  # the built-in GGUF converted once for transformers, reused
    monkeypatch.setenv("SPECSCOPE_CACHE_DIR", str(tmp_path / "cache"))  # no head yet; the new one goes here
    if converted.is_dir():
        (tmp_path / "cache").mkdir()
        (tmp_path / "cache" / "converted").symlink_to(converted, target_is_directory=True)
    eagle = ["generate", "--method", "eagle", "hi", "--max-new-tokens", "8"]
    code, out, err = run(capsys, eagle)
    commands = re.findall(r"`(specscope [^`]*)`", err)
    assert code == 2 and commands, err
    for command in commands:
        code, out, err = run(capsys, small(shlex.split(command)[1:]))
        assert code == 0, (command, err[-2000:])
    code, out, err = run(capsys, eagle)
    assert code == 0, err[-2000:]
    assert " on transformers (" in err
