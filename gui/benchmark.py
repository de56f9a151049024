"""`specscope bench-gui`: what the visualiser costs. Figures, not assertions.

1. Throughput: tok/s of the GUI's scripted mode vs `specscope generate` on the same prompt and settings
   (one run each, each in its own process, both with (cores − 1) torch threads). Target: < 5 % slower.
2. Responsiveness: while the real model generates in the window, a 10 ms QTimer on the GUI thread records the
   gap between ticks; p50 / p99 / max are reported (target: p99 < 30 ms).
3. Long conversations: a 5,000-token conversation fed round by round into the transcript (recorded rounds of
   the built-in model, the --demo recording, through the same session model and QTextCursor append path as
   a live reply); time per appended round at the start and at the end (flat means no re-render per token).

May touch: subprocesses of `specscope generate` / `specscope gui`, the main window's public methods, gui.demo_engine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PROMPT = "List the days of the week, then list them again in reverse order, one per line."


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specscope bench-gui", description=__doc__.split("\n\n")[0],
                                     allow_abbrev=False)
    parser.add_argument("--model", default="default")
    parser.add_argument("--backend", default="auto", choices=("auto", "transformers", "llama.cpp"),
                        help="where the model runs (auto: the built-in model and GGUF files on llama.cpp)")
    parser.add_argument("--method", default=None,
                        help="a method (default: the first one the fastest-setting sweep tries)")
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--draft", default=None)
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--prompt", default=DEFAULT_PROMPT)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=1,
                        help="throughput runs per side, interleaved (the median is reported)")
    parser.add_argument("--long-tokens", type=int, default=5000, help="size of the long-conversation test")
    parser.add_argument("--skip-model", action="store_true",
                        help="only the long-conversation test (no model needed)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object too")
    return parser


def _env() -> dict:
    env = dict(os.environ)
    env.setdefault("QT_QPA_PLATFORM", "offscreen")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def _spec_args(args) -> list[str]:
    out = ["--backend", args.backend, "--method", args.method, "--k", str(args.k)]
    if args.draft:
        out += ["--draft", args.draft]
    if args.layers is not None:
        out += ["--layers", str(args.layers)]
    return out


def run_cli_generate(args) -> dict:
    """`specscope generate --json` in its own process; returns the finish stats."""
    code = "import sys; from engine.cli.main import main; sys.exit(main(sys.argv[1:]))"
    command = [sys.executable, "-c", code, "generate", "--json", "--model", args.model, *_spec_args(args),
               "--max-new-tokens", str(args.max_new_tokens), args.prompt]
    result = subprocess.run(command, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise RuntimeError(f"specscope generate failed: {result.stderr.strip()[-500:]}")
    for line in reversed(result.stdout.splitlines()):
        event = json.loads(line)
        if event.get("type") == "finished":
            return event["stats"]
    raise RuntimeError("specscope generate printed no finished event")


def run_gui_scripted(args) -> dict:
    """`specscope gui --prompt ... --quit-when-done` in its own process; returns its JSON line."""
    command = [sys.executable, "-m", "gui", "gui", "--model", args.model, *_spec_args(args),
               "--max-new-tokens", str(args.max_new_tokens), "--prompt", args.prompt, "--quit-when-done"]
    result = subprocess.run(command, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise RuntimeError(f"specscope gui failed: {result.stderr.strip()[-500:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def _wait(signal, timeout_s: float):
    """Run a local event loop until `signal` fires; returns its arguments."""
    from PySide6.QtCore import QEventLoop, QTimer

    loop = QEventLoop()
    got: list = []

    def done(*values):
        got.append(values)
        loop.quit()

    signal.connect(done)
    QTimer.singleShot(int(timeout_s * 1000), loop.quit)
    loop.exec()
    signal.disconnect(done)
    if not got:
        raise TimeoutError(f"no signal within {timeout_s:.0f} s")
    return got[0]


def measure_responsiveness(args, window) -> dict:
    """Generate with the real model in the window while a 10 ms timer measures the event loop's gaps."""
    from PySide6.QtCore import QTimer

    from gui.app import apply_args

    gui_args = argparse.Namespace(model=None, backend=args.backend, method=args.method, draft=args.draft, k=args.k, layers=args.layers,
                                  adaptive=None, temperature=None, top_p=None, top_k=None, seed=None,
                                  max_new_tokens=args.max_new_tokens, system=None, hide_rejected=False)
    apply_args(window, gui_args)
    ticks: list[float] = []
    timer = QTimer()
    timer.setInterval(10)
    timer.timeout.connect(lambda: ticks.append(time.perf_counter()))
    cpu_started, wall_started = time.thread_time(), time.perf_counter()
    timer.start()
    if not window.send(args.prompt):
        raise RuntimeError(window.controls.config_problem() or "the message could not be sent")
    (turn,) = _wait(window.reply_finished, 900)
    timer.stop()
    gui_cpu, wall = time.thread_time() - cpu_started, time.perf_counter() - wall_started
    gaps = [(b - a) * 1000 for a, b in zip(ticks, ticks[1:])]
    return {"tok_per_s": turn.stats.tok_per_s if turn.stats else 0.0, "ticks": len(ticks),
            "gap_p50_ms": _percentile(gaps, 0.50), "gap_p99_ms": _percentile(gaps, 0.99),
            "gap_max_ms": max(gaps) if gaps else 0.0, "committed_tokens": turn.stats.committed_tokens,
            "gui_thread_cpu_share": gui_cpu / wall if wall > 0 else 0.0,
            "rounds": turn.stats.rounds if turn.stats else 0,
            "rounds_per_s": turn.stats.decode_rounds / turn.stats.decode_seconds
            if turn.stats and turn.stats.decode_seconds > 0 else 0.0}


FAST_ROUNDS_PER_S = 175.0  # the scripted engine's pace: about llama.cpp's plain speed on the built-in model


def bare_replay_seconds(engine, spec, max_new_tokens: int) -> float:
    """Wall time of the replay consumed by a plain loop, no window: what the engine side costs alone."""
    started = time.perf_counter()
    for _event in engine.generate([{"role": "user", "content": "x"}], spec=spec, max_new_tokens=max_new_tokens):
        pass
    return time.perf_counter() - started


def measure_fast_rounds(replies: int = 6) -> dict:
    """Rounds at llama.cpp speed: the --demo recording of plain decoding on the built-in model replayed at
    FAST_ROUNDS_PER_S into a window of its own (the same worker, signals, session and views as a live reply),
    `replies` times, while a 10 ms timer measures the GUI thread's gaps. The visualiser's cost is how much
    longer the replies take in the window than the same replay consumed by a bare loop."""
    from PySide6.QtCore import QTimer

    from engine.core.config import SpecConfig
    from gui import theme
    from gui.demo_engine import DemoEngine
    from gui.views.main.window import MainWindow

    spec = SpecConfig()
    probe = DemoEngine()
    recording = probe.recordings[spec.label()]
    pace = FAST_ROUNDS_PER_S * recording.finished.stats.elapsed_seconds / len(recording.rounds)
    bare = statistics.median(bare_replay_seconds(DemoEngine(pace=pace), spec, 256) for _ in range(3))
    window = MainWindow(loader=lambda name, progress=None, **options: DemoEngine(pace=pace), palette=theme.LIGHT,
                        persist=False)
    window.resize(1440, 900)
    window.show()
    try:
        window.start()
        _wait(window.model_ready, 60)
        window.controls.apply(method=spec.method, max_new_tokens=256)
        ticks: list[float] = []
        timer = QTimer()
        timer.setInterval(10)
        timer.timeout.connect(lambda: ticks.append(time.perf_counter()))
        seconds, rounds = [], 0
        timer.start()
        for _ in range(replies):
            started = time.perf_counter()
            if not window.send("x"):
                raise RuntimeError(window.controls.config_problem() or "the message could not be sent")
            (turn,) = _wait(window.reply_finished, 60)
            seconds.append(time.perf_counter() - started)
            rounds += turn.stats.rounds
        timer.stop()
    finally:
        window.close()
        window.shutdown()
    gaps = [(b - a) * 1000 for a, b in zip(ticks, ticks[1:])]
    in_window = statistics.median(seconds)
    return {"rounds_per_s": rounds / sum(seconds), "replay_rounds_per_s": len(recording.rounds) / bare,
            "rounds": rounds, "visualiser_cost": in_window / bare - 1, "gap_p50_ms": _percentile(gaps, 0.50),
            "gap_p99_ms": _percentile(gaps, 0.99), "gap_max_ms": max(gaps) if gaps else 0.0, "ticks": len(ticks)}


def measure_long_conversation(window, total_tokens: int, paragraphs: bool = True) -> dict:
    """Feed `total_tokens` of recorded rounds (the --demo recording, gui/demo_engine.py, replayed as fast as it
    goes) into the transcript, turn after turn, as a live reply would."""
    from PySide6.QtWidgets import QApplication

    from engine.core.config import parse_spec
    from engine.core.events import GenerationFinished, GenerationStarted
    from gui.demo_engine import DemoEngine

    window.new_chat()
    engine = DemoEngine(pace=float("inf"))
    session, view = window.session, window.transcript
    per_round: list[float] = []
    tokens = 0
    spec = parse_spec("prompt-lookup:k=4")
    while tokens < total_tokens:
        user = session.add_user(f"Tell me more (part {len(session.turns) // 2 + 1}).")
        view.append_user(user)
        for event in engine.generate(session.conversation(), spec=spec, max_new_tokens=total_tokens - tokens):
            if isinstance(event, GenerationStarted):
                view.begin_assistant(session.start(event))
            elif isinstance(event, GenerationFinished):
                view.end_assistant(session.finish(event))
            else:
                if not paragraphs:
                    event = _without_newlines(event)
                started = time.perf_counter()
                view.append_tokens(session.apply_round(event))
                QApplication.processEvents()  # layout and paint, as the event loop would
                per_round.append((time.perf_counter() - started) * 1000)
                tokens += len(event.committed_ids)
    window.refresh_live_views()
    started = time.perf_counter()
    window.set_show_rejected(not view.show_rejected)  # a full re-render (the only one: a toggle or theme)
    QApplication.processEvents()
    rerender_ms = (time.perf_counter() - started) * 1000
    window.set_show_rejected(True)
    head, tail = per_round[:100], per_round[-100:]
    return {"tokens": tokens, "rounds": len(per_round), "first_100_rounds_ms": statistics.mean(head),
            "last_100_rounds_ms": statistics.mean(tail), "max_ms": max(per_round),
            "characters": view.document().characterCount(), "full_rerender_ms": rerender_ms}


def _without_newlines(event):
    from dataclasses import replace

    def flat(pieces):
        return tuple(p.replace("\n", " ") for p in pieces)

    return replace(event, committed_pieces=flat(event.committed_pieces), draft_pieces=flat(event.draft_pieces))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.method is None:
        from engine.measure.fastest import sweep_methods
        args.method = sweep_methods()[0].name
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    figures: dict = {"cores": os.cpu_count(), "torch_threads": max(1, (os.cpu_count() or 2) - 1)}
    print(f"SpecScope GUI benchmark · {os.cpu_count()} cores · engine on {figures['torch_threads']} torch "
          f"thread(s) · QT_QPA_PLATFORM={os.environ.get('QT_QPA_PLATFORM')}", flush=True)

    if not args.skip_model:
        print(f"\n1. Throughput · {args.model} · {' '.join(_spec_args(args))} · {args.max_new_tokens} new tokens · "
              f"{args.repeats} run(s) each", flush=True)
        cli_runs, gui_runs = [], []
        for _ in range(max(1, args.repeats)):  # interleaved, so a busy moment hits both sides alike
            cli_runs.append(run_cli_generate(args))
            gui_runs.append(run_gui_scripted(args))
        cli = sorted(cli_runs, key=lambda r: r["tok_per_s"])[len(cli_runs) // 2]
        gui = sorted(gui_runs, key=lambda r: r["tok_per_s"])[len(gui_runs) // 2]
        cost = 1 - gui["tok_per_s"] / cli["tok_per_s"] if cli["tok_per_s"] else float("nan")
        figures["throughput"] = {"cli_tok_per_s": cli["tok_per_s"], "gui_tok_per_s": gui["tok_per_s"],
                                 "cli_tokens": cli["committed_tokens"], "gui_tokens": gui["committed_tokens"],
                                 "cli_runs": [r["tok_per_s"] for r in cli_runs],
                                 "gui_runs": [r["tok_per_s"] for r in gui_runs], "visualiser_cost": cost}
        print(f"   specscope generate   {cli['tok_per_s']:7.2f} tok/s  ({cli['committed_tokens']} tokens)")
        print(f"   specscope gui        {gui['tok_per_s']:7.2f} tok/s  ({gui['committed_tokens']} tokens)")
        print(f"   visualiser cost      {cost:+7.1%}   (target < 5 %)", flush=True)

    from PySide6.QtWidgets import QApplication

    from gui import theme
    from gui.views.main.window import MainWindow
    from gui.worker import load_real_engine

    app = QApplication.instance() or QApplication(["specscope-bench-gui"])
    theme.apply(app, theme.LIGHT)
    window = MainWindow(loader=load_real_engine, palette=theme.LIGHT, model=args.model)
    window.set_device("auto", "auto", remember=False)
    window.set_backend(args.backend)
    window.resize(1440, 900)
    window.show()
    try:
        if not args.skip_model:
            print("\n2. Responsiveness while generating (10 ms QTimer on the GUI thread)", flush=True)
            window.start()
            _wait(window.model_ready, 900)
            result = measure_responsiveness(args, window)
            figures["responsiveness"] = result
            print(f"   event-loop gap  p50 {result['gap_p50_ms']:.1f} ms · p99 {result['gap_p99_ms']:.1f} ms · "
                  f"max {result['gap_max_ms']:.1f} ms  over {result['ticks']} ticks (target p99 < 30 ms)")
            print(f"   tok/s in the window: {result['tok_per_s']:.2f} · {result['rounds_per_s']:.0f} rounds/s "
                  f"({result['rounds']} rounds) · GUI thread busy {result['gui_thread_cpu_share']:.0%} of the time",
                  flush=True)

        print(f"\n2b. Rounds at llama.cpp speed ({FAST_ROUNDS_PER_S:.0f}/s: the built-in model's recorded plain "
              f"decoding replayed into the window)", flush=True)
        fast = measure_fast_rounds()
        figures["fast_rounds"] = fast
        print(f"   {fast['rounds_per_s']:.0f} rounds/s in the window ({fast['replay_rounds_per_s']:.0f}/s bare) · "
              f"visualiser cost {fast['visualiser_cost']:+.1%} (target < 5 %) · event-loop gap p50 "
              f"{fast['gap_p50_ms']:.1f} ms · p99 {fast['gap_p99_ms']:.1f} ms · max {fast['gap_max_ms']:.1f} ms "
              f"(target p99 < 30 ms)", flush=True)

        print(f"\n3. Long conversation: {args.long_tokens:,} tokens appended round by round", flush=True)
        for label, paragraphs in (("with paragraphs", True), ("one paragraph per reply", False)):
            result = measure_long_conversation(window, args.long_tokens, paragraphs)
            figures[f"long_conversation_{'paragraphs' if paragraphs else 'flat'}"] = result
            print(f"   {label:24s} first 100 rounds {result['first_100_rounds_ms']:.2f} ms/round · "
                  f"last 100 rounds {result['last_100_rounds_ms']:.2f} ms/round · max {result['max_ms']:.1f} ms "
                  f"({result['rounds']} rounds, {result['tokens']:,} tokens); hiding the rejected drafts re-renders it "
                  f"in {result['full_rerender_ms']:.0f} ms", flush=True)
    finally:
        window.close()
        window.shutdown()
    if args.json:
        print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
