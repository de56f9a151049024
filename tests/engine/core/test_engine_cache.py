"""KV-cache rollback (the transformers Runner): after cropping and re-feeding, the logits equal a fresh
computation."""

from __future__ import annotations

import pytest
import torch

from engine.backends import common_prefix_length
from engine.backends.transformers import TransformersRunner, cache_length, crop_cache
from engine.core.config import SpecConfig
from engine.runtime import local_engine
from engine_testkit import run

ATOL = 1e-4


@pytest.fixture(scope="module")
def ids(tiny_tokenizer) -> list[int]:
    out = tiny_tokenizer.encode("Speculative decoding drafts tokens and verifies them quickly. Café 😀 日本語 and more",
                                add_special_tokens=False)
    assert len(out) >= 24
    return out[:24]


@pytest.fixture(scope="module")
def fresh_logits(tiny_model, ids) -> torch.Tensor:
    with torch.inference_mode():
        return TransformersRunner(tiny_model.model).forward(ids, len(ids))


@torch.inference_mode()
def test_rollback_then_refeed_equals_fresh_computation(tiny_model, ids, fresh_logits):
    runner = TransformersRunner(tiny_model.model)
    runner.forward(ids[:10], 1)
    runner.forward(ids[10:20], 10)
    runner.rollback(12)
    assert runner.ids == ids[:12] and cache_length(runner.cache) == 12
    logits = runner.forward(ids[12:24], 12)
    assert torch.allclose(logits, fresh_logits[12:24], atol=ATOL)


@torch.inference_mode()
def test_rollback_discards_rejected_tokens(tiny_model, ids, fresh_logits):
    """Feed wrong tokens (a rejected draft), roll them back, feed the right ones."""
    runner = TransformersRunner(tiny_model.model)
    runner.forward(ids[:8], 1)
    wrong = [(t + 7) % tiny_model.vocab_size for t in ids[8:13]]
    polluted = runner.forward(wrong, 5)
    assert not torch.allclose(polluted[-1], fresh_logits[12], atol=ATOL)  # the cache really changed
    runner.rollback(8)
    assert cache_length(runner.cache) == 8
    logits = runner.forward(ids[8:16], 8)
    assert torch.allclose(logits, fresh_logits[8:16], atol=ATOL)


@torch.inference_mode()
def test_sync_keeps_the_common_prefix_and_leaves_the_last_id_out(tiny_model, ids, fresh_logits):
    runner = TransformersRunner(tiny_model.model)
    runner.forward(ids[:20], 1)
    other = ids[:15] + [5, 6, 7]
    assert runner.sync(other) == [5, 6, 7]
    assert runner.ids == ids[:15] and cache_length(runner.cache) == 15
    # the same context again: everything but the last id is kept, that one is fed for its logits
    runner.forward([5, 6, 7], 1)
    assert runner.sync(other) == [7]
    assert cache_length(runner.cache) == 17
    # back to the original text: logits match a fresh computation
    feed = runner.sync(ids[:20])
    assert feed == ids[15:20]
    assert torch.allclose(runner.forward(feed, len(feed)), fresh_logits[15:20], atol=ATOL)
    # a context sharing nothing starts over
    assert runner.sync([9, 9, 9]) == [9, 9, 9] and cache_length(runner.cache) == 0


def test_crop_cache_refuses_to_grow(tiny_model, ids):
    runner = TransformersRunner(tiny_model.model)
    with torch.inference_mode():
        runner.forward(ids[:6], 1)
    with pytest.raises(ValueError, match="cannot grow"):
        crop_cache(runner.cache, 7)
    crop_cache(runner.cache, 6)  # no-op
    crop_cache(runner.cache, 2)
    assert cache_length(runner.cache) == 2
    assert cache_length(None) == 0


@pytest.mark.parametrize("a, b, n", [
    ([], [], 0), ([1, 2, 3], [1, 2, 3], 3), ([1, 2, 3], [1, 2], 2), ([1, 2, 3], [1, 9, 3], 1),
    ([4], [5], 0), (list(range(100)), list(range(57)) + [0] + list(range(58, 100)), 57),
])
def test_common_prefix_length(a, b, n):
    assert common_prefix_length(a, b) == n == common_prefix_length(b, a)


@pytest.mark.parametrize("spec", [SpecConfig("draft-model", k=4, draft="__noisy__"), SpecConfig("early-exit", k=3)],
                         ids=["draft-model", "early-exit"])
def test_engine_caches_hold_exactly_their_ids_after_generation(tiny_model, tiny_draft_dir, spec):
    if spec.draft == "__noisy__":
        spec = SpecConfig("draft-model", k=4, draft=str(tiny_draft_dir))
    engine = local_engine(tiny_model)
    _, rounds, finished = run(engine, "hello world", spec=spec, max_new_tokens=24)
    assert any(r.n_accepted < len(r.draft_ids) for r in rounds)  # something was rolled back
    prompt = engine.prompt_ids("hello world")
    full = prompt + list(finished.output_ids)
    runner = engine.runner
    assert cache_length(runner.cache) == len(runner.ids)
    assert runner.ids == full[:len(runner.ids)] and len(runner.ids) == len(full) - 1  # last id not fed yet
    drafter_runner = engine._drafter.runner
    assert cache_length(drafter_runner.cache) == len(drafter_runner.ids)
    assert drafter_runner.ids == full[:len(drafter_runner.ids)]
