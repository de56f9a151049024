"""A benchmark, not a test (run by hand; prints figures): what recording every round's tree costs
(`generate(record=True)`: the target's top-5 and entropy at each verified position, the drafter's top-5, the
draws), on the built-in GGUF on llama.cpp, the engine's threads. Recording off and on run interleaved (the order
swapped each repeat) on the same prompts and settings; tok/s as engine.core.stats counts it, medians, and
on ÷ off. The tokens must be identical (checked and printed).

    python -m benchmarks.recording [--new 96] [--repeats 3] [--method none|prompt-lookup] [--k 3]
                                     [--backend llama.cpp|transformers] [--model default]
"""

from __future__ import annotations

import argparse
import statistics

PROMPTS = ["Write a short story about a dragon who learns to bake bread.",
           "Explain how a hash map works, with an example in Python.",
           "Repeat this list, then sort it: pear, apple, fig, banana, cherry, apple, fig.",
           "Summarise: the meeting moved to Thursday; Anna brings the slides; Ben books the room."]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--method", default="prompt-lookup")
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--backend", default="llama.cpp")
    parser.add_argument("--model", default="default")
    args = parser.parse_args()

    from engine.core.config import SamplingConfig, SpecConfig
    from engine.core.events import GenerationFinished
    from engine.runtime import load_engine
    engine = load_engine(args.model, device="cpu", backend=args.backend)
    spec = SpecConfig(args.method, k=args.k if args.method != "none" else 0)
    speeds: dict[bool, list[float]] = {False: [], True: []}
    outputs: dict[bool, list[tuple]] = {False: [], True: []}

    def once(prompt: str, record: bool) -> GenerationFinished:
        engine.release()  # the same cold cache for both
        *_, finished = engine.generate([{"role": "user", "content": prompt}], spec=spec, sampling=SamplingConfig(),
                                       max_new_tokens=args.new, record=record)
        return finished

    for prompt in PROMPTS[:1]:
        once(prompt, False), once(prompt, True)  # warm-up, untimed
    for repeat in range(args.repeats):
        for prompt in PROMPTS:
            for record in ((False, True) if repeat % 2 == 0 else (True, False)):
                finished = once(prompt, record)
                speeds[record].append(finished.stats.tok_per_s)
                if repeat == 0:
                    outputs[record].append(finished.output_ids)
    identical = sum(a == b for a, b in zip(outputs[False], outputs[True]))
    off, on = statistics.median(speeds[False]), statistics.median(speeds[True])
    print(f"{engine.target.label} on {args.backend}, {spec.label()}, {len(PROMPTS)} prompts × {args.repeats} "
          f"repeats, {args.new} new tokens")
    print(f"recording off: {off:.1f} tok/s (median)   on: {on:.1f} tok/s   on/off {on / off:.3f} "
          f"(cost {1 - on / off:+.1%})   identical outputs {identical}/{len(outputs[False])}")
    engine.release()


if __name__ == "__main__":
    main()
