"""A benchmark, not a test (run by hand; prints figures): SpecScope's llama.cpp backend against llama-server on a
wider random Qwen 3.5-style hybrid with one MTP layer (8 layers, width 1024, Q8_0, ≈ 120 MB), the same prompt
ids, threads and k: plain decoding and `mtp` (llama-server's `--spec-type draft-mtp`). Prints tokens/s and time
per target pass of each, their ratio, whether the tokens are the same and the drafted / accepted counts of
both, and the model's verify-cost curve (measured with its recurrent-state snapshots).

    python -m benchmarks.mtp_llama_server [--threads N] [--k K] [--new N]     # from the repository root
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

WIDE = dict(n_embd=1024, n_ff=3072, n_head=8, head_dim=128, n_head_kv=2, d_state=128, n_group=2, dt_rank=8,
            n_layer=8)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--new", type=int, default=64)
    args = parser.parse_args(argv)
    import torch

    import tests.fixtures.tiny_gguf as fixtures
    from engine.core.config import SpecConfig
    from engine.measure.llama_server import LlamaServer, complete_ids, find_llama_server
    from engine.measure.verify_cost import measure
    from engine.models.load import load_model
    from engine.runtime import local_engine
    if find_llama_server() is None:
        print("no llama-server: run packaging/install.sh")
        return 1
    torch.set_num_threads(args.threads)
    fixtures.QWEN35_SHAPE.update(WIDE)
    folder = Path(tempfile.mkdtemp(prefix="specscope-bench-mtp-"))
    f32 = fixtures.write_qwen35_gguf(folder / "wide-f32.gguf", fixtures.tiny_tokenizer())
    model_file = fixtures.quantize(f32, folder / "wide-q8_0.gguf", "Q8_0")
    f32.unlink()
    model = load_model(str(model_file), device="cpu")  # the engine's threads: cores − 1
    runner = model.new_runner()
    runner.reserve_rollback(9)
    curve = measure(runner, model.vocab_size, 8)
    runner.release()
    print(f"{model_file.name}: {model_file.stat().st_size / 2**20:.0f} MB; verify cost (ms) "
          f"{[round(1000 * s, 1) for s in curve.seconds]}, × one {[round(curve.relative(n), 2) for n in range(1, 9)]}")
    engine = local_engine(model)
    rng = random.Random(7)
    prompts = [[rng.randrange(3, 390) for _ in range(12)] for _ in range(4)]
    mtp_args = ("--spec-type", "draft-mtp", "--spec-draft-n-max", str(args.k), "--spec-draft-n-min", "0")
    for spec, extra in ((SpecConfig(), ()), (SpecConfig("mtp", k=args.k), mtp_args)):
        with LlamaServer(model_file, extra, log_dir=folder, threads=args.threads) as server:
            ours = theirs = 0.0
            our_passes = their_passes = 0
            same, counts = True, []
            for ids in prompts:
                reply = complete_ids(server, ids, args.new, timeout=600)
                started = time.perf_counter()
                finished = list(engine.generate_ids(ids, spec=spec, max_new_tokens=args.new))[-1]
                ours += time.perf_counter() - started
                timings = reply["timings"]
                theirs += (timings["prompt_ms"] + timings["predicted_ms"]) / 1000
                same &= list(finished.output_ids) == reply["tokens"]
                our_passes += finished.stats.target_passes
                their_passes += args.new - timings.get("draft_n_accepted", 0)
                counts.append(f"{finished.stats.accepted_tokens}/{finished.stats.drafted_tokens} vs "
                              f"{timings.get('draft_n_accepted', 0)}/{timings.get('draft_n', 0)}")
            n = args.new * len(prompts)
            print(f"{spec.label()}: same tokens: {same}; SpecScope {n / ours:.1f} tok/s ({1000 * ours / our_passes:.1f} "
                  f"ms a pass), llama-server {n / theirs:.1f} tok/s ({1000 * theirs / their_passes:.1f} ms); ours ÷ "
                  f"theirs {theirs / ours:.2f}; accepted/drafted ours vs theirs: {', '.join(counts)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
