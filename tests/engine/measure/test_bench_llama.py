"""`specscope bench --compare-llama`'s references (engine.measure.bench_llama, engine.measure.references): they get
the GPU layers of our loaded model, every config (and every reference) is warmed up before timing, and the bare
low-level loop's column is in the table, on a tiny GGUF written here."""

from __future__ import annotations

import io
from collections import Counter
from types import SimpleNamespace

import pytest

from engine.core.config import SamplingConfig, SpecConfig, parse_spec
from engine.core.events import GenerationFinished, GenerationStarted
from engine.core.stats import GenerationStats
from engine.measure import bench_llama, references
from engine.measure.bench import WARM_UP, run_benchmark, summarise
from engine.measure.prompts import Prompt
from engine.measure.references import ReferenceRun

PROMPTS = [Prompt("1", "coding", "Write hello world."), Prompt("2", "chat", "Say hi.")]
OUTPUT = (5, 6, 7)


def _stats() -> GenerationStats:
    return GenerationStats(k=0, committed_tokens=len(OUTPUT), target_passes=len(OUTPUT), rounds=len(OUTPUT),
                           drafting_rounds=0, drafted_tokens=0, accepted_tokens=0, ttft_seconds=0.01,
                           elapsed_seconds=0.03, draft_seconds=0.0, verify_seconds=0.03,
                           per_position_acceptance=(), accept_length_histogram=())


class CountingEngine:
    """A scripted llama.cpp engine: every generation gives OUTPUT, and is counted per (config, prompt text)."""

    eos_ids = frozenset({0})

    def __init__(self) -> None:
        self.target = SimpleNamespace(backend="llama.cpp", label="scripted", context_length=256,
                                      source=SimpleNamespace(file="model.gguf"),
                                      native=SimpleNamespace(n_gpu_layers=-1))
        self.generations: list[tuple[str, str]] = []

    def validate(self, spec) -> None:
        pass

    def release(self) -> None:
        pass

    def prompt_ids(self, text: str) -> list[int]:
        return [1, 2, len(text)]

    def generate(self, text, *, spec, sampling, max_new_tokens):
        self.generations.append((spec.label(), text))
        yield GenerationStarted(spec_label=spec.label(), method=spec.method, k=spec.k, model="scripted", draft=None,
                                device="cpu", dtype="q8", greedy=True, prompt_tokens=3, reused_prefix_tokens=0,
                                max_new_tokens=max_new_tokens)
        yield GenerationFinished(stop_reason="max-new-tokens", text="", output_ids=OUTPUT, stats=_stats())


class CountingReference:
    """A reference that answers OUTPUT and counts its generations by prompt ids."""

    def __init__(self, *args, **kwargs) -> None:
        self.kwargs = kwargs
        self.prompts: list[tuple[int, ...]] = []

    def generate(self, prompt_ids, max_new_tokens, eos_ids) -> ReferenceRun:
        self.prompts.append(tuple(prompt_ids))
        return ReferenceRun(OUTPUT, 0.01, 0.02)

    def close(self) -> None:
        pass


@pytest.fixture
def counting_references(monkeypatch):
    made = {"llama": [], "bare": []}

    def maker(kind):
        def make(*args, **kwargs):
            made[kind].append(CountingReference(*args, **kwargs))
            return made[kind][-1]
        return make
    monkeypatch.setattr(references, "LlamaCppPython", maker("llama"))
    monkeypatch.setattr(references, "BareLoop", maker("bare"))
    return made


def test_the_references_get_the_models_gpu_layers_and_plain_decoding_a_bare_loop(counting_references):
    engine = CountingEngine()
    engine.target.native.n_gpu_layers = 7
    specs = [SpecConfig(), parse_spec("prompt-lookup:k=3")]
    comparisons = bench_llama.make_comparisons(engine, specs)
    assert set(comparisons) == {"none", "prompt-lookup:k=3"}
    made = counting_references
    assert [r.kwargs["n_gpu_layers"] for r in made["llama"] + made["bare"]] == [7, 7, 7]
    assert made["llama"][1].kwargs["k"] == 3 and made["llama"][0].kwargs["k"] is None
    assert len(made["bare"]) == 1 and comparisons["none"].bare is made["bare"][0]  # plain decoding only
    assert comparisons["prompt-lookup:k=3"].bare is None
    assert {r.kwargs["n_ctx"] for r in made["llama"] + made["bare"]} == {256}


def test_every_config_and_reference_is_warmed_up_once_before_timing(counting_references):
    engine = CountingEngine()
    specs = [parse_spec("prompt-lookup:k=2"), parse_spec("prompt-lookup:k=4")]
    comparisons = bench_llama.make_comparisons(engine, [SpecConfig(), *specs])
    results = run_benchmark(engine, PROMPTS, specs, 8, SamplingConfig(), comparisons=comparisons)
    labels = ["none", "prompt-lookup:k=2", "prompt-lookup:k=4"]
    assert Counter(engine.generations) == Counter({(label, text): 1 for label in labels
                                                   for text in [WARM_UP.text] + [p.text for p in PROMPTS]})
    first_timed = engine.generations.index(("none", PROMPTS[0].text))
    assert {label for label, text in engine.generations[:first_timed]} == set(labels)  # all warmed up first
    assert all(text == WARM_UP.text for _, text in engine.generations[:first_timed])
    warm_ids = tuple(engine.prompt_ids(WARM_UP.text))
    for reference in counting_references["llama"] + counting_references["bare"]:
        assert reference.prompts[0] == warm_ids and len(reference.prompts) == 1 + len(PROMPTS)
    # the warm-up is not counted: each reference's tally holds the timed prompts only
    assert comparisons["none"].theirs.decode_tokens["all"] == len(PROMPTS) * (len(OUTPUT) - 1)
    assert comparisons["none"].bare_tally.identical["all"] == len(PROMPTS)
    assert [len(r.stats["all"]) for r in results] == [len(PROMPTS)] * 3


def test_bench_prints_the_bare_loops_column_on_a_tiny_gguf(tmp_path):
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    from rich.console import Console

    from engine.measure.report import print_table
    from engine.models.load import load_model
    from engine.runtime import local_engine
    from tests.fixtures.tiny_gguf import build
    [path] = build("llama", tmp_path / "tiny.gguf")
    engine = local_engine(load_model(str(path), device="cpu", backend="llama.cpp"))
    specs = [parse_spec("prompt-lookup:k=2")]
    prompts = [Prompt("1", "chat", "hello world, how are you?"), Prompt("2", "code", "def add(a, b):\n    return")]
    comparisons = bench_llama.make_comparisons(engine, [SpecConfig(), *specs])
    try:
        results = run_benchmark(engine, prompts, specs, 12, SamplingConfig(), comparisons=comparisons)
    finally:
        bench_llama.close_comparisons(comparisons)
    summary = summarise(results, False, comparisons)
    plain = summary["none"]["all"]
    assert plain["bare_loop_tok_per_s"] > 0 and plain["ours_over_bare_loop"] > 0
    assert plain["bare_loop_identical"] == len(prompts)  # the same greedy decoding as ours, token for token
    assert plain["llama_cpp_python_tok_per_s"] > 0
    assert "bare_loop_tok_per_s" not in summary["prompt-lookup:k=2"]["all"]  # a bare loop only decodes plainly
    out = io.StringIO()
    print_table(summary, False, Console(file=out, width=120))  # the references' own table: no heading squeezed
    text = out.getvalue()
    assert "beside llama.cpp's own loops" in text
    assert "bare tok/s" in text and "ours/bare" in text and "ours/theirs" in text
    assert "bare: a bare greedy loop" in text
    engine.release()
