"""The engine's commands: `specscope generate`, `bench`, `models` and `drafter` (gui/launch.py hands them over; the
window's commands, `gui` and `bench-gui`, never come here: they are only listed in --help when the launcher
names them). The parser and the dispatch live here; each command in its own module (engine.cli.generate,
engine.cli.models, engine.cli.drafter, engine.measure.bench).

Exit status: 0 on success, 2 on bad input (one clear line on stderr, no traceback), 130 when interrupted.
Touches the terminal only; never Qt.
"""

from __future__ import annotations

import argparse
import sys
from typing import Mapping, Sequence

from engine import __version__
from engine.cli.arguments import add_compile_arg, add_consent_args, add_model_args
from engine.cli.generate import add_generate, cmd_generate
from engine.cli.models import add_models, cmd_models
from engine.cli.terminal import EXIT_BAD_INPUT, Parser
from engine.core.errors import SpecScopeError

ENGINE_COMMANDS = ("generate", "bench", "models", "drafter")


# ------------------------------------------------------------------ models


def build_parser(other_commands: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    """The parser of the engine's commands. `other_commands` (name → help) are commands another front end
    runs (the launcher's `gui`, `bench-gui`): listed in --help, in this order, never parsed here."""
    from engine.measure.bench import add_bench_args
    parser = Parser(prog="specscope", description="Watch speculative decoding happen.")
    parser.add_argument("--version", action="version", version=f"specscope {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=Parser)
    add_generate(sub)
    bench = sub.add_parser("bench", help="measure methods against plain decoding on a prompt set")
    add_model_args(bench)
    add_bench_args(bench)
    add_consent_args(bench)
    add_compile_arg(bench)
    for name, help_text in (other_commands or {}).items():
        sub.add_parser(name, help=help_text, add_help=False)
    add_models(sub)
    from engine.cli.drafter import add_drafter_args
    add_drafter_args(sub, Parser)
    return parser


def _run_command(args) -> int:
    from engine.runtime import quiet_libraries
    handlers = {"generate": cmd_generate, "models": cmd_models, "bench": _bench, "drafter": _drafter}
    from engine.models.consent import ConsentNeeded
    try:
        quiet_libraries()
        return handlers[args.command](args)
    except ConsentNeeded as exc:  # a command line never asks: it says which flag answers the question
        print(f"specscope: error: {exc.unattended()}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except SpecScopeError as exc:
        print(f"specscope: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("\nspecscope: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


def _drafter(args) -> int:
    from engine.cli.drafter import run
    return run(args)


def _bench(args) -> int:
    from engine.measure.bench import run
    return run(args)


def main(argv: Sequence[str] | None = None, *, other_commands: Mapping[str, str] | None = None) -> int:
    """Run one engine command (argv without the program name). `other_commands`: see build_parser."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(other_commands)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version (0) and argparse's own errors (2)
        return exc.code if isinstance(exc.code, int) else EXIT_BAD_INPUT
    if args.command not in ENGINE_COMMANDS:  # none given, or one that another front end runs
        what = "no command given" if args.command is None else f"{args.command} is not an engine command"
        print(f"specscope: error: {what}; choose {', '.join(ENGINE_COMMANDS)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return _run_command(args)


if __name__ == "__main__":
    sys.exit(main())
