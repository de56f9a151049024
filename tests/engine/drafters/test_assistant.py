"""Method `assistant` on a tiny Gemma 4 target and a tiny Gemma 4 assistant built here: greedy output equals
plain decoding for k = 1…4 and transformers' own assisted generation; sampling stays lossless; an assistant
for the wrong family, or a draft that is no assistant, is refused with the reason."""

from __future__ import annotations

import pytest
import torch

from engine.core.config import SamplingConfig, SpecConfig
from engine.core.errors import ConfigError
from engine.models.load import load_model
from engine.runtime import local_engine
from engine_testkit import check_round_invariants, device_under_test, run
from selfdraft_testkit import save_gemma4_pair

# longer than the tiny target's sliding window (16), so rollbacks cross it
PROMPT = "The quick brown fox jumps over the lazy dog. The quick"
N_NEW = 20


@pytest.fixture(scope="module")
def gemma_pair(tmp_path_factory, tiny_tokenizer):
    return save_gemma4_pair(tmp_path_factory.mktemp("gemma4"), tiny_tokenizer)


@pytest.fixture(scope="module")
def gemma_target(gemma_pair):
    return load_model(str(gemma_pair[0]), device=device_under_test(), dtype="float32")


def prompt_ids(model):
    return model.tokenizer.encode(PROMPT, add_special_tokens=False)


def test_greedy_assistant_equals_plain_decoding_for_k_1_to_4(gemma_target, gemma_pair):
    engine = local_engine(gemma_target)
    prompt = prompt_ids(gemma_target)
    _, _, plain = run(engine, prompt, max_new_tokens=N_NEW)
    for k in range(1, 5):
        spec = SpecConfig(method="assistant", k=k, draft=str(gemma_pair[1]))
        _, rounds, finished = run(engine, prompt, spec=spec, max_new_tokens=N_NEW)
        assert finished.output_ids == plain.output_ids, f"k={k}"
        assert {r.drafter for r in rounds if r.draft_ids} == {"assistant"}
        assert any(len(r.draft_ids) == k for r in rounds)
        check_round_invariants(rounds, finished)


def test_greedy_assistant_equals_transformers_assisted_generation(gemma_target, gemma_pair):
    from transformers import AutoModelForCausalLM
    prompt = prompt_ids(gemma_target)
    spec = SpecConfig(method="assistant", k=4, draft=str(gemma_pair[1]))
    _, _, ours = run(local_engine(gemma_target), prompt, spec=spec, max_new_tokens=N_NEW)
    assistant = AutoModelForCausalLM.from_pretrained(str(gemma_pair[1])).eval()
    assistant.generation_config.num_assistant_tokens = 4
    with torch.no_grad():
        theirs = gemma_target.model.generate(torch.tensor([prompt]), assistant_model=assistant,
                                             max_new_tokens=N_NEW, do_sample=False)
    assert list(ours.output_ids) == theirs[0, len(prompt):].tolist()


def test_assistant_sampling_follows_the_target(gemma_target, gemma_pair):
    """The second sampled token (drafted by the assistant) over many seeds, against plain sampling: how often
    the target's own most likely second token comes out is the same (a two-sample z test)."""
    prompt = prompt_ids(gemma_target)
    outputs = {}
    for spec in (SpecConfig(), SpecConfig(method="assistant", k=2, draft=str(gemma_pair[1]))):
        engine = local_engine(gemma_target)
        runs = [run(engine, prompt, spec=spec, sampling=SamplingConfig(temperature=1.0, seed=s),
                    max_new_tokens=2)[2].output_ids for s in range(120)]
        outputs[spec.method] = [ids[1] if len(ids) > 1 else None for ids in runs]  # None: EOS came first
    common = max(set(outputs["none"]) - {None}, key=outputs["none"].count)
    a = sum(t == common for t in outputs["none"]) / 120
    b = sum(t == common for t in outputs["assistant"]) / 120
    pooled = (a + b) / 2
    z = (a - b) / max(1e-9, (pooled * (1 - pooled) * 2 / 120) ** 0.5)
    assert abs(z) < 4.9


def test_a_draft_that_is_no_assistant_is_refused(gemma_target, tiny_dir):
    spec = SpecConfig(method="assistant", k=2, draft=str(tiny_dir))
    with pytest.raises(ConfigError, match="needs a Gemma 4 assistant"):
        local_engine(gemma_target).generate_ids(prompt_ids(gemma_target), spec=spec)


def test_an_assistant_for_another_family_is_refused(tiny_model, gemma_pair):
    spec = SpecConfig(method="assistant", k=2, draft=str(gemma_pair[1]))
    with pytest.raises(ConfigError, match="drafts only for a Gemma 4 target"):
        local_engine(tiny_model).generate_ids([1, 2, 3], spec=spec)
