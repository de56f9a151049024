"""A benchmark, not a test (run by hand; prints figures): how much of a generation's time its rounds' own draft
and verify times account for, on the built-in GGUF (or `--model`), a speculative setting that does real passes on
both sides (a draft model by default). The remainder is the loop's bookkeeping between rounds (commit,
detokenization, events, stats); the round timeline and every tok/s figure read these per-round times, so a large
remainder would mean the panels hide where the time goes. Prints each repeat's share of the engine's own elapsed
seconds and of the caller's wall clock, and their medians.

    python -m benchmarks.round_times [--model default] [--backend llama.cpp] [--spec SPEC] [--new 96] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

PROMPT = "Write a story of about three hundred words about a lighthouse keeper and a storm."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--backend", default="llama.cpp")
    parser.add_argument("--spec", default="draft-model:k=4,draft=default")
    parser.add_argument("--new", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    from engine.core.config import parse_spec
    from engine.core.events import GenerationFinished, RoundVerified
    from engine.runtime import load_engine
    engine = load_engine(args.model, device="cpu", backend=args.backend)
    spec = parse_spec(args.spec)
    engine.validate(spec)
    ids = engine.prompt_ids(PROMPT)
    list(engine.generate_ids(ids, max_new_tokens=4, spec=spec))  # the draft loaded and warmed up, not timed
    of_elapsed, of_wall = [], []
    for repeat in range(args.repeats):
        engine.release()
        started = time.perf_counter()
        events = list(engine.generate_ids(ids, max_new_tokens=args.new, spec=spec))
        wall = time.perf_counter() - started
        rounds = [e for e in events if isinstance(e, RoundVerified)]
        stats = next(e for e in events if isinstance(e, GenerationFinished)).stats
        accounted = sum(r.draft_seconds + r.verify_seconds for r in rounds)
        of_elapsed.append(accounted / stats.elapsed_seconds)
        of_wall.append(accounted / wall)
        print(f"repeat {repeat + 1}: {len(rounds)} rounds, draft + verify {accounted:.3f} s, engine's elapsed "
              f"{stats.elapsed_seconds:.3f} s ({of_elapsed[-1]:.1%}), wall {wall:.3f} s ({of_wall[-1]:.1%})")
    print(f"{args.spec} on {args.backend}: rounds account for {statistics.median(of_elapsed):.1%} of the engine's "
          f"elapsed time and {statistics.median(of_wall):.1%} of the wall time (medians of {args.repeats})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
