"""On a CUDA device: greedy speculation equals plain decoding in float32 and bf16, where it differs only at a
near-tie told apart by engine.measure.divergence (a GPU's batched and one-token kernels may round apart).
Skipped, saying why, without CUDA (the `cuda` marker: tests/engine/conftest.py)."""

from __future__ import annotations

import pytest

from engine.core.config import SpecConfig
from engine.measure.divergence import diagnose
from engine.models.load import load_model
from engine.runtime import local_engine
from engine_testkit import random_prompt, run

pytestmark = pytest.mark.cuda


@pytest.mark.parametrize("dtype", ["float32", "bf16"])
def test_greedy_speculation_equals_plain_decoding_on_cuda(tiny_dir, tiny_draft_dir, dtype):
    target = load_model(str(tiny_dir), device="cuda", dtype=dtype)
    assert target.device.type == "cuda"
    specs = [SpecConfig("draft-model", k=4, draft=str(tiny_draft_dir)), SpecConfig("prompt-lookup", k=4),
             SpecConfig("early-exit", k=3, params={"layers": 2})]
    for seed in range(3):
        prompt = random_prompt(seed) * 2
        _, _, plain = run(local_engine(target), prompt, max_new_tokens=48)
        for spec in specs:
            _, rounds, spec_run = run(local_engine(target), prompt, max_new_tokens=48, spec=spec)
            divergence = diagnose(target, prompt, plain.output_ids, spec_run.output_ids, rounds)
            assert divergence is None or divergence.is_near_tie, divergence.explanation()
