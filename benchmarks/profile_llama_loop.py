"""A benchmark, not a test (run by hand; prints figures): what our llama.cpp loop's Python costs per token on top
of llama.cpp, on the built-in GGUF (or `--model PATH`), greedy, the engine's threads.

1. A profile of one decode round through the Engine (the prefill round left out, recording off), each phase timed
   inclusively with wrappers, in µs per round: the draft (its own llama_decode calls, a draft model's or an MTP
   head's context, apart), the sync, the verification pass (the runner's forward: batch building and the target's
   llama_decode, reading the logits; the verification, with the drafted tokens' probabilities; the rollback), the
   round's commit and event (detokenising apart), the stats, and the rest of the loop; first the same run's round
   uninstrumented. `--spec SPEC` profiles a speculative setting's rounds (`--spec mtp:k=3`,
   `--spec draft-model:k=3,draft=default`; plain decoding without it); `--json OUT` writes the figures (a before
   and an after to compare). `--cprofile` adds cProfile's top functions by own time.
2. Ours beside llama-cpp-python's own `Llama` and a bare low-level loop (engine.measure.references), the same GGUF,
   prompt ids and threads, run interleaved (the order rotated each repeat); tok/s of each as engine.core.stats
   counts it (tokens after the first over the time after the first), medians, and the two ratios.

`--clock thread` makes every timer of the run (ours, the references', the profile's) read this thread's CPU time
instead of the wall clock: llama.cpp computes in the calling thread when it has one thread, so on a machine shared
with other work the figures then count what each loop itself spent, not the time it waited for a core.

    python -m benchmarks.profile_llama_loop [--new 200] [--repeats 3] [--clock wall|thread] [--model PATH]
                                              [--spec SPEC] [--json OUT] [--no-profile] [--no-compare] [--cprofile]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict

PROMPT = "Write a long story about a dragon who learns to bake bread, with many details."

# (label, parent label or None, module path, owner attribute or None, attribute): each phase timed inclusively
COMPONENTS = [
    ("draft (drafter.propose)", None, "engine.core.engine", "Engine", "_propose"),
    ("runner.sync", None, "engine.backends.llama_cpp_runner", "LlamaCppRunner", "sync"),
    ("verify_pass", None, "engine.core.engine", None, "verify_pass"),
    ("runner.forward", "verify_pass", "engine.backends.llama_cpp_runner", "LlamaCppRunner", "forward"),
    ("batch + llama_decode", "runner.forward", "engine.backends.llama_cpp_runner", "LlamaCppRunner",
     "_decode_batch"),
    ("reading logits", "runner.forward", "engine.backends.llama_cpp_runner", "LlamaCppRunner", "_logits"),
    ("verification (greedy)", "verify_pass", "engine.core.loop", None, "verify_greedy_drafted"),
    ("verification (sampled)", "verify_pass", "engine.core.loop", None, "rejection_sample"),
    ("rollback", "verify_pass", "engine.backends.llama_cpp_runner", "LlamaCppRunner", "rollback"),
    ("commit + event", None, "engine.core.engine", None, "commit_round"),
    ("detokenising (add + peek)", "commit + event", "engine.core.chat", "IncrementalDetokenizer", "add"),
    ("detokenising (add + peek)", "commit + event", "engine.core.chat", "IncrementalDetokenizer", "peek"),
    ("RoundVerified(...)", "commit + event", "engine.core.loop", None, "RoundVerified"),
    ("stats", None, "engine.core.stats", "StatsAccumulator", "add_round"),
]
TOP_LEVEL = ("draft (drafter.propose)", "runner.sync", "verify_pass", "commit + event", "stats")
DEPTH = {None: 0, "verify_pass": 1, "commit + event": 1, "runner.forward": 2}


class Timers:
    """Wraps COMPONENTS with timers of `clock` (inclusive seconds and calls per label), and llama.cpp's
    llama_decode with one that tells the target runner's context from the others (a draft model's, an MTP or
    assistant head's); undone by restore()."""

    def __init__(self, target_runner) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._undo = []
        self._runner = target_runner

    def install(self) -> None:
        import ctypes
        import importlib

        import llama_cpp
        for label, _parent, module_name, owner_name, attribute in COMPONENTS:
            module = importlib.import_module(module_name)
            owner = getattr(module, owner_name) if owner_name else module
            original = owner.__dict__[attribute] if owner_name else getattr(owner, attribute, None)
            if original is None:
                continue
            if isinstance(original, staticmethod):  # Engine._propose: stays a static method
                setattr(owner, attribute, staticmethod(self._timed(label, original.__func__)))
            else:  # a runner's methods: the target runner's calls only (a draft model's count in the draft)
                setattr(owner, attribute, self._timed(label, original, owner_name == "LlamaCppRunner"))
            self._undo.append((owner, attribute, original))
        decode, runner, seconds, calls = llama_cpp.llama_decode, self._runner, self.seconds, self.calls

        def address(pointer) -> int:  # a context as llama-cpp-python hands it over: an int or a pointer
            return pointer if isinstance(pointer, int) else ctypes.cast(pointer, ctypes.c_void_p).value

        def timed_decode(ctx, batch, clock=time.perf_counter):
            started = clock()
            try:
                return decode(ctx, batch)
            finally:
                own = runner.open_context
                label = "llama_decode (target)" if own is not None and address(ctx) == address(own) else \
                    "llama_decode (draft contexts)"
                seconds[label] += clock() - started
                calls[label] += 1
        llama_cpp.llama_decode = timed_decode
        self._undo.append((llama_cpp, "llama_decode", decode))

    def _timed(self, label, original, target_only: bool = False):
        seconds, calls, clock, runner = self.seconds, self.calls, time.perf_counter, self._runner

        def timed(*args, **kwargs):
            if target_only and args[0] is not runner:
                return original(*args, **kwargs)
            started = clock()
            try:
                return original(*args, **kwargs)
            finally:
                seconds[label] += clock() - started
                calls[label] += 1
        return timed

    def reset(self) -> None:
        self.seconds.clear()
        self.calls.clear()

    def restore(self) -> None:
        for owner, attribute, original in reversed(self._undo):
            setattr(owner, attribute, original)
        self._undo.clear()


SPEC = None  # the setting profiled (--spec; None: plain decoding)
ROUNDS = [0]  # decode rounds of the last decode_rounds call


def decode_rounds(engine, ids: list[int], new: int, on_first=None, spec=None) -> tuple[int, float]:
    """Greedy decoding of `ids` (plain, or `spec`): tokens after the first and the seconds they took (from the
    first round's event to the last's); `on_first` is called when the first (prefill) round's event arrives."""
    from engine.core.events import RoundVerified
    engine.release()
    started = ended = None
    tokens = ROUNDS[0] = 0
    for event in engine.generate_ids(ids, max_new_tokens=new, **({"spec": spec} if spec else {})):
        if isinstance(event, RoundVerified):
            if started is None:
                if on_first is not None:
                    on_first()
                started = time.perf_counter()
            else:
                ended = time.perf_counter()
                tokens += len(event.committed_ids)
                ROUNDS[0] += 1
    return tokens, (ended - started) if ended else 0.0


def profile(engine, ids: list[int], new: int, use_cprofile: bool) -> dict[str, float]:
    """One round's phases in µs (decode rounds, recording off), printed; returned by label, with "round" (the
    instrumented round) and "plain round" (the same run uninstrumented, just before)."""
    tokens, bare_seconds = decode_rounds(engine, ids, new, spec=SPEC)
    bare_rounds = max(1, ROUNDS[0])
    timers = Timers(engine.runner)
    timers.install()
    try:
        tokens, seconds = decode_rounds(engine, ids, new, on_first=timers.reset, spec=SPEC)
    finally:
        timers.restore()
    rounds = max(1, ROUNDS[0])
    us = lambda s: 1e6 * s / rounds  # noqa: E731
    figures = {"round": us(seconds), "uninstrumented round": 1e6 * bare_seconds / bare_rounds}
    print(f"profile of {SPEC.label() if SPEC else 'plain decoding'} (recording off): {tokens} decode tokens in "
          f"{rounds} rounds ({tokens / rounds:.2f} a round); {figures['uninstrumented round']:.0f} µs a round "
          f"uninstrumented, {us(seconds):.0f} instrumented")
    print(f"  {'phase':<40} {'µs/round':>9} {'calls/round':>12}")
    shown = []
    for label, parent, *_ in COMPONENTS:
        if label in shown or label not in timers.seconds:
            continue
        shown.append(label)
        depth = DEPTH.get(parent, 3)
        figures[label] = us(timers.seconds[label])
        print(f"  {'  ' * depth}{label:<{40 - 2 * depth}} {figures[label]:9.1f} {timers.calls[label] / rounds:12.2f}")
        if label == "batch + llama_decode":
            target = timers.seconds.get("llama_decode (target)", 0.0)
            figures["llama_decode (target)"] = us(target)
            figures["batch building"] = us(timers.seconds[label] - target)
            print(f"  {'  ' * 4}{'llama_decode (target)':<32} {us(target):9.1f} "
                  f"{timers.calls['llama_decode (target)'] / rounds:12.2f}")
            print(f"  {'  ' * 4}{'batch building, hidden states':<32} {figures['batch building']:9.1f}")
        if label == "draft (drafter.propose)" and "llama_decode (draft contexts)" in timers.seconds:
            drafted = timers.seconds["llama_decode (draft contexts)"]
            figures["llama_decode (draft contexts)"] = us(drafted)
            figures["draft outside llama_decode"] = us(timers.seconds[label] - drafted)
            print(f"  {'  ' * 1}{'llama_decode (draft contexts)':<38} {us(drafted):9.1f} "
                  f"{timers.calls['llama_decode (draft contexts)'] / rounds:12.2f}")
            print(f"  {'  ' * 1}{'draft outside llama_decode':<38} {figures['draft outside llama_decode']:9.1f}")
    rest = seconds - sum(timers.seconds.get(label, 0.0) for label in TOP_LEVEL)
    in_decode = timers.seconds.get("llama_decode (target)", 0.0) + timers.seconds.get("llama_decode (draft contexts)", 0.0)
    figures["rest of the loop"], figures["outside llama_decode"] = us(rest), us(seconds - in_decode)
    print(f"  {'rest of the loop (generator, clocks)':<40} {us(rest):9.1f}")
    print(f"  {'all outside llama_decode':<40} {us(seconds - in_decode):9.1f}   "
          f"({1000 * (seconds - in_decode) / max(1, tokens):.3f} ms a token)")
    if use_cprofile:
        import cProfile
        import pstats
        profiler = cProfile.Profile(time.perf_counter)
        profiler.enable()
        decode_rounds(engine, ids, new, spec=SPEC)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
    return figures


def outside_decode(runs: dict, repeats: int) -> None:
    """Each loop's time per token in llama_decode and outside it (its own Python), llama_decode alone timed, the
    loops interleaved; medians over the repeats. In all three loops the decode rounds (after the first token) make
    one llama_decode each, the last ones of the run: the prefill's are left out. These overheads are what the
    ratios of compare() come from."""
    import llama_cpp
    import llama_cpp.llama_cpp as bindings  # what llama-cpp-python's Llama calls
    original = llama_cpp.llama_decode
    figures: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for _ in range(repeats):
        for name, run in runs.items():
            spent: list[float] = []

            def timed(ctx, batch, clock=time.perf_counter):
                started = clock()
                try:
                    return original(ctx, batch)
                finally:
                    spent.append(clock() - started)
            llama_cpp.llama_decode = bindings.llama_decode = timed
            try:
                tokens, seconds = run(timings=True)
            finally:
                llama_cpp.llama_decode = bindings.llama_decode = original
            in_decode = sum(spent[len(spent) - tokens:])
            figures[name].append((1000 * seconds / tokens, 1000 * (seconds - in_decode) / tokens))
    print(f"ms per token, medians of {repeats} interleaved runs (decode rounds; llama_decode alone timed):")
    for name, values in figures.items():
        total = statistics.median(v[0] for v in values)
        outside = statistics.median(v[1] for v in values)
        print(f"  {name:<10} {total:7.3f} ms/token, of which outside llama_decode {outside:6.3f} ms")


def compare(engine, path: str, ids: list[int], new: int, repeats: int, threads: int) -> None:
    from engine.measure.references import BareLoop, LlamaCppPython
    target = engine.target
    gpu_layers = target.native.n_gpu_layers
    llama = LlamaCppPython(path, n_threads=threads, n_ctx=target.context_length, n_gpu_layers=gpu_layers)
    bare = BareLoop(path, n_threads=threads, n_ctx=target.context_length, n_gpu_layers=gpu_layers)
    outputs = {}

    def ours(timings=False):
        tokens, seconds = decode_rounds(engine, ids, new)
        return (tokens, seconds) if timings else tokens / seconds

    def reference(which):
        def run(timings=False):
            result = which.generate(ids, new, engine.eos_ids)
            outputs[which.label] = result.output_ids
            if timings:
                return len(result.output_ids) - 1, result.elapsed_seconds - result.ttft_seconds
            return result.tok_per_s
        return run

    runs = {"ours": ours, "Llama": reference(llama), "bare loop": reference(bare)}
    for run in runs.values():
        run()  # warm-up, untimed
    figures: dict[str, list[float]] = defaultdict(list)
    names = list(runs)
    for repeat in range(repeats):
        order = names[repeat % len(names):] + names[:repeat % len(names)]
        for name in order:
            figures[name].append(runs[name]())
        row = figures
        print(f"  repeat {repeat + 1}: " + " · ".join(f"{n} {row[n][-1]:.1f}" for n in names) +
              f" tok/s; ours/Llama {row['ours'][-1] / row['Llama'][-1]:.3f}, "
              f"ours/bare {row['ours'][-1] / row['bare loop'][-1]:.3f}")
    ours_ids = next(e for e in engine.generate_ids(ids, max_new_tokens=new) if type(e).__name__ ==
                    "GenerationFinished").output_ids
    same = {label: output == ours_ids for label, output in outputs.items()}
    median = {name: statistics.median(values) for name, values in figures.items()}
    ratios_llama = statistics.median(o / t for o, t in zip(figures["ours"], figures["Llama"]))
    ratios_bare = statistics.median(o / t for o, t in zip(figures["ours"], figures["bare loop"]))
    print(f"medians over {repeats} interleaved repeats: " +
          " · ".join(f"{n} {median[n]:.1f} tok/s" for n in names))
    print(f"ours ÷ Llama {ratios_llama:.3f} · ours ÷ bare loop {ratios_bare:.3f} (medians of the per-repeat "
          f"ratios); outputs equal to ours: {same}")
    outside_decode(runs, repeats)
    llama.close()
    bare.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--new", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", default="default", help="a .gguf (default: the built-in model)")
    parser.add_argument("--prompt", default=PROMPT)
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--no-compare", action="store_true")
    parser.add_argument("--cprofile", action="store_true")
    parser.add_argument("--spec", default=None, help="profile this setting's rounds (a SPEC), not plain decoding")
    parser.add_argument("--clock", choices=("wall", "thread"), default="wall")
    parser.add_argument("--json", default=None, help="write the profile's µs per round per phase here")
    args = parser.parse_args(argv)
    if args.clock == "thread":
        time.perf_counter = time.thread_time  # every timer of this process, ours and the references'
    from engine.host import engine_threads, limit_torch_threads
    from engine.models.load import load_model
    from engine.runtime import local_engine
    limit_torch_threads()
    model = load_model(args.model, device="cpu", backend="llama.cpp")
    engine = local_engine(model)
    ids = engine.prompt_ids(args.prompt)
    global SPEC
    if args.spec:
        from engine.core.config import parse_spec
        SPEC = parse_spec(args.spec)
        engine.validate(SPEC)
    decode_rounds(engine, ids, 16, spec=SPEC)  # warm-up
    print(f"{model.label}: {len(ids)} prompt ids, {engine_threads()} threads, {args.new} new tokens at most, "
          f"{args.clock} clock")
    if not args.no_profile:
        figures = profile(engine, ids, args.new, args.cprofile)
        if args.json:
            import json
            from pathlib import Path
            Path(args.json).write_text(json.dumps({"spec": SPEC.label() if SPEC else "plain", "model": model.label,
                                                   "clock": args.clock, "us_per_round": figures}, indent=1))
    if not args.no_compare:
        compare(engine, str(model.source.file), ids, args.new, args.repeats, engine_threads())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
