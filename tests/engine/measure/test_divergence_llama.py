"""engine.measure.divergence on the llama.cpp backend: a K-quant GGUF (Q4_K_M, made here from a tiny model by
llama.cpp itself) whose batched and one-token logits differ; the diagnosis runs end to end through the
Runner contract, every divergence of greedy prompt lookup is a near-tie, a planted error a mismatch."""

from __future__ import annotations

import pytest

pytest.importorskip("llama_cpp")

from engine.core.config import SpecConfig  # noqa: E402
from engine.measure.divergence import MISMATCH, NEAR_TIE, diagnose  # noqa: E402
from engine.models.load import load_model  # noqa: E402
from engine.runtime import local_engine  # noqa: E402
from engine_testkit import PROMPTS, run, save_tiny_model  # noqa: E402
from tests.fixtures.tiny_gguf import quantize, write_tiny_gguf  # noqa: E402
from test_divergence import WrongAfterVerification  # noqa: E402

PL = SpecConfig("prompt-lookup", k=32)  # batches of up to 33: where this K-quant rounds differently
N_NEW = 32


@pytest.fixture(scope="module")
def q4_k_m(tmp_path_factory, tiny_tokenizer):
    """A tiny Llama 256 wide (K-quants work on rows of 256) as a Q4_K_M GGUF, loaded on llama.cpp."""
    from transformers import LlamaForCausalLM
    folder = tmp_path_factory.mktemp("tiny-kquant")
    hf_dir = save_tiny_model(folder / "hf", tiny_tokenizer, seed=3, hidden_size=256, intermediate_size=512,
                             num_hidden_layers=2)
    f32 = write_tiny_gguf(folder / "f32.gguf", LlamaForCausalLM.from_pretrained(hf_dir), tiny_tokenizer)
    path = quantize(f32, folder / "q4_k_m.gguf", "Q4_K_M")
    return load_model(str(path), device="cpu", backend="llama.cpp")


def test_batched_and_one_token_logits_of_a_k_quant_differ(q4_k_m):
    """33 positions in one batch (a verification of k = 32) against the same positions one by one."""
    import torch
    ids = list(range(10, 60))
    batched_runner, one_runner = q4_k_m.new_runner(), q4_k_m.new_runner()
    batched_runner.forward(ids[:-33], 1)
    batched = batched_runner.forward(ids[-33:], 33).clone()
    one_runner.forward(ids[:-33], 1)
    one_by_one = torch.stack([one_runner.forward([token], 1)[0].clone() for token in ids[-33:]])
    discrepancy = float((batched - one_by_one).abs().max())
    print(f"\nQ4_K_M tiny model: a batch of 33 and one-by-one logits differ by up to {discrepancy:.3g}")
    assert discrepancy > 1e-4
    batched_runner.release()
    one_runner.release()


def test_every_divergence_on_a_k_quant_is_a_near_tie(q4_k_m):
    engine = local_engine(q4_k_m)
    texts = [text[:cut] for text in PROMPTS.values() for cut in (150, 60)]
    found = []
    for text in texts:
        prompt = engine.prompt_ids(text)
        _, _, plain = run(engine, prompt, max_new_tokens=N_NEW)
        engine.release()
        _, rounds, other = run(engine, prompt, spec=PL, max_new_tokens=N_NEW)
        engine.release()
        found.append(diagnose(q4_k_m, prompt, plain.output_ids, other.output_ids, rounds))
    differing = [d for d in found if d is not None]
    print(f"\nQ4_K_M, prompt lookup k=32: {len(found) - len(differing)} identical, {len(differing)} near-ties "
          f"of {len(found)}")
    for d in differing:
        assert d.kind == NEAR_TIE and d.backend == "llama.cpp" and d.dtype == q4_k_m.dtype_label, d.explanation()
        assert d.top2_margin <= 2 * d.pass_discrepancy


def test_a_planted_error_on_llama_cpp_is_a_mismatch(q4_k_m):
    prompt = local_engine(q4_k_m).prompt_ids(PROMPTS["translate"][:120])
    _, _, plain = run(local_engine(q4_k_m), prompt, max_new_tokens=16)
    _, rounds, other = run(WrongAfterVerification(q4_k_m, at=2), prompt, spec=PL, max_new_tokens=16)
    d = diagnose(q4_k_m, prompt, plain.output_ids, other.output_ids, rounds)
    assert d is not None and d.kind == MISMATCH and d.backend == "llama.cpp"
    assert d.one_token.argmax == d.plain_token and "report" in d.explanation()
