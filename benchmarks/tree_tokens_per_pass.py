"""A benchmark, not a test (run by hand; prints figures): tokens committed per target pass (engine.core.stats'
mean accepted length: committed tokens / target passes) of a method's chain against its token tree, greedy, on the
preset prompts (assets/presets.json, or --prompts FILE, e.g. Spec-Bench's questions; one or more per category), with
the outputs checked equal. By default early exit on the built-in model (transformers, float32), k = 4, a tree of
12 nodes.

    python -m benchmarks.tree_tokens_per_pass [--model default] [--spec early-exit:k=4,layers=10] [--tree 12]
                                              [--prompts FILE] [--per-category 1] [--new 64]
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

PRESETS = Path(__file__).resolve().parent.parent / "assets" / "presets.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--backend", default="transformers")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--spec", default="early-exit:k=4,layers=10")
    parser.add_argument("--tree", type=int, nargs="+", default=[12])
    parser.add_argument("--prompts", default=str(PRESETS))
    parser.add_argument("--per-category", type=int, default=1)
    parser.add_argument("--new", type=int, default=64)
    args = parser.parse_args(argv)

    from engine.core.config import parse_spec
    from engine.core.events import GenerationFinished
    from engine.measure.prompts import load_prompts
    from engine.runtime import load_engine
    engine = load_engine(args.model, device="cpu", dtype=args.dtype, backend=args.backend)
    chain = parse_spec(args.spec)
    specs = [chain] + [replace(chain, tree=tree) for tree in args.tree]
    totals = {spec: [0, 0] for spec in specs}
    for prompt in load_prompts(args.prompts, limit=args.per_category):
        ids = engine.prompt_ids(prompt.text)
        outputs, figures = [], []
        for spec in specs:
            engine.release()
            events = list(engine.generate_ids(ids, max_new_tokens=args.new, spec=spec))
            finished = next(e for e in events if isinstance(e, GenerationFinished))
            totals[spec][0] += finished.stats.committed_tokens
            totals[spec][1] += finished.stats.target_passes
            outputs.append(finished.output_ids)
            figures.append(f"{finished.stats.mean_accepted_length:.2f}")
        same = "equal" if all(output == outputs[0] for output in outputs) else "OUTPUTS DIFFER"
        print(f"{prompt.id:8} {' '.join(figures)}  ({same})", flush=True)
    base = totals[chain][0] / totals[chain][1]
    for spec, (committed, passes) in totals.items():
        print(f"{spec.label()}: {committed} tokens / {passes} "
              f"target passes = {committed / passes:.3f} a pass ({committed / passes / base:.3f}× the chain)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
