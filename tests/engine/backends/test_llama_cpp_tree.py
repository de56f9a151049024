"""Token trees on the llama.cpp backend (engine.backends.llama_cpp_tree): forward_tree's and grow_tree's rows
equal each root-to-node path fed as a chain, keep_path leaves the cache as if the kept path had been fed (no
cell of another branch left, positions contiguous, round after round), a recurrent model and an MTP listener
are refused; an Engine drafting trees gives plain decoding's greedy output token for token, and its sampling
keeps the target's distribution. One tiny Q8_0 GGUF, loaded once. Skipped where llama-cpp-python is missing."""

from __future__ import annotations

import random

import pytest
import torch

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install llama-cpp-python==0.3.36)")

from engine.core.config import SamplingConfig, SpecConfig  # noqa: E402
from engine.core.drafting import Drafter, Proposal  # noqa: E402
from engine.core.engine import Engine  # noqa: E402
from engine.core.errors import ConfigError  # noqa: E402
from engine.core.tree_shape import leaves  # noqa: E402
from engine.models.load import load_model  # noqa: E402
from engine_testkit import check_round_invariants, chi_square, exact_joint, run  # noqa: E402
from tests.fixtures.tiny_gguf import quantize, write_tiny_gguf  # noqa: E402

ATOL = 2e-2  # llama.cpp rounds rows of batches of other sizes slightly differently
PROMPT = "def add(a, b):\n    return a + b\nthe lazy dog"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, tiny_dir, tiny_tokenizer):
    """The tiny Llama as a Q8_0 GGUF, loaded as a LoadedModel."""
    from transformers import LlamaForCausalLM
    folder = tmp_path_factory.mktemp("tree-gguf")
    f32 = write_tiny_gguf(folder / "tiny-f32.gguf", LlamaForCausalLM.from_pretrained(tiny_dir), tiny_tokenizer,
                          context_length=1024)  # room for a feed longer than a batch (512)
    return load_model(str(quantize(f32, folder / "tiny.gguf", "Q8_0")), device="cpu", backend="llama.cpp")


@pytest.fixture(scope="module")
def prompt_ids(tiny):
    return tiny.tokenizer.encode(PROMPT)


def chain_row(runner, ids: list[int]) -> torch.Tensor:
    """The logits after `ids`, fed as a chain to a fresh cache."""
    runner.reset()
    return runner.forward(ids, 1)[0].clone()


def path_to(parents, node: int) -> list[int]:
    """The nodes from the root to `node` (none for −1)."""
    path = []
    while node >= 0:
        path.append(node)
        node = parents[node]
    return path[::-1]


def path_ids(ids, parents, node: int) -> list[int]:
    return [ids[i] for i in path_to(parents, node)]


def random_tree(rng: random.Random, n: int, vocab: int) -> tuple[list[int], list[int]]:
    parents = [-1] + [rng.randrange(-1, i) for i in range(1, n)]
    return [rng.randrange(vocab) for _ in range(n)], parents


def assert_rows_close(ours: torch.Tensor, theirs: torch.Tensor) -> None:
    assert torch.equal(ours.argmax(-1), theirs.argmax(-1))
    assert torch.allclose(ours, theirs, atol=ATOL), float((ours - theirs).abs().max())


def memory_facts(runner) -> tuple[int, int, int]:
    """Sequence 0's first and last positions, and the size of the whole state (it grows with every used cell)."""
    lib = runner.model.lib
    return (lib.llama_memory_seq_pos_min(runner.memory, 0), lib.llama_memory_seq_pos_max(runner.memory, 0),
            lib.llama_state_get_size(runner.context))


def test_forward_tree_rows_equal_each_path_fed_as_a_chain(tiny, prompt_ids):
    runner, reference = tiny.new_runner(), tiny.new_runner()
    runner.forward(prompt_ids[:-2], 1)
    feed = prompt_ids[-2:]
    ids, parents = random_tree(random.Random(0), 24, tiny.vocab_size)
    rows = runner.forward_tree(feed, ids, parents).clone()
    assert rows.shape == (len(ids) + 1, tiny.vocab_size) and rows.dtype == torch.float32
    expected = [chain_row(reference, prompt_ids)] + \
        [chain_row(reference, prompt_ids + path_ids(ids, parents, i)) for i in range(len(ids))]
    assert_rows_close(rows, torch.stack(expected))
    assert runner.ids == prompt_ids[:-2]  # the tree is pending: nothing committed yet
    runner.keep_path([])
    assert runner.ids == prompt_ids


def test_a_feed_longer_than_a_batch_goes_first_as_a_chain(tiny):
    """A fed chain that does not fit in one batch with the nodes: all but its last id are decoded first (in
    batches of n_batch, as forward() feeds a prompt), then its last id and the nodes in one batch."""
    rng = random.Random(3)
    runner, reference = tiny.new_runner(), tiny.new_runner()
    feed = [rng.randrange(tiny.vocab_size) for _ in range(runner.batch_size + 40)]
    ids, parents = random_tree(rng, 6, tiny.vocab_size)
    rows = runner.forward_tree(feed, ids, parents).clone()
    assert runner.ids == feed[:-1]
    expected = [chain_row(reference, feed)] + [chain_row(reference, feed + path_ids(ids, parents, i)) for i in range(6)]
    assert_rows_close(rows, torch.stack(expected))
    runner.keep_path([0])
    assert runner.ids == feed + [ids[0]]


def test_grow_tree_rows_equal_each_path_fed_as_a_chain(tiny, prompt_ids):
    """Level by level: an old leaf grown once (its sequence goes on) and twice (a copy), an inner node and the
    root given new children, and a new node's own child in the same pass."""
    runner, reference = tiny.new_runner(), tiny.new_runner()
    runner.forward(prompt_ids[:-1], 1)
    parents = [-1, -1, 0]
    ids = [5, 9, 11]
    runner.forward_tree(prompt_ids[-1:], ids, parents)
    for new_parents in ([2, 1, 1, 0, -1, 7], [3, 8, 8, 10]):
        start = len(ids)
        new_ids = [(17 * (start + i) + 3) % tiny.vocab_size for i in range(len(new_parents))]
        ids, parents = ids + new_ids, parents + new_parents
        rows = runner.grow_tree(new_ids, new_parents).clone()
        expected = [chain_row(reference, prompt_ids + path_ids(ids, parents, start + i)) for i in range(len(new_ids))]
        assert_rows_close(rows, torch.stack(expected))
    path = [0, 2, 3, 9]
    runner.keep_path(path)
    kept = prompt_ids + [ids[i] for i in path]
    assert runner.ids == kept[:len(prompt_ids) + 2]  # nodes 3 and 9 came in later passes: to be fed again
    probe = [7]
    assert torch.equal(runner.forward(kept[len(runner.ids):] + probe, 1), chain_row(reference, kept + probe)[None])
    context = list(runner.ids)  # a tree grown from nothing: the fed chain alone, then the root's children
    row = runner.forward_tree([8], [], ()).clone()
    assert_rows_close(row, chain_row(reference, context + [8])[None])
    rows = runner.grow_tree([4, 6], (-1, -1)).clone()
    assert_rows_close(rows, torch.stack([chain_row(reference, context + [8, x]) for x in (4, 6)]))
    runner.keep_path([1])
    assert runner.ids == context + [8]  # node 1 came after node 0: to be fed again


def test_keep_path_leaves_the_cache_as_if_the_path_had_been_fed(tiny, prompt_ids):
    runner, reference = tiny.new_runner(), tiny.new_runner()
    runner.forward(prompt_ids[:-1], 1)
    ids, parents = random_tree(random.Random(1), 16, tiny.vocab_size)
    runner.forward_tree(prompt_ids[-1:], ids, parents)
    path = max((path_to(parents, i) for i in range(len(ids))), key=len)
    runner.keep_path(path)
    kept = prompt_ids + [ids[i] for i in path]
    assert kept[:len(runner.ids)] == runner.ids and len(path) > 2
    runner.forward(kept[len(runner.ids):] if len(runner.ids) < len(kept) else kept[-1:], 1)  # the next sync's feed
    runner.rollback(len(kept))
    reference.reset()
    reference.forward(kept, 1)
    assert memory_facts(runner) == memory_facts(reference) == (0, len(kept) - 1, memory_facts(reference)[2])
    for seq in range(1, len(leaves(parents)) + 1):
        assert runner.model.lib.llama_memory_seq_pos_max(runner.memory, seq) == -1
    assert torch.equal(runner.forward([3], 1), reference.forward([3], 1))  # bit for bit


def test_fifty_rounds_leave_no_cell_behind(tiny, prompt_ids):
    """Rounds of random trees and random kept paths (empty ones too), a chain pass now and then: the cache
    always holds the committed ids at positions 0… and nothing else, and predicts what a fresh cache does."""
    rng = random.Random(2)
    runner, reference = tiny.new_runner(), tiny.new_runner()
    runner.forward(prompt_ids[:-1], 1)
    committed = list(prompt_ids)
    for round_index in range(50):
        if round_index % 7 == 3:  # a chain round between trees
            runner.forward(committed[len(runner.ids):] + [4, 5], 3)
            runner.rollback(len(committed))
            committed.append(4)
            continue
        ids, parents = random_tree(rng, rng.randint(1, 20), tiny.vocab_size)
        runner.forward_tree(committed[len(runner.ids):], ids, parents)
        path = path_to(parents, rng.randrange(-1, len(ids)))
        runner.keep_path(path)
        committed += [ids[i] for i in path] + [rng.randrange(tiny.vocab_size)]
        assert runner.ids == committed[:len(runner.ids)] and len(runner.ids) >= len(committed) - 1 - len(path)
        assert memory_facts(runner)[:2] == (0, len(runner.ids) - 1)
    if len(runner.ids) < len(committed) - 1:  # the path's nodes out of line, fed again
        runner.forward(committed[len(runner.ids):-1], 1)
    reference.forward(committed[:-1], 1)
    assert memory_facts(runner) == memory_facts(reference)
    assert_rows_close(runner.forward(committed[-1:], 1), reference.forward(committed[-1:], 1))


def test_what_does_not_fit_is_refused(tiny, prompt_ids):
    runner = tiny.new_runner()
    runner.forward(prompt_ids[:-1], 1)
    with pytest.raises(ConfigError, match="at most 127 leaves"):
        runner.forward_tree(prompt_ids[-1:], [1] * 130, [-1] * 130)
    runner.forward_tree(prompt_ids[-1:], [1, 2], [-1, -1])  # nothing was left pending
    with pytest.raises(ValueError, match="not a path"):
        runner.keep_path([1, 0])
    runner.keep_path([1])  # node 1 sits after node 0's cell: dropped too, for the next pass to feed again
    assert runner.ids == prompt_ids
    runner.forward_tree([2], [5, 6], [-1, 0])
    runner.keep_path([0, 1])  # the first-child line: kept
    assert runner.ids == prompt_ids + [2, 5, 6]


class Listener:
    def on_rows(self, start, ids, rows):
        pass

    def on_close(self):
        pass


def test_a_hidden_state_listener_and_a_recurrent_state_keep_chains(tiny, tmp_path, tiny_tokenizer):
    from tests.fixtures.tiny_gguf import write_tiny_mamba_gguf
    runner = tiny.new_runner()
    assert runner.tree_refusal() is None
    listener = Listener()
    runner.record_nextn(listener)
    assert "hidden states follows one chain" in runner.tree_refusal()
    runner.stop_recording_nextn(listener)
    assert runner.tree_refusal() is None
    mamba = load_model(str(write_tiny_mamba_gguf(tmp_path / "mamba.gguf", tiny_tokenizer)), device="cpu")
    recurrent = mamba.new_runner()
    assert "recurrent state" in recurrent.tree_refusal()
    with pytest.raises(ConfigError, match="recurrent state"):
        recurrent.forward_tree([1], [2], [-1])


# ------------------------------------------------------------------ an Engine drafting trees

class TargetTree(Drafter):
    """Drafts from a runner of the target itself: its top token at each of k levels (a chain), and beside each a
    wrong sibling (its second token) with a child of its own; every third round the chain stops a level short,
    with the wrong sibling alone there (a partial acceptance). `order`: "chain" lists the chain first, then the
    rest; "levels" lists the nodes level by level, the right one first; "wrong-first" level by level, the
    wrong sibling first (the runner's depth-first layout then scatters the kept path's cells)."""

    name = "target-tree"
    free_to_propose = True

    def __init__(self, runner, order: str) -> None:
        self.runner, self.order = runner, order
        self.rounds = 0

    def propose(self, context_ids, k):
        return Proposal.empty()

    def _top_two(self, context: list[int]) -> list[int]:
        feed = self.runner.sync(context)
        return self.runner.forward(feed, 1)[0].argsort(descending=True)[:2].tolist()

    def propose_tree(self, context_ids, k, budget):
        self.rounds += 1
        context, chain, wrong = list(context_ids), [], []
        for depth in range(k):
            first, second = self._top_two(context)
            wrong.append(second)
            if depth == k - 1 and self.rounds % 3 == 0:
                break
            chain.append(first)
            context.append(first)
        n = len(chain)
        ids = chain + wrong + [w for w in wrong]  # the chain, the wrong siblings, a child under each of those
        parents = list(range(-1, n - 1)) + [d - 1 for d in range(len(wrong))] + [n + d for d in range(len(wrong))]
        tree = Proposal(ids, None, parents=tuple(parents))
        if self.order == "chain":
            return tree
        depths = tree.depths()
        wrong_first = self.order == "wrong-first"
        return tree.kept(sorted(range(len(ids)), key=lambda i: (depths[i], (i < n) == wrong_first)))


class Source:
    def __init__(self, drafter) -> None:
        self._drafter = drafter

    def validate(self, spec):
        pass

    def drafter(self, spec, target_runner):
        return self._drafter

    def verify_curve(self, k):
        return None

    def release(self):
        pass


def tree_spec(k: int, tree: int) -> SpecConfig:
    spec = SpecConfig(method="prompt-lookup", k=k)
    object.__setattr__(spec, "tree", tree)  # the drafter here is the test's own, whatever the method declares
    return spec


def tree_engine(model, order: str) -> Engine:
    return Engine(model, Source(TargetTree(model.new_runner(), order)))


PROMPTS = [PROMPT, "hello world, how are you?", "Café crème 😀 日本語のテキスト", "the lazy dog. the lazy dog."]


@pytest.mark.parametrize("order", ["chain", "levels", "wrong-first"])
def test_greedy_tree_rounds_equal_plain_decoding(tiny, order):
    """The runner lays the tree out depth first: where the right child is listed first, the kept path's cells
    follow one another, as a chain's do; where it is listed after a wrong one ("wrong-first", at every level),
    the nodes out of line are fed again in the next pass. Either way the very logits of plain decoding, the same
    output token for token."""
    engine = tree_engine(tiny, order)
    n_accepted = set()
    for prompt in PROMPTS:
        _, _, plain = run(engine, prompt, max_new_tokens=40)
        _, rounds, finished = run(engine, prompt, spec=tree_spec(4, 16), max_new_tokens=40)
        assert finished.output_ids == plain.output_ids, prompt
        check_round_invariants(rounds, finished)
        drafting = [r for r in rounds if r.draft_ids]
        assert drafting and all(r.is_tree for r in drafting)
        n_accepted.update(r.n_accepted for r in drafting)
    assert {3, 4} <= n_accepted  # partly and fully accepted rounds


N_DRAWS = 2000
SAMPLING = SamplingConfig(temperature=1.0, top_k=3)
CHI2_CRITICAL_DF8 = 44.81  # chi-square, 8 degrees of freedom (3 × 3 cells − 1), p = 1e-6


@pytest.mark.usefixtures("engine_threads_for_torch")
def test_sampled_tree_rounds_keep_the_targets_distribution(tiny, prompt_ids):
    """The first two tokens of a reply (the second one verified by recursive rejection over a tree whose
    root has the target's top two tokens as children, both one-hot) follow the target's exact joint."""
    engine = tree_engine(tiny, "wrong-first")
    counts: dict[tuple[int, int], int] = {}
    spec = tree_spec(2, 8)
    for seed in range(N_DRAWS):
        sampling = SamplingConfig(temperature=SAMPLING.temperature, top_k=SAMPLING.top_k, seed=seed)
        _, rounds, finished = run(engine, prompt_ids, spec=spec, sampling=sampling, max_new_tokens=3)
        assert rounds[1].is_tree
        pair = tuple(finished.output_ids[:2])
        counts[pair] = counts.get(pair, 0) + 1
    assert chi_square(counts, exact_joint(tiny, prompt_ids, SAMPLING), N_DRAWS) < CHI2_CRITICAL_DF8
