"""The measured verify-cost curve (engine/measure/verify_cost.py): measured on a real runner, cached per model file,
backend, device and threads, and the theoretical speed-up that uses it."""

from __future__ import annotations

import pytest

from engine.measure import verify_cost
from engine.models import cost_cache
from engine.core.stats import VerifyCost, expected_tokens_per_pass, speedup_on_curve


def test_expected_tokens_per_pass():
    assert expected_tokens_per_pass(0.0, 4) == 1.0
    assert expected_tokens_per_pass(0.5, 3) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    assert expected_tokens_per_pass(1.0, 4) == 5.0


def test_theoretical_speedup_uses_the_measured_curve():
    free = VerifyCost((0.010,) * 8)  # a GPU: verifying 8 costs what 1 does
    assert speedup_on_curve(3.0, 4, free, 0.0) == pytest.approx(3.0)
    cpu = VerifyCost((0.005, 0.010, 0.013, 0.016, 0.019))  # the CPU: 4 tokens cost 3.2× one
    assert cpu.relative(4) == pytest.approx(3.2)
    assert speedup_on_curve(2.0, 3, cpu, 0.0) == pytest.approx(2.0 * 0.005 / 0.016)
    assert speedup_on_curve(2.0, 3, cpu, 0.001) == pytest.approx(2.0 * 0.005 / (0.016 + 0.003))
    assert speedup_on_curve(1.0, 0, cpu, 0.0) == 1.0  # plain decoding
    assert cpu.cost(7) == pytest.approx(0.019 + 2 * 0.003)  # past the measured range: its last step
    with pytest.raises(ValueError):
        cpu.cost(0)


@pytest.fixture
def tiny_gguf_model(tmp_path, tiny_dir, tiny_tokenizer):
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    from transformers import LlamaForCausalLM

    from engine.models.load import load_model
    from tests.fixtures.tiny_gguf import write_tiny_gguf
    hf = LlamaForCausalLM.from_pretrained(tiny_dir)
    path = write_tiny_gguf(tmp_path / "tiny.gguf", hf, tiny_tokenizer)
    return load_model(str(path), device="cpu", backend="llama.cpp")


@pytest.mark.parametrize("which", ["llama.cpp", "transformers"])
def test_the_curve_is_measured_once_and_cached(which, request, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    model = request.getfixturevalue("tiny_gguf_model" if which == "llama.cpp" else "tiny_model")
    cost = verify_cost.verify_cost(model, 5, threads=1)
    assert cost.n_max == 5 and all(s > 0 for s in cost.seconds) and cost.relative(1) == 1.0
    path = cost_cache.cache_file(model, 1)
    assert path.is_file() and which in path.name and "-1t" in path.name
    measured = []
    monkeypatch.setattr(verify_cost, "measure", lambda *a, **k: measured.append(a) or cost)
    assert verify_cost.verify_cost(model, 4, threads=1) == VerifyCost(cost.seconds)  # covered: from the cache
    assert not measured
    verify_cost.verify_cost(model, 8, threads=1)  # longer than what was cached: measured again
    verify_cost.verify_cost(model, 4, threads=2)  # another thread count is another curve
    assert len(measured) == 2


def test_measuring_leaves_the_runner_empty(tiny_model):
    runner = tiny_model.new_runner()
    cost = verify_cost.measure(runner, tiny_model.vocab_size, 3, repeats=2)
    assert cost.n_max == 3 and runner.ids == []


def test_a_mean_pass_size_reads_between_the_measured_points():
    cpu = VerifyCost((0.005, 0.010, 0.013))
    assert cpu.cost(2.5) == pytest.approx(0.0115) and cpu.cost(3) == 0.013 and cpu.cost(1) == 0.005


def test_theoretical_from_pooled_stats():
    from engine.core.stats import AggregateStats
    from engine.measure.verify_cost import theoretical_from_stats
    cost = VerifyCost((0.005, 0.010, 0.013, 0.016))
    stats = AggregateStats(generations=1, committed_tokens=41, decode_tokens=40, decode_seconds=1.0,
                           elapsed_seconds=1.1, target_passes=21, drafted_tokens=60, accepted_tokens=20,
                           drafting_rounds=20, decode_rounds=20, draft_seconds=0.06, verify_seconds=0.3)
    # 2 tokens a pass, 3 drafted a pass at 1 ms each: 2 × 5 ms / (16 ms + 3 ms)
    assert theoretical_from_stats(stats, cost) == pytest.approx(2 * 0.005 / (0.016 + 0.003))
    plain = AggregateStats(1, 11, 10, 1.0, 1.0, 11, 0, 0, 0, 10, 0.0, 0.5)
    assert theoretical_from_stats(plain, cost) == pytest.approx(1.0)


def test_the_sweep_curve_follows_the_measured_cost():
    from engine.measure.compare import SweepPoint, sweep_summary
    curve = VerifyCost((0.005, 0.010, 0.013, 0.016, 0.020))
    points = [SweepPoint(k, 1.0, 0.5, 0.0) for k in (1, 2, 4)]  # α = 0.5 at every k, drafting free
    on_curve = sweep_summary("prompt-lookup", points, curve)
    # E[tokens per pass] × cost(1) / cost(k+1): 1.5 × 5 / 10, 1.75 × 5 / 13, 1.9375 × 5 / 20
    assert on_curve.theory == pytest.approx((0.75, 1.75 * 5 / 13, 0.484375))
    assert sweep_summary("prompt-lookup", points).theory == pytest.approx((1.5, 1.75, 1.9375))  # fallback: free
    # a drafted token's cost: each point's c is over its own pass of k+1 tokens, so d = c × cost(k+1)
    costly = [SweepPoint(k, 1.0, 0.5, 0.1) for k in (1, 3)]  # d = 0.1 × 0.010 and 0.1 × 0.016: 1.3 ms pooled
    theory = sweep_summary("draft-model", costly, curve).theory
    assert theory == pytest.approx((1.5 * 0.005 / (0.010 + 0.0013), 1.875 * 0.005 / (0.016 + 3 * 0.0013)))


def test_the_cache_alone_is_read_without_measuring(tiny_model, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(verify_cost, "measure", lambda *a, **k: pytest.fail("cached_verify_cost measured"))
    assert cost_cache.cached_verify_cost(tiny_model, 5, threads=1) is None
    path = cost_cache.cache_file(tiny_model, 1)
    path.parent.mkdir(parents=True)
    path.write_text('{"version": %d, "seconds": [0.005, 0.01, 0.013, 0.016, 0.02]}' % cost_cache.CACHE_VERSION)
    assert cost_cache.cached_verify_cost(tiny_model, 5, threads=1).seconds == (0.005, 0.01, 0.013, 0.016, 0.02)
    assert cost_cache.cached_verify_cost(tiny_model, 6, threads=1) is None  # too short for k = 5
    path.write_text("not json")
    assert cost_cache.cached_verify_cost(tiny_model, 5, threads=1) is None


def test_the_engine_reports_the_theory_on_the_cached_curve(tiny_model, tmp_path, monkeypatch):
    from engine.core.config import SpecConfig
    from engine.core.events import GenerationFinished
    from engine.runtime import local_engine
    from engine.core.stats import speedup_from_acceptance as on_curve
    from engine.host import engine_threads
    monkeypatch.setenv("SPECSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    spec = SpecConfig(method="prompt-lookup", k=3)
    prompt = [5, 6, 7, 8, 5, 6, 7, 8, 5, 6, 7, 8, 5, 6]

    def finished(engine):
        return [e for e in engine.generate_ids(prompt, spec=spec, max_new_tokens=24)
                if isinstance(e, GenerationFinished)][0].stats

    before = finished(local_engine(tiny_model))
    assert before.verify_cost_seconds == ()  # nothing measured yet: the free-verification fallback
    cost = verify_cost.verify_cost(tiny_model, 4, threads=engine_threads())  # what `specscope bench` does
    engine = local_engine(tiny_model)
    stats = finished(engine)
    assert stats.verify_cost_seconds == cost.seconds and engine.verify_curve(3) == cost
    assert stats.drafted_tokens > 0
    draft = stats.draft_seconds / stats.drafted_tokens
    assert stats.theoretical_speedup == pytest.approx(on_curve(
        stats.acceptance_rate, stats.mean_draft_length, stats.cost_ratio, stats.drafting_share, cost, draft))
    assert finished(engine).verify_cost_seconds == cost.seconds  # kept: read once per engine
    assert local_engine(tiny_model).verify_curve(0) is None


def test_the_bench_sweep_uses_the_measured_curve():
    from engine.measure.report import sweep_summaries
    curve = VerifyCost((0.005, 0.010, 0.013, 0.016, 0.020))
    row = {"speedup": 1.0, "acceptance_rate": 0.5, "cost_ratio": 0.0}
    summary = {"none": {"all": {**row, "speedup": 1.0}}, "prompt-lookup:k=1": {"all": row},
               "prompt-lookup:k=4": {"all": row}}
    (sweep,) = sweep_summaries(summary, curve)
    assert sweep.method == "prompt-lookup" and sweep.theory == pytest.approx((0.75, 0.484375))
    (free,) = sweep_summaries(summary)
    assert free.theory == pytest.approx((1.5, 1.9375))


def test_another_dtype_is_another_curve(tiny_model, tmp_path, monkeypatch):
    """bf16 and float32 passes cost differently: a curve measured in one is never read for the other."""
    import dataclasses
    monkeypatch.setenv("SPECSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    as_bf16 = dataclasses.replace(tiny_model, dtype_label="bfloat16")
    assert cost_cache.cache_file(tiny_model, 1) != cost_cache.cache_file(as_bf16, 1)
    assert tiny_model.dtype_label in cost_cache.cache_file(tiny_model, 1).name


def test_another_device_is_another_curve(tiny_model, tmp_path, monkeypatch):
    """What runs the layers keys the curve: llama.cpp's logits are on the CPU whatever runs its layers, so a
    CPU build's curve must not serve a CUDA build's; and one GPU's curve is not another's."""
    import dataclasses

    import torch
    monkeypatch.setenv("SPECSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    cpu_build = dataclasses.replace(tiny_model, backend="llama.cpp", device_label="llama.cpp · CPU")
    cuda_build = dataclasses.replace(cpu_build, device_label="llama.cpp · CUDA (NVIDIA H200)")
    assert cost_cache.cache_file(cpu_build, 1) != cost_cache.cache_file(cuda_build, 1)
    assert "CUDA_NVIDIA_H200" in cost_cache.cache_file(cuda_build, 1).name
    on_gpu = dataclasses.replace(tiny_model, device=torch.device("cuda", 1), device_label="transformers · cuda:1")
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA RTX 4090")
    assert cost_cache.device_key(on_gpu) == "transformers_cuda_1_NVIDIA_RTX_4090"


def test_each_timed_pass_waits_for_its_device(monkeypatch):
    """On a GPU a pass is queued, not done, when forward returns: the timer stops after the device's sync."""
    import torch

    from engine.backends import Runner as RunnerContract
    calls = []

    class Runner(RunnerContract):
        device = torch.device("cuda", 0)
        ids: list[int] = []

        def reset(self):
            self.ids = []

        def forward(self, new_ids, n_logits):
            calls.append(("forward", len(new_ids)))
            self.ids += new_ids

        def rollback(self, length):
            del self.ids[length:]

    monkeypatch.setattr(verify_cost, "synchronize", lambda device: calls.append(("sync", str(device))))
    verify_cost.measure(Runner(), 100, 2, repeats=1)
    timed = calls[2:]  # after the context and the warm-up
    assert timed == [("forward", 1), ("sync", "cuda:0"), ("forward", 2), ("sync", "cuda:0")]
