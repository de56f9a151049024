"""Drafters that branch on the real backends: greedy output with token trees equals plain decoding token for
token (transformers float32: early exit, a draft model, prompt lookup; llama.cpp: prompt lookup, suffix and a
draft model, the tiny GGUF drafting for itself), and a sampled tree of a model drafter keeps the target's exact
joint of the first two tokens (chi-square), on each backend. One model load per backend."""

from __future__ import annotations

import pytest

from engine.core.config import SamplingConfig, SpecConfig
from engine.models.load import load_model
from engine.runtime import local_engine
from engine_testkit import check_round_invariants, chi_square, exact_joint, run, save_tiny_model

N_NEW = 16
PROMPTS = ("hello world, how are you?", "def add(a, b):\n    return", "Café crème 😀 日本語のテキスト")
N_DRAWS = 240
SAMPLING = SamplingConfig(temperature=1.0, top_k=2)
CHI2_CRITICAL_DF3 = 30.66  # 2 × 2 cells − 1 degrees of freedom, p = 1e-6 (scipy.stats.chi2.isf(1e-6, 3))


def check_trees_equal_plain(engine, spec: SpecConfig, some_kept: bool = True) -> None:
    """Every prompt's greedy output with `spec` (a tree) equals plain decoding's; some rounds drafted a tree and
    (`some_kept`) kept part of it."""
    assert spec.tree, spec.warnings
    tree_rounds = kept = 0
    for prompt in PROMPTS:
        _, _, plain = run(engine, prompt, max_new_tokens=N_NEW)
        _, rounds, finished = run(engine, prompt, spec=spec, max_new_tokens=N_NEW)
        assert list(finished.output_ids) == list(plain.output_ids), (spec.label(), prompt)
        check_round_invariants(rounds, finished)
        tree_rounds += sum(r.is_tree for r in rounds)
        kept += sum(r.n_accepted for r in rounds if r.is_tree)
    assert tree_rounds > 0 and (kept > 0 or not some_kept)


def check_sampled_tree_is_lossless(model, spec: SpecConfig) -> None:
    """The first two new tokens of N_DRAWS sampled replies (the second from a round that verified a tree) against
    the target's exact joint."""
    engine = local_engine(model)
    prompt = model.tokenizer.encode("hello world, how", add_special_tokens=False)
    probs = exact_joint(model, prompt, SAMPLING)
    counts: dict = {}
    trees = 0
    for seed in range(N_DRAWS):
        sampling = SamplingConfig(temperature=SAMPLING.temperature, top_k=SAMPLING.top_k, seed=seed)
        _, rounds, finished = run(engine, prompt, spec=spec, sampling=sampling, max_new_tokens=3)
        cell = tuple(finished.output_ids[:2])
        counts[cell] = counts.get(cell, 0) + 1
        trees += any(r.is_tree for r in rounds)
    assert trees == N_DRAWS
    assert chi_square(counts, probs, N_DRAWS) < CHI2_CRITICAL_DF3


# ------------------------------------------------------------------ transformers


@pytest.fixture(scope="module")
def tiny_transformers(tiny_model):
    if tiny_model.new_runner().tree_refusal() is not None:
        pytest.fail(f"the transformers runner verifies no tree: {tiny_model.new_runner().tree_refusal()}")
    return tiny_model


@pytest.mark.parametrize("method,params", [("early-exit", {"layers": 1}), ("prompt-lookup", {})])
def test_transformers_trees_equal_plain(tiny_transformers, method, params):
    check_trees_equal_plain(local_engine(tiny_transformers), SpecConfig(method, k=4, params=params, tree=10))


def test_transformers_draft_model_trees_equal_plain(tiny_transformers, tiny_draft_dir):
    check_trees_equal_plain(local_engine(tiny_transformers),
                            SpecConfig("draft-model", k=4, draft=str(tiny_draft_dir), tree=12))


def test_transformers_sampled_early_exit_tree_is_lossless(tiny_transformers):
    check_sampled_tree_is_lossless(tiny_transformers, SpecConfig("early-exit", k=2, params={"layers": 1}, tree=6))


# ------------------------------------------------------------------ llama.cpp


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory, tiny_tokenizer):
    """A Q8_0 GGUF of the tiny target, loaded on llama.cpp, and its path (it drafts for itself)."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    from transformers import LlamaForCausalLM

    from tests.fixtures.tiny_gguf import quantize, write_tiny_gguf
    folder = tmp_path_factory.mktemp("tree-gguf")
    hf_dir = save_tiny_model(folder / "hf", tiny_tokenizer, seed=0)
    f32 = write_tiny_gguf(folder / "f32.gguf", LlamaForCausalLM.from_pretrained(hf_dir), tiny_tokenizer)
    path = quantize(f32, folder / "tiny.gguf", "Q8_0")
    model = load_model(str(path), device="cpu", backend="llama.cpp")
    refusal = model.new_runner().tree_refusal()
    if refusal is not None:
        pytest.fail(f"the llama.cpp runner verifies no tree: {refusal}")
    return model, path


@pytest.mark.parametrize("method", ["prompt-lookup", "suffix", "draft-model"])
def test_llama_cpp_trees_equal_plain(tiny_gguf, method):
    model, path = tiny_gguf
    draft = str(path) if method == "draft-model" else None
    check_trees_equal_plain(local_engine(model), SpecConfig(method, k=4, draft=draft, tree=10))


def test_llama_cpp_sampled_draft_model_tree_is_lossless(tiny_gguf):
    model, path = tiny_gguf
    check_sampled_tree_is_lossless(model, SpecConfig("draft-model", k=2, draft=str(path), tree=6))


# ------------------------------------------------------------------ eagle (transformers): an untrained head


@pytest.fixture(scope="module")
def eagle_head_dir(tiny_transformers, tmp_path_factory):
    """A head that was never trained (its drafts are poor, but its tree's masks and positions are real), saved."""
    import torch

    from engine.drafters.eagle_head import EagleHead, HeadCard, save_head, target_fingerprint
    torch.manual_seed(0)
    vocab = torch.arange(min(300, tiny_transformers.vocab_size))
    head = EagleHead(tiny_transformers.model, vocab).float()
    folder = tmp_path_factory.mktemp("eagle-head")
    card = HeadCard(tiny_transformers.label, target_fingerprint(tiny_transformers.model),
                    tiny_transformers.model.config.hidden_size, len(vocab), {"steps": 0})
    save_head(folder, head, card)
    return folder


def test_eagle_tree_top_path_is_its_chain(tiny_transformers, eagle_head_dir):
    """The head's tree pass (a 4D mask, positions by depth) gives the chain's very ids along its top path: a node
    that saw a sibling or a wrong position would read other features."""
    import torch

    from engine.drafters.eagle import make_eagle_drafter
    runner = tiny_transformers.new_runner()
    drafter = make_eagle_drafter(SpecConfig("eagle", k=4, draft=str(eagle_head_dir)), tiny_transformers, runner)
    drafter.begin(SamplingConfig(), torch.Generator())
    context = tiny_transformers.tokenizer.encode("hello world, how are", add_special_tokens=False)
    runner.forward(context[:-1], 1)
    chain = drafter.propose(context, 4).ids
    tree = drafter.propose_tree(context, 4, 12)
    assert len(tree.ids) == 12 and tree.p_draft.shape[0] == 12
    children = {}
    for i, parent in enumerate(tree.parents):
        children.setdefault(parent, []).append(i)
    path, node = [], -1
    while node in children:
        node = children[node][0]
        path.append(tree.ids[node])
    assert path == chain
    assert drafter.propose(context, 4).ids == chain  # the head's cache holds the context only again


def test_eagle_trees_equal_plain(tiny_transformers, eagle_head_dir):
    check_trees_equal_plain(local_engine(tiny_transformers),
                            SpecConfig("eagle", k=3, draft=str(eagle_head_dir), tree=8), some_kept=False)
