"""`specscope` / `specscope gui`: the options (parsing and checks) and the start-up (the QApplication, the window).

Scripted mode (also headless, with QT_QPA_PLATFORM=offscreen):

    specscope gui --prompt TEXT [--method M] [--k K] [--layers L] [--temperature T] [--seed S]
                  [--max-new-tokens N] [--model M] [--draft D] [--window-size WxH] --screenshot PNG
                  --quit-when-done

opens the window (at exactly WxH with --window-size), sends TEXT, waits for the reply, saves a screenshot of the
whole window, prints the finish stats as one JSON line on stdout (with `window_min_size: [w, h]`, the smallest
the window can be, `backend`, and `rounds`: per round its drafted and accepted counts, draft_ms and verify_ms)
and exits 0 (2 when the settings are refused, the model does not load or the generation fails). Before the
screenshot, `--panel timeline tree` brings those live panels into view and `--select-round N` picks the reply's
round N (a round it doesn't have: exit 2, saying which it has).

    specscope gui --compare SPEC [SPEC…] --prompt TEXT [--max-new-tokens N] --screenshot PNG --quit-when-done

runs plain decoding and each SPEC (as in `specscope bench --config`, e.g. prompt-lookup:k=5) on TEXT, one after
another, saves a screenshot of the compare window and prints the summary as one JSON line: a list with one
object per setting (plain decoding first), the fields of the summary table.

`--demo` replays a recorded generation of the built-in model (gui/demo_engine.py) instead of loading one.

The scripted mode itself (send, wait, screenshot, print, quit) is gui.scripted's; this module parses and checks
the options and starts the window. May touch: engine.cli.arguments and engine.core.config (the options and their
checks), the main window's public methods, gui.theme, gui.worker (the real loader), gui.scripted, gui.demo_engine.
It holds no chat state: the windows' sessions do.
"""

from __future__ import annotations

import argparse
import signal
import os
import sys

from engine.cli.arguments import (add_compile_arg, add_consent_args, add_generation_args, add_model_args, add_sampling_args,
                              add_spec_args, check_generation_args, check_own_params, given_params,
                              sampling_from_args, spec_from_args)
from engine.core.methods import all_params, method_spec, methods
from engine.core.config import SAMPLING_FIELDS, SpecConfig, parse_spec
from engine.models.consent import ConsentNeeded, require
from engine.core.errors import ConfigError
from engine.core.validation import check_output_path, decode_argument

EXIT_USAGE = 2


class OneLineParser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs) -> None:  # no abbreviated options: `--tree-dep` is not `--tree-depth`
        super().__init__(*args, **{**kwargs, "allow_abbrev": False})

    def error(self, message: str):  # argparse's own errors: one line, exit 2 (as the engine's commands)
        self.exit(EXIT_USAGE, f"specscope gui: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The window's options: the model, method, sampling and generation ones are engine.cli.arguments' (the CLI's
    own), each None when not given, which keeps the window's last setting."""
    parser = OneLineParser(prog="specscope gui", description="Open the SpecScope chat window.")
    add_model_args(parser, unset=True)  # --dtype for this run only, as generate takes it (auto included)
    add_spec_args(parser, unset=True)
    add_sampling_args(parser, unset=True)
    add_generation_args(parser, unset=True)
    add_consent_args(parser)
    add_compile_arg(parser)
    parser.add_argument("--theme", choices=("auto", "light", "dark"), default="auto")
    parser.add_argument("--hide-rejected", action="store_true", help="start with rejected drafts hidden")
    parser.add_argument("--colour-by", default=None, choices=COLOUR_CHOICES,
                        help="what the tokens' colours show: status (the default), acceptance (min(1, p/q)), "
                             "entropy (the target's, in bits) or confidence (the drafter's p)")
    parser.add_argument("--demo", action="store_true",
                        help="replay a recorded generation of the built-in model (no model is loaded): a tour of "
                             "the visualiser")
    parser.add_argument("--prompt", default=None, help="send this message once the model is loaded")
    parser.add_argument("--screenshot", default=None, metavar="PNG", help="save the window to PNG after the reply")
    parser.add_argument("--window-size", default=None, metavar="WxH", type=window_size,
                        help="open the window at exactly this size, e.g. 1366x768 (the screenshot's size)")
    panel_names = live_panel_names()
    parser.add_argument("--panel", nargs="+", default=None, choices=panel_names, metavar="PANEL",
                        help=f"after the reply, bring these live panels into view ({', '.join(panel_names)}), e.g. "
                             "timeline (a bar per round) and tree (a round's drafted path and the target's "
                             "alternatives)")
    parser.add_argument("--select-round", type=nonnegative_int, default=None, metavar="N",
                        help="after the reply, pick its round N (0: the prefill) in the timeline and the tree")
    parser.add_argument("--quit-when-done", action="store_true",
                        help="exit after the reply (with --prompt), printing its stats as one JSON line")
    parser.add_argument("--compare", nargs="+", default=None, metavar="SPEC",
                        help="compare these settings (1-4 SPECs such as prompt-lookup:k=5) with plain decoding on "
                             "--prompt, in the compare window")
    return parser


COLOUR_CHOICES = ("status", "acceptance", "entropy", "confidence")  # gui.views.chat.colouring.MODES


def live_panel_names() -> tuple[str, ...]:
    """The scripted --panel's names: each live panel's own (gui.views.main.live_dock.LIVE_PANELS)."""
    from gui.views.main.live_dock import LIVE_PANELS  # the panels' widgets: imported when the parser is built
    return tuple(panel_class.name for panel_class in LIVE_PANELS)


def nonnegative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative (round 0 is the prefill)")
    return value


def window_size(text: str) -> tuple[int, int]:
    """--window-size WxH: two positive whole numbers (argparse's type)."""
    width, sep, height = text.lower().replace("×", "x").partition("x")
    if not (sep and width.strip().isdigit() and height.strip().isdigit()) or min(int(width), int(height)) < 1:
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT in pixels such as 1366x768, got {text!r}")
    return int(width), int(height)


def size_problem(window, size: tuple[int, int] | None) -> str | None:
    """Why the window cannot open at `size` (below its minimum size), or None."""
    if size is None:
        return None
    minimum = window.minimumSizeHint().expandedTo(window.minimumSize())
    if size[0] < minimum.width() or size[1] < minimum.height():
        return (f"--window-size {size[0]}x{size[1]} is smaller than the window's minimum size "
                f"{minimum.width()}x{minimum.height()}")
    return None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "gui":
        argv = argv[1:]
    args = build_parser().parse_args(argv)
    if args.quit_when_done and not args.prompt:
        build_parser().error("--quit-when-done needs --prompt")
    if args.method and method_spec(args.method).implied_by_draft and args.draft is None:
        args.draft = "default"
    return args


def check_settings(args: argparse.Namespace) -> None:
    """Refuse a bad combination before any window opens (raises ConfigError); a method parameter without
    --method is checked against the window's method once it is known (held_problem)."""
    spec_from_args(args, keeps_method=True)
    if args.method is not None and not method_spec(args.method).offered:
        offered = ", ".join(m.name for m in methods() if m.offered)
        raise ConfigError(f"--method {args.method} is not in the window's method menu ({offered}); "
                          "specscope generate runs it")
    sampling_from_args(args)
    check_generation_args(args)
    if args.compare is not None:
        compare_specs(args)
    if args.screenshot is not None:
        check_output_path(args.screenshot, "--screenshot")
    if args.prompt is not None:  # a scripted run never asks: the flags answer the safety questions up front
        require(scripted_models(args), trust_remote_code=args.trust_remote_code, allow_pickle=args.allow_pickle)


def scripted_models(args: argparse.Namespace) -> tuple[str, ...]:
    """The models a scripted run loads: the target and the draft (and the drafts of --compare)."""
    drafts = [spec.draft for spec in compare_specs(args)] if args.compare else [args.draft]
    return tuple(name for name in (args.model or "default", *drafts) if name)


def compare_specs(args: argparse.Namespace) -> list[SpecConfig]:
    """The --compare SPECs, parsed (raises ConfigError)."""
    from gui.views.compare.window import MAX_SETTINGS

    specs = [parse_spec(text) for text in args.compare]
    if not 1 <= len(specs) <= MAX_SETTINGS:
        raise ConfigError(f"--compare takes 1 to {MAX_SETTINGS} settings, got {len(specs)}")
    if any(not spec.speculative for spec in specs):
        raise ConfigError("--compare: plain decoding (none) always runs; name only speculative settings")
    if not args.prompt:
        raise ConfigError("--compare needs --prompt")
    return specs


def apply_args(window, args: argparse.Namespace) -> None:
    """Put the command line's settings into the window's settings panel."""
    window.controls.apply(model=args.model, method=args.method, draft=args.draft, k=args.k, adaptive=args.adaptive,
                          tree=args.tree, **given_params(args),
                          **{field.name: getattr(args, field.name) for field in SAMPLING_FIELDS},
                          max_new_tokens=args.max_new_tokens, system_prompt=args.system)
    if args.backend is not None:  # --backend: the panel's choice, so the first load runs on it
        window.set_backend(args.backend)
    if args.compile:
        window.set_compile(True)
    if args.hide_rejected:
        window.set_show_rejected(False)
    if args.colour_by is not None:
        window.set_colouring(args.colour_by)


def held_problem(window, args: argparse.Namespace) -> str | None:
    """A method parameter that the settings panel's method doesn't take, or the first number given on the
    command line that the panel did not keep exactly (a widget that rounds or clamps), as a refusal; None when
    every one was kept. Refuse, never change it silently."""
    held = window.controls.values()
    try:
        check_own_params(held["method"], given_params(args))
    except ConfigError as exc:
        return str(exc)
    numbers = [p.name for p in all_params() if p.type in (int, float)]
    for name in ("k", "tree", *numbers, *(field.name for field in SAMPLING_FIELDS), "max_new_tokens"):
        asked = getattr(args, name)
        if asked is not None and abs(held[name] - asked) > 1e-9:
            option = "--" + name.replace("_", "-")
            return f"the window cannot hold {option} {asked:g} (its field keeps {held[name]:g})"
    return None


def decode_texts(args: argparse.Namespace) -> None:
    """--prompt and --system as valid Unicode: bytes that aren't UTF-8 become U+FFFD, and the run says so."""
    for option in ("prompt", "system"):
        value = getattr(args, option)
        if value is not None:
            value, replaced = decode_argument(value)
            setattr(args, option, value)
            if replaced:
                print(f"specscope gui: warning: --{option} had bytes that are not UTF-8 text; they were replaced "
                      "by \ufffd", file=sys.stderr)


def no_display() -> bool:
    """On Linux Qt aborts the process when it finds no display: say so in one line instead."""
    if not sys.platform.startswith("linux") or os.environ.get("QT_QPA_PLATFORM"):
        return False
    return not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def main(argv: list[str] | None = None, *, loader=None) -> int:
    """Entry point of `specscope` and `specscope gui ...` (argv without the program name)."""
    args = parse_args(argv)
    try:
        decode_texts(args)
        check_settings(args)
    except ConsentNeeded as exc:
        print(f"specscope gui: error: {exc.unattended()}", file=sys.stderr)
        return EXIT_USAGE
    except ConfigError as exc:
        print(f"specscope gui: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if no_display():
        print("specscope gui: error: no display to open a window on (DISPLAY and WAYLAND_DISPLAY are unset); "
              "for scripted runs set QT_QPA_PLATFORM=offscreen", file=sys.stderr)
        return EXIT_USAGE

    from PySide6.QtWidgets import QApplication

    from gui import theme
    from gui.demo_engine import demo_loader
    from gui.resources import app_icon
    from gui.scripted import UnaskedQuestions
    from gui.views.main.window import MainWindow
    from gui.worker import load_real_engine

    app = QApplication.instance() or QApplication([sys.argv[0] if sys.argv else "specscope"])
    app.setApplicationName("SpecScope")
    app.setOrganizationName("SpecScope")
    app.setDesktopFileName("specscope")
    app.setWindowIcon(app_icon())
    palette = theme.resolve(args.theme)
    theme.apply(app, palette)

    if loader is None:
        loader = demo_loader if args.demo else load_real_engine
    # a scripted run or the demo neither restores nor saves the settings, nor writes the chat history
    persist = args.prompt is None and not args.demo
    questions = UnaskedQuestions() if args.prompt else None  # a scripted run never asks
    window = MainWindow(loader=loader, palette=palette, model=args.model, persist=persist, confirm=questions)
    try:  # every way out stops and joins the engine's thread (a QThread destroyed running aborts the process)
        return run_window(app, window, args, persist, loader, questions)
    finally:
        window.shutdown()
        window.deleteLater()


def run_window(app, window, args: argparse.Namespace, persist: bool, loader, questions=None) -> int:
    """Set the window up from the options, show it, run the event loop; the exit status. `questions`: the
    window's confirm in a scripted run (gui.scripted.UnaskedQuestions)."""
    from PySide6.QtCore import QTimer

    from gui.demo_engine import demo_loader, recorded_prompt
    from gui.scripted import start_scripted
    from gui.views.main.screen_fit import place_on_screen

    if args.device is not None or args.dtype is not None or not persist:  # for this run only
        dtype = args.dtype or (window.settings.dtype() if persist else "auto")
        window.set_device(args.device or "auto", dtype, remember=False)
    apply_args(window, args)
    problem = held_problem(window, args)
    if problem is not None:
        print(f"specscope gui: error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    if args.demo and args.prompt is None and loader is demo_loader:
        window.message_box.setPlainText(recorded_prompt())  # the question the recorded replies answer
    problem = size_problem(window, args.window_size)
    if problem is not None:
        print(f"specscope gui: error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    if args.window_size is not None:
        window.resize(*args.window_size)  # exactly as asked (scripted screenshots)
    else:
        place_on_screen(window, window.geometry_restored, window.saved_geometry)
    window.show()

    scripted = None
    if args.prompt:
        specs = compare_specs(args) if args.compare else []
        scripted = start_scripted(app, window, args, questions, scripted_models(args), specs)
    window.start()

    # Ctrl+C in the terminal closes the window cleanly (Python only sees signals between Qt events).
    previous = signal.signal(signal.SIGINT, lambda *_: window.close())
    tick = QTimer()
    tick.start(250)
    tick.timeout.connect(lambda: None)
    try:
        code = app.exec()
    finally:
        signal.signal(signal.SIGINT, previous)
        tick.stop()
    return scripted.exit_code if scripted is not None else code


if __name__ == "__main__":
    sys.exit(main())
