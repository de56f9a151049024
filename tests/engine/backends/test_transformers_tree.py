"""Token trees on the transformers backend (engine.backends.transformers_tree): a tree pass gives each node the
logits of feeding its root-to-node path as a chain, keep_path leaves the cache (and the kept hidden rows) as that
chain would, an Engine drafting trees decodes greedily exactly as plain decoding and samples the target's own
distribution; models and runners that can't verify trees say why. On a tiny float32 Llama built here (eager and
SDPA attention) and, for the greedy equality, on the built-in default model."""

from __future__ import annotations

import copy

import pytest
import torch

from engine.backends.transformers import TransformersRunner
from engine.backends.transformers_static import StaticRunner
from engine.backends.transformers_tree import model_tree_refusal
from engine.core.config import SamplingConfig, SpecConfig
from engine.core.drafting import Drafter, Proposal
from engine.core.errors import ConfigError
from engine.runtime import local_engine
from engine_testkit import (PROMPTS, check_round_invariants, chi_square, device_under_test, factory_for,
                            random_prompt, run, tiny_config)

CONTEXT = [5, 17, 33, 80, 9, 120]
FEED = [44, 12]
# node: 0 1 2 3 4 5 6 (two roots; 2 and 3 under 0, 4 under 2, 5 under 1, 6 under 4)
TREE_IDS = [7, 8, 9, 10, 11, 12, 13]
TREE_PARENTS = (-1, -1, 0, 0, 2, 1, 4)
ATOL = 2e-5


@pytest.fixture(scope="module", params=["sdpa", "eager"])
def llama(request, tiny_tokenizer):
    """A tiny random Llama (float32) with the given attention implementation."""
    from transformers import LlamaForCausalLM
    torch.manual_seed(0)
    model = LlamaForCausalLM(tiny_config(tiny_tokenizer)).eval()
    model.set_attn_implementation(request.param)
    return model


def path_ids(node: int, ids=TREE_IDS, parents=TREE_PARENTS) -> list[int]:
    """The ids from the root to `node`, inclusive."""
    path = []
    while node >= 0:
        path.append(ids[node])
        node = parents[node]
    return path[::-1]


def chain_logits(model, ids: list[int]) -> torch.Tensor:
    """The logits after `ids` fed as a chain into a fresh runner."""
    return TransformersRunner(model).forward(ids, 1)[0]


@torch.inference_mode()
def test_each_node_gets_the_logits_of_its_path_fed_as_a_chain(llama):
    runner = TransformersRunner(llama)
    assert runner.tree_refusal() is None
    runner.forward(CONTEXT, 1)
    rows = runner.forward_tree(FEED, TREE_IDS, TREE_PARENTS)
    assert rows.shape == (len(TREE_IDS) + 1, llama.config.vocab_size) and rows.dtype == torch.float32
    expected = [chain_logits(llama, CONTEXT + FEED)] + \
        [chain_logits(llama, CONTEXT + FEED + path_ids(i)) for i in range(len(TREE_IDS))]
    torch.testing.assert_close(rows, torch.stack(expected), atol=ATOL, rtol=0)
    # the nodes fed as one causal chain (each seeing its siblings and cousins) get other rows: the mask matters
    causal = TransformersRunner(llama).forward(CONTEXT + FEED + TREE_IDS, len(TREE_IDS) + 1)
    assert not torch.allclose(rows[2:], causal[2:], atol=1e-3)


@torch.inference_mode()
def test_a_tree_on_an_empty_cache_and_an_empty_tree(llama):
    """The first pass of a conversation may be a tree's; a tree may have no node (the row after feed only)."""
    runner = TransformersRunner(llama)
    rows = runner.forward_tree(CONTEXT, TREE_IDS[:3], TREE_PARENTS[:3])
    expected = [chain_logits(llama, CONTEXT + path_ids(i)) for i in range(3)]
    torch.testing.assert_close(rows[1:], torch.stack(expected), atol=ATOL, rtol=0)
    runner.keep_path([0, 2])
    rows = runner.forward_tree(FEED, [], ())
    assert rows.shape == (1, llama.config.vocab_size)
    torch.testing.assert_close(rows[0], chain_logits(llama, CONTEXT + [7, 9] + FEED), atol=ATOL, rtol=0)
    runner.keep_path([])
    with pytest.raises(ValueError, match="at least one id"):
        runner.forward_tree([], [1], (-1,))


@torch.inference_mode()
def test_keep_path_leaves_the_cache_as_the_chain_would(llama):
    runner = TransformersRunner(llama)
    runner.forward(CONTEXT, 1)
    runner.forward_tree(FEED, TREE_IDS, TREE_PARENTS)
    runner.keep_path([1, 5])  # not the tree's first nodes: their keys and values move
    assert runner.ids == CONTEXT + FEED + [8, 12] and runner.cache.get_seq_length() == len(runner.ids)
    torch.testing.assert_close(runner.forward([3, 4], 2)[-1], chain_logits(llama, runner.ids), atol=ATOL, rtol=0)
    # the first nodes kept (nothing moves), then an empty path, then a tree after that
    runner.forward_tree([6], TREE_IDS, TREE_PARENTS)
    runner.keep_path([0, 2, 4, 6])
    assert runner.ids[-5:] == [6, 7, 9, 11, 13]
    torch.testing.assert_close(runner.forward([3], 1)[0], chain_logits(llama, runner.ids), atol=ATOL, rtol=0)
    runner.forward_tree([6, 2], TREE_IDS, TREE_PARENTS)
    runner.keep_path([])
    rows = runner.forward_tree([1], [9], (-1,))
    torch.testing.assert_close(rows[1], chain_logits(llama, runner.ids + [1, 9]), atol=ATOL, rtol=0)
    with pytest.raises(ValueError, match="no root-to-node path"):
        runner.keep_path([1])  # node 1 of a one-node tree
    runner.keep_path([0])
    assert runner.ids[-2:] == [1, 9]


@torch.inference_mode()
def test_grow_tree_adds_nodes_that_see_their_ancestors_old_or_new(llama):
    runner = TransformersRunner(llama)
    runner.forward(CONTEXT, 1)
    first = runner.forward_tree(FEED, TREE_IDS[:3], TREE_PARENTS[:3])
    grown = runner.grow_tree(TREE_IDS[3:], TREE_PARENTS[3:])
    assert grown.shape == (len(TREE_IDS) - 3, llama.config.vocab_size)
    rows = torch.cat([first, grown])
    expected = [chain_logits(llama, CONTEXT + FEED)] + \
        [chain_logits(llama, CONTEXT + FEED + path_ids(i)) for i in range(len(TREE_IDS))]
    torch.testing.assert_close(rows, torch.stack(expected), atol=ATOL, rtol=0)
    runner.grow_tree([20, 21], (6, 7))  # a third level: under node 6, then under the new node 7
    runner.keep_path([0, 2, 4, 6, 7, 8])
    assert runner.ids == CONTEXT + FEED + [7, 9, 11, 13, 20, 21]
    torch.testing.assert_close(runner.forward([3], 1)[0], chain_logits(llama, runner.ids), atol=ATOL, rtol=0)
    with pytest.raises(RuntimeError, match="no tree is pending"):
        runner.grow_tree([1], (-1,))


@torch.inference_mode()
def test_the_kept_hidden_rows_are_the_chains(llama):
    runner, chain = TransformersRunner(llama), TransformersRunner(llama)
    runner.record_outputs()
    chain.record_outputs()
    runner.forward(CONTEXT, 1)
    runner.forward_tree(FEED, TREE_IDS[:4], TREE_PARENTS[:4])
    runner.grow_tree(TREE_IDS[4:], TREE_PARENTS[4:])
    runner.keep_path([0, 2, 4])
    chain.forward(CONTEXT + FEED + [7, 9, 11], 1)
    kept = runner.hidden_rows(0)
    assert kept.shape[0] == len(runner.ids) == len(CONTEXT) + len(FEED) + 3
    torch.testing.assert_close(kept, chain.hidden_rows(0), atol=ATOL, rtol=0)
    runner.forward([3], 1)  # rows keep following the cache after a tree
    assert runner.hidden_rows(0).shape[0] == len(runner.ids)


def test_trees_are_refused_where_they_cannot_be_verified(llama, tiny_tokenizer):
    flash = copy.deepcopy(llama.config)
    flash._attn_implementation = "flash_attention_2"
    runner = TransformersRunner(llama, flash)
    assert "FlashAttention-2" in runner.tree_refusal()
    with pytest.raises(ConfigError, match="FlashAttention-2"):
        runner.forward_tree([1], [2], (-1,))
    shared = TransformersRunner(llama)
    shared.record_outputs(shared_kv=True)
    assert "shared key/value states" in shared.tree_refusal()
    static = StaticRunner(llama, None, 64, lambda message: None)
    assert "static cache" in static.tree_refusal()
    static.record_outputs()  # the eager runner from now on: it verifies trees
    assert static.tree_refusal() is None


def test_a_hybrid_model_is_refused(tiny_tokenizer):
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
    hybrid = Qwen3_5ForCausalLM(Qwen3_5TextConfig(
        vocab_size=len(tiny_tokenizer), hidden_size=32, intermediate_size=64, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, num_hidden_layers=2, linear_num_value_heads=2, linear_num_key_heads=1,
        linear_key_head_dim=16, linear_value_head_dim=16, layer_types=["linear_attention", "full_attention"]))
    assert "linear-attention" in model_tree_refusal(hybrid, hybrid.config)


# ------------------------------------------------------------------ an Engine drafting trees

def tree_spec(k: int, tree: int) -> SpecConfig:
    """A speculative spec with a tree budget, whatever its method declares (the drafter is the test's own)."""
    spec = SpecConfig("prompt-lookup", k=k)
    object.__setattr__(spec, "tree", tree)
    return spec


class OracleTree(Drafter):
    """Drafts trees around the target's own greedy continuation (known in advance): each level puts a wrong child
    (with a child of its own) before the right one; by turns the right path runs the whole depth, stops after one
    level, or is missing from the root on (every child wrong)."""

    name = "oracle-tree"
    free_to_propose = False
    note = None

    def __init__(self, prompt_length: int, continuation: list[int], vocab: int) -> None:
        self.prompt_length, self.continuation, self.vocab = prompt_length, continuation, vocab
        self.turn = 0

    def propose(self, context_ids, k):
        return Proposal.empty()

    def propose_tree(self, context_ids, k, budget):
        done = len(context_ids) - self.prompt_length
        own = self.continuation[done:done + k]
        self.turn += 1
        right_depth = (len(own), 1, 0)[self.turn % 3]
        ids, parents, parent = [], [], -1
        for depth, right in enumerate(own):
            if len(ids) + 3 > budget:
                break
            wrong = (right + 1 + depth) % self.vocab
            ids += [wrong, (right + 2) % self.vocab, right if depth < right_depth else (right + 3) % self.vocab]
            parents += [parent, len(ids) - 3, parent]
            parent = len(ids) - 1
        return Proposal(ids, None, parents=tuple(parents))


def greedy_tree_run(model, prompt_ids: list[int], n_new: int):
    """Plain decoding's output, then the rounds and output of an Engine drafting OracleTrees (k = 4, 16 nodes)."""
    plain = run(local_engine(model), prompt_ids, max_new_tokens=n_new)[2].output_ids
    drafter = OracleTree(len(prompt_ids), list(plain), model.vocab_size)
    engine = local_engine(model, drafter_factory=factory_for(drafter))
    _, rounds, finished = run(engine, prompt_ids, spec=tree_spec(4, 16), max_new_tokens=n_new)
    return plain, rounds, finished


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_tree_decoding_equals_plain_decoding(tiny_model, seed):
    plain, rounds, finished = greedy_tree_run(tiny_model, random_prompt(seed, 10), 24)
    assert finished.output_ids == plain
    check_round_invariants(rounds, finished)
    drafted = [r for r in rounds if r.draft_ids]
    assert drafted and all(r.is_tree for r in drafted)
    accepted = {r.n_accepted for r in drafted}
    assert 0 in accepted and 1 in accepted and max(accepted) >= 3


@pytest.mark.slow
def test_greedy_tree_decoding_equals_plain_decoding_on_the_default_model(default_model):
    prompt_ids = local_engine(default_model).prompt_ids(PROMPTS["qa"])
    plain, rounds, finished = greedy_tree_run(default_model, prompt_ids, 16)
    assert finished.output_ids == plain
    assert any(r.is_tree and r.n_accepted >= 2 for r in rounds)


TOP_2 = SamplingConfig(temperature=1.0, top_k=2)
N_DRAWS = 1000
CHI2_CRITICAL_DF7 = 40.52  # 2 × 2 × 2 cells − 1 at p = 1e-6 (scipy.stats.chi2.isf(1e-6, 7))


@torch.inference_mode()
def sampling_rows(runner: TransformersRunner, context: list[int]) -> torch.Tensor:
    """The target's distribution (vocab,) after `context` under TOP_2 (a runner synced to it)."""
    from engine.core.sampling import probabilities
    runner.sync(context)
    return probabilities(runner.forward(context[len(runner.ids):], 1).clone(), TOP_2)[0]


def exact_joint3(model, prompt_ids: list[int]) -> dict[tuple[int, int, int], float]:
    """The target's own probability of each first three new tokens under TOP_2."""
    runner = model.new_runner()
    joint = {}
    p1 = sampling_rows(runner, prompt_ids)
    for x1 in torch.nonzero(p1).flatten().tolist():
        p2 = sampling_rows(runner, prompt_ids + [x1])
        for x2 in torch.nonzero(p2).flatten().tolist():
            p3 = sampling_rows(runner, prompt_ids + [x1, x2])
            joint.update({(x1, x2, x3): float(p1[x1] * p2[x2] * p3[x3]) for x3 in torch.nonzero(p3).flatten().tolist()})
    return joint


class FixedTrees(Drafter):
    """Proposes a fixed tree (picked nodes: one-hot) for each context it knows, nothing for the others."""

    name = "fixed-trees"
    free_to_propose = False
    note = None

    def __init__(self, trees: dict[tuple[int, ...], Proposal]) -> None:
        self.trees = trees

    def propose(self, context_ids, k):
        return Proposal.empty()

    def propose_tree(self, context_ids, k, budget):
        return self.trees.get(tuple(context_ids), Proposal.empty())


def two_level_trees(model, prompt_ids: list[int]) -> dict[tuple[int, ...], Proposal]:
    """For each first token x1 the target may sample, a tree of picked nodes: first a root child the target never
    samples (with a child of its own), then after the likelier x1 both of the target's tokens (so one is always
    kept), after the other x1 only the less likely one (so none may be kept), each with its children picked
    the same way, the likelier last."""
    runner = model.new_runner()
    ranked = lambda context: sampling_rows(runner, context).argsort(descending=True)[:2].tolist()[::-1]
    trees = {}
    for n_children, x1 in enumerate(ranked(prompt_ids), start=1):
        context = prompt_ids + [x1]
        second = ranked(context)
        never = next(x for x in range(3, 400) if x not in second)
        ids, parents = [never, 3], [-1, 0]
        for x2 in second[:n_children]:
            ids += [x2, *ranked(context + [x2])[:n_children]]
            parents += [-1] + [len(ids) - n_children - 1] * n_children
        trees[tuple(context)] = Proposal(ids, None, parents=tuple(parents))
    return trees


@pytest.mark.usefixtures("one_torch_thread")
def test_sampled_tree_decoding_keeps_the_targets_distribution(tiny_model):
    """The first three tokens (the second and third verified as a tree) follow the target's exact joint."""
    prompt_ids = random_prompt(7, 8)
    engine = local_engine(tiny_model, drafter_factory=factory_for(FixedTrees(two_level_trees(tiny_model, prompt_ids))))
    counts: dict = {}
    accepted = set()
    for seed in range(N_DRAWS):
        sampling = SamplingConfig(temperature=1.0, top_k=2, seed=seed)
        _, rounds, finished = run(engine, prompt_ids, spec=tree_spec(2, 8), sampling=sampling, max_new_tokens=4)
        cell = tuple(finished.output_ids[:3])
        counts[cell] = counts.get(cell, 0) + 1
        accepted.add(rounds[1].n_accepted)
    joint = exact_joint3(tiny_model, prompt_ids)
    assert len(joint) == 8 and accepted == {0, 1, 2}
    statistic = chi_square(counts, joint, N_DRAWS)  # a triple outside the target's top-2 support fails at once
    print(f"\nchi-square {statistic:.2f} (critical {CHI2_CRITICAL_DF7})")
    assert statistic < CHI2_CRITICAL_DF7


# ------------------------------------------------------------------ sliding windows (Gemma 3)

@pytest.fixture(scope="module")
def gemma(tiny_tokenizer):
    """A tiny random Gemma 3 text model whose sliding window (4) is shorter than the contexts here."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig
    torch.manual_seed(0)
    config = Gemma3TextConfig(vocab_size=len(tiny_tokenizer), hidden_size=32, intermediate_size=64,
                              num_attention_heads=2, num_key_value_heads=1, head_dim=16, num_hidden_layers=3,
                              sliding_window=4, layer_types=["sliding_attention", "full_attention",
                                                             "sliding_attention"])
    return Gemma3ForCausalLM(config).eval()


@torch.inference_mode()
def test_sliding_window_layers_see_their_window_in_a_tree(gemma):
    runner = TransformersRunner(gemma)
    assert runner.tree_refusal() is None
    runner.forward(CONTEXT, 1)
    runner.rollback(len(CONTEXT))  # the window trimmed, as after any round
    first = runner.forward_tree(FEED, TREE_IDS[:3], TREE_PARENTS[:3])
    grown = runner.grow_tree(TREE_IDS[3:], TREE_PARENTS[3:])
    expected = [chain_logits(gemma, CONTEXT + FEED)] + \
        [chain_logits(gemma, CONTEXT + FEED + path_ids(i)) for i in range(len(TREE_IDS))]
    torch.testing.assert_close(torch.cat([first, grown]), torch.stack(expected), atol=ATOL, rtol=0)
    runner.keep_path([0, 2, 4, 6])
    assert runner.ids == CONTEXT + FEED + [7, 9, 11, 13]
    torch.testing.assert_close(runner.forward([3, 4], 2)[-1], chain_logits(gemma, runner.ids), atol=ATOL, rtol=0)
    runner.rollback(len(runner.ids) - 1)  # a rollback after a kept path still finds the window it needs
    runner.forward_tree([5], [1, 2, 3], (-1, 0, -1))
    runner.keep_path([2])
    torch.testing.assert_close(runner.forward([6], 1)[0], chain_logits(gemma, runner.ids), atol=ATOL, rtol=0)


@pytest.fixture(scope="module")
def gemma_model(gemma, tiny_tokenizer, tmp_path_factory):
    """The tiny Gemma 3 saved and loaded as the app loads a model."""
    from engine.models.load import load_model
    folder = tmp_path_factory.mktemp("tiny-gemma3")
    gemma.save_pretrained(folder)
    tiny_tokenizer.save_pretrained(folder)
    return load_model(str(folder), device=device_under_test(), dtype="float32")


def test_greedy_tree_decoding_equals_plain_decoding_past_a_sliding_window(gemma_model):
    plain, rounds, finished = greedy_tree_run(gemma_model, random_prompt(3, 10), 24)
    assert finished.output_ids == plain
    check_round_invariants(rounds, finished)
    assert {0, 1} <= {r.n_accepted for r in rounds if r.draft_ids}
