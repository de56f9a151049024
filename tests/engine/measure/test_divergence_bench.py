"""The bench counts, per config and category, identical / near_ties / mismatches (engine.measure.divergence) beside
its other figures; --strict reruns in float32 on the CPU with transformers, where all are identical; and
`--dtype auto` picks bf16 on a CPU that computes it natively (engine.host reads the flags)."""

from __future__ import annotations

import json

import pytest
import torch

from engine.measure.bench import run_benchmark, summarise
from engine.core.config import SamplingConfig, SpecConfig
from engine.cli.main import main
from engine.host import cpu_flags, native_bf16
from engine.models.load import load_model
from engine.measure.prompts import Prompt
from engine.runtime import local_engine
from engine_testkit import PROMPTS

PL = SpecConfig("prompt-lookup", k=5)
PROMPT_SET = [Prompt(f"p{i}", category, text[:120]) for i, (category, text) in enumerate(PROMPTS.items())]


def counts(summary: dict, label: str, key: str = "all") -> tuple:
    row = summary[label][key]
    return row["identical"], row["near_ties"], row["mismatches"]


def test_float32_bench_counts_every_output_identical(tiny_engine):
    summary = summarise(run_benchmark(tiny_engine, PROMPT_SET, [PL], 24, SamplingConfig()), False)
    n = len(PROMPT_SET)
    assert counts(summary, "none") == (n, 0, 0) and counts(summary, PL.label()) == (n, 0, 0)
    assert counts(summary, PL.label(), "code") == (1, 0, 0)
    assert summary[PL.label()]["all"]["identical_to_none"] == n  # the older key stays
    assert summary[PL.label()]["all"]["divergences"] == []


def test_bf16_bench_counts_add_up_and_every_divergence_is_listed(tiny_dir):
    engine = local_engine(load_model(str(tiny_dir), device="cpu", dtype="bf16"))
    prompts = PROMPT_SET * 2
    prompts = [Prompt(f"{p.id}-{i}", p.category, p.text[: 60 + 30 * (i // len(PROMPT_SET))])
               for i, p in enumerate(prompts)]
    summary = summarise(run_benchmark(engine, prompts, [PL], 32, SamplingConfig()), False)
    identical, near_ties, mismatches = counts(summary, PL.label())
    assert identical + near_ties + mismatches == len(prompts) and mismatches == 0
    listed = summary[PL.label()]["all"]["divergences"]
    assert len(listed) == near_ties and all(d["kind"] == "near-tie" for d in listed)
    for category in {p.category for p in prompts}:
        assert sum(counts(summary, PL.label(), category)) == sum(p.category == category for p in prompts)


def test_sampled_runs_are_not_counted_token_for_token(tiny_engine):
    summary = summarise(run_benchmark(tiny_engine, PROMPT_SET[:2], [PL], 8, SamplingConfig(temperature=0.7)),
                        False)
    assert counts(summary, PL.label()) == (None, None, None)


def test_bench_strict_reruns_in_float32_on_the_cpu_with_transformers(tiny_dir, tmp_path, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps({"prompt": text[:80]}) for text in list(PROMPTS.values())[:3]))
    out_json = tmp_path / "out.json"
    code = main(["bench", "--model", str(tiny_dir), "--device", "cpu", "--dtype", "bf16", "--backend",
                 "transformers", "--prompts", str(prompts), "--max-new-tokens", "16", "--config",
                 "prompt-lookup:k=5", "--strict", "--json", str(out_json)])
    out = capsys.readouterr().out
    assert code == 0 and "strict check: float32 on the CPU, transformers backend" in out
    document = json.loads(out_json.read_text())
    assert document["dtype"] == "bfloat16"
    strict = document["strict"]
    assert (strict["dtype"], strict["device"], strict["backend"]) == ("float32", "cpu", "transformers")
    row = strict["configs"]["prompt-lookup:k=5"]["all"]
    assert (row["identical"], row["near_ties"], row["mismatches"]) == (3, 0, 0)
    assert {"identical", "near_ties", "mismatches"} <= set(document["configs"]["prompt-lookup:k=5"]["all"])


def test_bench_strict_refuses_sampling(tiny_dir, tmp_path, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "hi"}))
    code = main(["bench", "--model", str(tiny_dir), "--prompts", str(prompts), "--strict", "--temperature", "0.5"])
    assert code == 2 and "--strict checks that greedy outputs are identical" in capsys.readouterr().err


# ------------------------------------------------------------------ dtype auto on the CPU

def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx512f avx512_bf16\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    assert cpu_flags(info) == {"fpu", "sse2", "avx512f", "avx512_bf16"}
    assert native_bf16(cpu_flags(info)) and native_bf16(frozenset({"amx_bf16"}))
    assert not native_bf16(frozenset({"avx512f", "avx2"}))
    assert cpu_flags(tmp_path / "missing") == frozenset()
    (tmp_path / "arm").write_text("Features\t: fp asimd bf16\n")
    assert cpu_flags(tmp_path / "arm") == {"fp", "asimd", "bf16"}


def test_dtype_auto_on_the_cpu_follows_the_flags(tiny_dir, monkeypatch):
    monkeypatch.setattr("engine.host.native_bf16", lambda: True)
    assert load_model(str(tiny_dir), device="cpu").dtype is torch.bfloat16
    monkeypatch.setattr("engine.host.native_bf16", lambda: False)
    assert load_model(str(tiny_dir), device="cpu", dtype="auto").dtype is torch.float32


@pytest.mark.skipif(not native_bf16(), reason="this CPU does not compute bf16 natively")
def test_this_cpu_computes_bf16_natively_so_auto_is_bf16():
    from engine.backends.device import resolve_dtype
    assert resolve_dtype("auto", "cpu") is torch.bfloat16
