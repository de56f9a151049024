"""README.md as the tests read it: its `specscope …` commands (shell blocks, fenced or indented, and inline code
spans), its sections and code blocks, and the real parsers a command line goes through (gui.launch's dispatch:
engine.cli.main's parser, the window's gui.app.parse_args, gui.benchmark's). Used by test_readme.py (every
command parses, every flag, shortcut and variable is documented) and test_printed_commands.py (the commands
that can run here run). Reads files and builds parsers only: no model, no Qt."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
_SHELL = ("bash", "sh", "shell", "console")


def readme_text() -> str:
    return README.read_text(encoding="utf-8")


def _command_lines(block: str) -> list[str]:
    """The `specscope` lines of a shell block (`\\`-continuations joined, leading blanks dropped)."""
    lines = [line.strip() for line in block.replace("\\\n", " ").splitlines()]
    return [" ".join(line.split()) for line in lines if line.startswith("specscope")]


def shell_blocks(text: str | None = None) -> list[str]:
    """README's shell code: its fenced bash/sh blocks and its indented (4-space) blocks outside any fence."""
    text = readme_text() if text is None else text
    blocks = [body for kind, body in _FENCE.findall(text) if kind in _SHELL]
    outside = _FENCE.sub("", text)
    for indented in re.findall(r"(?:^\n)((?:(?: {4}.*)?\n)+)", outside, re.M):
        blocks.append("\n".join(line[4:] for line in indented.splitlines()))
    return blocks


def block_commands(text: str | None = None) -> list[str]:
    """The `specscope …` command lines of README's shell blocks, in README's order (fenced first)."""
    return [line for block in shell_blocks(text) for line in _command_lines(block)]


def inline_commands(text: str | None = None) -> list[str]:
    """README's inline code spans that start with `specscope` (a span may wrap across lines), whitespace joined."""
    text = _FENCE.sub("", readme_text() if text is None else text)
    return [" ".join(span.split()) for span in re.findall(r"(?<!`)`(specscope(?: [^`]*)?)`(?!`)", text)]


def words(line: str) -> list[str]:
    """A command line's words after `specscope`, shell comments dropped."""
    return shlex.split(line, comments=True)[1:]


# ---------------------------------------------------------------- the parsers


def engine_parser() -> argparse.ArgumentParser:
    from engine.cli.main import build_parser
    from gui.launch import WINDOW_COMMANDS
    return build_parser(WINDOW_COMMANDS)


def window_parser() -> argparse.ArgumentParser:
    from gui.app import build_parser
    return build_parser()


def bench_gui_parser() -> argparse.ArgumentParser:
    from gui.benchmark import build_parser
    return build_parser()


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return {name: sub for action in parser._actions if isinstance(action, argparse._SubParsersAction)
            for name, sub in action.choices.items()}


def command_help(parser: argparse.ArgumentParser, name: str) -> str:
    """The help line `parser` gives its subcommand `name` (what `--help` lists)."""
    return next(choice.help for action in parser._actions if isinstance(action, argparse._SubParsersAction)
                for choice in action._choices_actions if choice.dest == name)


def every_parser() -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Each `specscope …` command path → its parser: the engine's commands (and their subcommands), the window's
    (`gui`, which `specscope` alone and `specscope --option` open too) and `bench-gui`."""
    found: dict[tuple[str, ...], argparse.ArgumentParser] = {}

    def walk(path: tuple[str, ...], parser: argparse.ArgumentParser) -> None:
        found[path] = parser
        for name, sub in subparsers(parser).items():
            walk(path + (name,), sub)

    walk((), engine_parser())
    found[("gui",)], found[("bench-gui",)] = window_parser(), bench_gui_parser()
    return found


def option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """The `--long` options a parser takes itself (its subcommands' aside; -h/--help aside)."""
    return [option for action in parser._actions if not isinstance(action, argparse._HelpAction)
            for option in action.option_strings if option.startswith("--")]


class ParseFailed(Exception):
    """A command line argparse refused (its message) or whose settings the command refuses before running."""


def _argparse(parse, argv: list[str]) -> argparse.Namespace | None:
    """`parse(argv)` (a parser's parse_args, or gui.app's), quietly; None for --help and --version (exit 0)."""
    stdout, stderr = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            return parse(argv)
    except SystemExit as exc:
        if exc.code in (0, None):
            return None
        raise ParseFailed(stderr.getvalue().strip() or f"exit {exc.code}") from None


def parse_command(line: str) -> argparse.Namespace | None:
    """`line` (`specscope …`) through the parser gui.launch hands it to, then the checks of its settings each
    command makes before loading anything (SPECs, sampling, the window's own). None for --help and --version.
    Raises ParseFailed."""
    from engine.core.errors import SpecScopeError
    from gui.launch import opens_window
    argv = words(line)
    try:
        if opens_window(argv):
            from gui.app import check_settings, parse_args
            args = _argparse(parse_args, argv)
            if args is not None:
                check_settings(args)
            return args
        if argv[0] == "bench-gui":
            return _argparse(bench_gui_parser().parse_args, argv[1:])
        args = _argparse(engine_parser().parse_args, argv)
        if args is not None:
            _check_engine_settings(args)
        return args
    except SpecScopeError as exc:
        raise ParseFailed(str(exc)) from None


def _check_engine_settings(args: argparse.Namespace) -> None:
    """What `generate` and `bench` check of their settings before a model loads (raises SpecScopeError)."""
    from engine.cli.arguments import check_generation_args, sampling_from_args, spec_from_args
    from engine.core.config import parse_remote, parse_spec
    if args.command == "generate":
        spec_from_args(args)
        sampling_from_args(args)
        check_generation_args(args)
    elif args.command == "bench":
        from engine.measure.bench import check_bench_args
        from engine.measure.compare import parse_sweep
        check_bench_args(args)
        for text in args.config:
            if parse_remote(text) is None:
                parse_spec(text)
        if args.sweep_k:
            parse_sweep(args.sweep_k)
    elif args.command is None:
        raise ParseFailed("no command given")


# ---------------------------------------------------------------- what a command needs


HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def hub_ids(argv: list[str]) -> list[str]:
    """The Hugging Face hub ids a command names (as --model/--draft, or `draft=` in a SPEC): those need the
    network unless they are in the local cache, so a README command naming one is parsed, not run."""
    values = [argv[i + 1] for i, word in enumerate(argv[:-1]) if word in ("--model", "--draft")]
    values += re.findall(r"(?:^|[:,])draft=([^,\s]+)", " ".join(argv))
    return [value for value in values if HUB_ID.match(value) and not (ROOT / value).exists()]


# ---------------------------------------------------------------- sections


def section(title: str, text: str | None = None) -> str:
    """The text under the heading `title` (any level), up to the next heading of the same or a higher level."""
    text = readme_text() if text is None else text
    match = re.search(rf"^(#+) {re.escape(title)}\n", text, re.M)
    if match is None:
        raise LookupError(f"README.md has no section {title!r}")
    level = len(match.group(1))
    rest = text[match.end():]
    blanked = _FENCE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), rest)  # a `# comment` in a block is no heading
    end = re.search(rf"^#{{1,{level}}} ", blanked, re.M)
    return rest[:end.start()] if end else rest


def mentions(token: str, text: str | None = None) -> bool:
    """`token` (an option, a variable) appears in README as a whole word."""
    text = readme_text() if text is None else text
    return re.search(rf"(?<![\w-]){re.escape(token)}(?![\w-])", text) is not None
