"""A benchmark, not a test (run by hand; prints figures): where concurrent users stop a server's speculation paying.
Starts vLLM (engine.measure.vllm_server; the venv packaging/install.sh makes) on the built-in model twice, plain
and with n-gram speculation, sends N chats at once to each (threads over engine.remote.engine, the app's own
client), and prints per N: the aggregate tokens/s (the server's tokens over the wall time of the batch), the
median stream's tok/s, and speculation against plain at that N, measured in the same run.

    python -m benchmarks.server_concurrency [--concurrency 1,2,4] [--new 64] [--k 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

PROMPTS = [
    "Repeat this list exactly, twice: apple, banana, cherry, date, elderberry, fig, grape.",
    "Rename total to subtotal and show the code: def add(items):\n    total = 0\n    for item in items:\n"
    "        total = total + item.price\n    return total",
    "Summarise in one sentence: the council met on Tuesday and agreed to add two bus routes to the harbour.",
    "Write the numbers from one to twenty in words, separated by commas.",
]


def one_batch(url: str, n: int, new_tokens: int) -> tuple[float, list[float], int]:
    """N chats at once: (wall seconds, each stream's tok/s, the server's tokens in all)."""
    import engine.drafters  # noqa: F401  (the method registry)
    from engine.remote.engine import load_remote
    engines = [load_remote(url) for _ in range(n)]
    results: list = [None] * n

    def chat(i: int) -> None:
        events = list(engines[i].generate(PROMPTS[i % len(PROMPTS)], max_new_tokens=new_tokens))
        results[i] = events[-1]

    threads = [threading.Thread(target=chat, args=(i,)) for i in range(n)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - start
    return wall, [r.stats.tok_per_s for r in results], sum(r.stats.committed_tokens for r in results)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", default="1,2,4")
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--k", type=int, default=3)
    args = parser.parse_args(argv)
    levels = [int(part) for part in args.concurrency.split(",")]

    from engine.measure.vllm_server import VllmServer, built_in_model_folder, ngram_config
    folder = built_in_model_folder()
    figures: dict[tuple[str, int], tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as logs:
        for label, speculative in (("plain", None), (f"ngram k={args.k}", ngram_config(k=args.k))):
            with VllmServer(folder, speculative, log_dir=Path(logs), name="smollm2") as server:
                one_batch(server.url, 1, 8)  # warm-up
                for n in levels:
                    wall, per_stream, tokens = one_batch(server.url, n, args.new)
                    figures[(label, n)] = (tokens / wall, statistics.median(per_stream))
                    print(f"{label:12} N={n}: {tokens} tokens in {wall:.2f} s = {tokens / wall:.1f} tok/s in all, "
                          f"median stream {statistics.median(per_stream):.1f} tok/s", flush=True)
    spec = f"ngram k={args.k}"
    for n in levels:
        (plain_all, plain_one), (spec_all, spec_one) = figures[("plain", n)], figures[(spec, n)]
        print(f"N={n}: speculation / plain = {spec_all / plain_all:.2f}× in all, {spec_one / plain_one:.2f}× a stream")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
