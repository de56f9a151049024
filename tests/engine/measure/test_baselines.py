"""Baselines (engine.measure.baselines): bench's rows each say which plain decoding they are judged against, and
where plain decoding ran on several backends every row gets its tok/s against the fastest one, apart."""

import io
from types import SimpleNamespace

import pytest
from rich.console import Console

from engine.measure.baselines import add_vs_fastest_plain, baseline_label, target_baseline
from engine.measure.report import print_baselines


def row(tok_per_s, baseline):
    return {"tok_per_s": tok_per_s, "baseline": baseline}


def test_labels_name_backend_device_and_dtype_once():
    assert baseline_label("llama.cpp", "llama.cpp · CPU", "Q4_1") == "plain on llama.cpp · CPU · Q4_1"
    assert baseline_label("transformers", "cpu", "bfloat16") == "plain on transformers · cpu · bfloat16"
    target = SimpleNamespace(backend="transformers", device_label="", device="cuda:0", dtype_label="bfloat16")
    assert target_baseline(SimpleNamespace(target=target)) == "plain on transformers · cuda:0 · bfloat16"


def test_vs_fastest_plain_only_where_plain_ran_on_several_backends():
    llama, hf = "plain on llama.cpp · CPU · Q4_1", "plain on transformers · cpu · bfloat16"
    one = {"none": {"all": row(45.0, llama)}, "prompt-lookup:k=5": {"all": row(60.0, llama)}}
    add_vs_fastest_plain(one)
    assert "vs_fastest_plain" not in one["prompt-lookup:k=5"]["all"]
    two = {**one, "none:backend=transformers": {"all": row(5.0, hf)},
           "early-exit:k=3,layers=8,backend=transformers": {"all": row(5.6, hf)}}
    add_vs_fastest_plain(two)
    assert two["early-exit:k=3,layers=8,backend=transformers"]["all"]["vs_fastest_plain"] == pytest.approx(5.6 / 45)
    assert two["none"]["all"]["vs_fastest_plain"] == pytest.approx(1.0)
    out = io.StringIO()
    print_baselines(two, Console(file=out, width=200))
    text = out.getvalue()
    assert f"against {hf}: none:backend=transformers, early-exit:k=3,layers=8,backend=transformers" in text
    assert f"against {llama}: none, prompt-lookup:k=5" in text and "vs fastest plain" in text
    out = io.StringIO()
    print_baselines(one, Console(file=out, width=200))
    assert out.getvalue().strip() == f"speed-up and identical: against {llama}, measured in this run"
