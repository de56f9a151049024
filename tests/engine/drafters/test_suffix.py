"""Suffix decoding (engine.drafters.suffix, suffix_tree, suffix_store): the tree's matches, frequencies and draft
lengths by hand; the store's durability (reopen, kill -9 mid-write, a corrupt file started afresh with one line,
owner-only files); the drafter's two trees and its learning switch; on the tiny model, greedy output equal to
plain decoding, lossless sampling (chi-square), and learning: a second identical chat drafts more with learning
on, exactly as much with it off."""

from __future__ import annotations

import os
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.core.config import SamplingConfig, SpecConfig
from engine.drafters.suffix import LearnedReplies, SuffixDrafter, model_key
from engine.drafters.suffix_store import STORE_NAME, SuffixStore, clear_store, decode, encode, forget_replies
from engine.drafters.suffix_tree import SpeculationLimits, SuffixTree, best_of
from engine.runtime import local_engine
from engine_testkit import PROMPTS, check_round_invariants, chi_square, run
from engine_testkit import exact_joint as joint_under

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    folder = tmp_path / "data"
    monkeypatch.setenv("SPECSCOPE_DATA_DIR", str(folder))
    return folder


# ------------------------------------------------------------------ the tree

def tree_of(*sequences) -> SuffixTree:
    """Finished sequences, then the last one open (as a conversation is: its very end is no occurrence)."""
    tree = SuffixTree()
    for ids in sequences[:-1]:
        tree.add(ids)
    tree.extend(sequences[-1])
    return tree


def test_occurrences_and_continuation_counts():
    tree = tree_of([1, 2, 3, 1, 2, 4, 1, 2, 3, 9])
    assert tree.occurrences([1, 2]) == [1, 4, 7]
    assert tree.continuations(tree.occurrences([1, 2])) == {3: 2, 4: 1}
    assert tree.continuations(tree.occurrences([2, 3])) == {1: 1, 9: 1}
    assert tree.occurrences([3, 1, 2]) == [4]
    assert tree.occurrences([5]) == []
    # the very last token is the context matching itself: not an occurrence
    assert tree.occurrences([9]) == []


def test_the_draft_follows_the_most_frequent_path_with_the_product_of_frequencies():
    tree = tree_of([7, 1, 2, 3, 4, 8, 1, 2, 3, 5, 8, 1, 2, 3, 4, 8])
    candidate = tree.speculate([6, 1, 2], k=8, limits=SpeculationLimits(spec_factor=2.0, min_token_prob=0.0))
    # "1 2" (match length 2, so at most 4 tokens): 3 always (1), then 4 in 2 of 3 (2/3), then 8 always, then 1
    # after one of the two "… 4 8" (the other ends the sequence): 1/2
    assert candidate.match_length == 2
    assert candidate.ids == (3, 4, 8, 1)
    assert candidate.probs == pytest.approx((1.0, 2 / 3, 2 / 3, 1 / 3))
    assert candidate.score == pytest.approx(1 + 4 / 3 + 1 / 3)


def test_draft_length_is_bounded_by_the_match_length_and_k():
    tree = tree_of(list(range(20)) + list(range(20)))
    context = list(range(5))  # a 5-token match, continuing 5 6 7 …
    assert len(tree.speculate(context, k=16, limits=SpeculationLimits(spec_factor=1.0)).ids) == 5
    assert len(tree.speculate(context, k=16, limits=SpeculationLimits(spec_factor=2.0)).ids) == 10
    assert len(tree.speculate(context, k=3, limits=SpeculationLimits(spec_factor=2.0)).ids) == 3
    assert tree.speculate(context, k=16, limits=SpeculationLimits(spec_factor=0.5)).ids == (5, 6)
    assert tree.speculate([3], k=16).ids == (4,)  # one matched token, one drafted
    # a longer match (max_depth permitting) drafts further
    assert len(tree.speculate(list(range(12)), k=16, limits=SpeculationLimits(max_depth=4)).ids) == 4


def test_a_rare_continuation_is_not_drafted():
    tree = tree_of([1, 2, 3, 1, 2, 4, 1, 2, 5, 1, 2, 6])
    limits = SpeculationLimits(spec_factor=4.0, min_token_prob=0.3)
    assert tree.speculate([1, 2], k=4, limits=limits).ids == ()  # each continuation followed "1 2" 1 time in 4
    assert tree.speculate([1, 2], k=4, limits=SpeculationLimits(spec_factor=4.0, min_token_prob=0.2)).ids[:1] == (6,)


def test_sequences_do_not_run_into_each_other():
    tree = tree_of([1, 2, 3], [4, 5, 6])
    assert tree.occurrences([3, 4]) == []
    assert tree.speculate([9, 3], k=4).ids == ()  # 3 ended its sequence
    assert tree.speculate([9, 4], k=4).ids == (5,)
    assert len(tree) == 6 and tree.n_sequences == 2


def test_a_finished_sequences_end_counts_as_an_occurrence_that_stopped():
    tree = SuffixTree()
    tree.add([1, 2])
    tree.add([7, 1])  # a reply that ended right after 1
    assert len(tree.occurrences([1])) == 2 and tree.continuations(tree.occurrences([1])) == {2: 1}
    assert tree.speculate([1], k=4, limits=SpeculationLimits(min_token_prob=0.0)).probs == (0.5,)
    assert tree.speculate([1], k=4, limits=SpeculationLimits(min_token_prob=0.6)).ids == ()


def test_the_higher_scoring_tree_drafts():
    local = tree_of([1, 2, 3, 1, 2, 4, 1])  # "1 2" then 3 or 4: 1/2 each
    learned = tree_of([8, 1, 2, 5, 6], [1, 2, 5, 6])  # "1 2" then 5 6 always
    context = [0, 1, 2]
    a = local.speculate(context, 4, SpeculationLimits(spec_factor=2.0))
    b = learned.speculate(context, 4, SpeculationLimits(spec_factor=2.0))
    assert best_of(a, b) is b and b.ids == (5, 6)
    assert best_of(b, b) is b and best_of().ids == ()


def naive_speculate(sequences, context, k, limits):
    """The same speculation by brute force over a plain list of sequences: every match length, every path
    counted by scanning (a reference for SuffixTree.speculate)."""
    best = ((), 0.0, 0)
    tail = list(context[-limits.max_depth:])
    for m in range(1, len(tail) + 1):
        pattern = tail[-m:]
        # occurrences: (sequence, end index) with something after the end, or the end of a sequence that is not
        # the last position of the last sequence
        ends = [(s, e) for s, seq in enumerate(sequences) for e in range(m - 1, len(seq))
                if seq[e - m + 1:e + 1] == pattern and not (s == len(sequences) - 1 and e == len(seq) - 1)]
        if not ends:
            break
        length = min(k, int(m * limits.spec_factor + limits.spec_offset + 1e-6))
        ids, probs, prob = [], [], 1.0
        while len(ids) < length and ends:
            nexts = [(sequences[s][e + 1], e) for s, e in ends if e + 1 < len(sequences[s])]
            if not nexts:
                break
            counts = {}
            for token, _ in nexts:
                counts[token] = counts.get(token, 0) + 1
            latest = {}
            for (s, e) in ends:
                if e + 1 < len(sequences[s]):
                    latest[sequences[s][e + 1]] = (s, e)
            token = max(counts, key=lambda t: (counts[t], latest[t]))
            prob *= counts[token] / len(ends)
            if prob < limits.min_token_prob:
                break
            ids.append(token)
            probs.append(prob)
            ends = [(s, e + 1) for s, e in ends if e + 1 < len(sequences[s]) and sequences[s][e + 1] == token]
        if ids and (sum(probs) > best[1] or (sum(probs) == best[1] and m > best[2])):
            best = (tuple(ids), sum(probs), m)
    return best


@pytest.mark.parametrize("seed", range(40))
def test_speculation_equals_a_brute_force_count(seed):
    import random
    rng = random.Random(seed)
    vocab = rng.choice([2, 3, 5])
    sequences = [[rng.randrange(vocab) for _ in range(rng.randrange(1, 30))] for _ in range(rng.randrange(1, 4))]
    limits = SpeculationLimits(max_depth=rng.choice([2, 4, 24]), spec_factor=rng.choice([0.5, 1.0, 2.0]),
                               min_token_prob=rng.choice([0.0, 0.1, 0.4]))
    tree = tree_of(*sequences)
    context = sequences[-1]
    k = rng.choice([1, 3, 8])
    candidate = tree.speculate(context, k, limits)
    ids, score, match_length = naive_speculate(sequences, context, k, limits)
    assert candidate.ids == ids
    assert candidate.score == pytest.approx(score)
    if ids:
        assert candidate.match_length == match_length


# ------------------------------------------------------------------ the store

def test_the_store_keeps_replies_per_model_across_reopening_owner_only(tmp_path):
    path = tmp_path / "data" / STORE_NAME
    store = SuffixStore(path)
    assert store.warning is None
    for i in range(5):
        assert store.add("model-a", [i, i + 1, i + 2], max_replies=3) is None
    store.add("model-b", [99], max_replies=3)
    store.close()
    again = SuffixStore(path)
    assert again.replies("model-a", 10) == [[2, 3, 4], [3, 4, 5], [4, 5, 6]]  # the newest 3, oldest first
    assert again.replies("model-b", 10) == [[99]]
    assert again.replies("model-a", 2) == [[3, 4, 5], [4, 5, 6]]
    again.close()
    if os.name == "posix":
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_token_ids_round_trip_and_bad_bytes_are_refused():
    ids = [0, 1, 49151, 2 ** 31 - 1]
    assert decode(encode(ids)) == ids
    with pytest.raises(ValueError):
        decode(b"abc")


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_corrupt_store_is_started_afresh_with_one_line(tmp_path, damage):
    path = tmp_path / STORE_NAME
    store = SuffixStore(path)
    for i in range(200):
        store.add("m", list(range(i, i + 50)), max_replies=1000)
    store.close()
    if damage == "garbage":
        path.write_bytes(b"this is not a database" * 100)
    else:
        data = path.read_bytes()
        for end in ("-wal", "-shm"):
            path.with_name(path.name + end).unlink(missing_ok=True)
        path.write_bytes(data[:100] + b"\xff" * 3000 + data[3100:len(data) // 2])
    fresh = SuffixStore(path)
    assert fresh.warning is not None and "\n" not in fresh.warning
    assert "could not be read" in fresh.warning and "started afresh" in fresh.warning
    assert fresh.replies("m", 10) == []
    assert fresh.add("m", [1, 2, 3], 10) is None and fresh.replies("m", 10) == [[1, 2, 3]]
    fresh.close()


def test_a_row_of_another_format_starts_the_store_afresh(tmp_path):
    path = tmp_path / STORE_NAME
    SuffixStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO replies (model, digest, tokens) VALUES ('m', 'x', x'010203')")
    store = SuffixStore(path)
    assert store.replies("m", 10) == [] and "could not be read" in store.warning
    store.close()


def test_learned_replies_say_what_they_hold_and_the_learning_drafter_reads_a_corrupt_store_as_a_warning(tmp_path):
    path = tmp_path / STORE_NAME
    first = LearnedReplies("m", 100, path)
    assert "none kept yet" in first.note and first.warning is None
    first.add([1, 2, 3])
    first.store.close()
    assert "(1 kept)" in LearnedReplies("m", 100, path).note
    path.write_bytes(b"\0garbage" * 512)
    for end in ("-wal", "-shm"):
        path.with_name(path.name + end).unlink(missing_ok=True)
    drafter = SuffixDrafter(learned=LearnedReplies("m", 100, path))
    drafter.begin(SamplingConfig(), None)
    # said at the start of the first generation: the problem as a warning, learning itself as information
    assert "could not be read" in drafter.warning and "could not be read" not in drafter.note
    assert "none kept yet" in drafter.note
    drafter.begin(SamplingConfig(), None)
    assert drafter.note is None and drafter.warning is None  # and only then


@pytest.mark.parametrize("method", ["suffix", "suffix+draft-model"])
def test_the_engine_says_learning_as_a_note_and_a_broken_store_as_a_warning(tiny_model, tiny_draft_dir,
                                                                           data_dir, method):
    data_dir.mkdir(parents=True)
    (data_dir / STORE_NAME).write_bytes(b"\0garbage" * 512)
    spec = SpecConfig(method, k=3, draft=str(tiny_draft_dir) if "draft-model" in method else None,
                      params={"learn": True})
    engine = local_engine(tiny_model)
    prompt = tiny_model.tokenizer.encode("How are you?", add_special_tokens=False)
    started = run(engine, prompt, spec=spec, max_new_tokens=4)[0]
    assert any("could not be read" in w for w in started.warnings), started
    assert any("learning from this model's replies" in n for n in started.notes), started
    assert not any("learning from" in w for w in started.warnings)
    engine.release()
    again = run(engine, prompt, spec=spec, max_new_tokens=4)[0]  # the same drafter: each line is said once
    assert again.warnings == () and again.notes == ()
    restarted = run(local_engine(tiny_model), prompt, spec=spec, max_new_tokens=4)[0]  # the store is sound again
    assert restarted.warnings == () and any("(2 kept)" in n for n in restarted.notes), restarted


WRITER = """
import sys
from engine.drafters.suffix_store import SuffixStore
store = SuffixStore(__import__("pathlib").Path(sys.argv[1]))
i = 0
while True:
    store.add("m", list(range(i, i + 400)), max_replies=50)
    i += 1
    if i == 5:
        print("writing", flush=True)
"""


def test_the_store_survives_a_kill_9_mid_write(tmp_path):
    """A process adding replies as fast as it can is killed with SIGKILL: the store opens without a warning and
    every reply in it is whole (each is a run of 400 consecutive ids)."""
    path = tmp_path / STORE_NAME
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "writing"
        time.sleep(0.5)
    finally:
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait()
    assert writer.returncode == -signal.SIGKILL
    store = SuffixStore(path)
    replies = store.replies("m", 1000)
    print(f"\n{len(replies)} whole replies after kill -9")
    assert store.warning is None
    assert 5 <= len(replies) <= 50
    assert all(ids == list(range(ids[0], ids[0] + 400)) for ids in replies)
    store.close()


def test_forgetting_a_deleted_chats_replies_and_clearing(tmp_path):
    path = tmp_path / STORE_NAME
    assert forget_replies([[1, 2]], path) is None and not path.exists()  # no store is made to forget into
    store = SuffixStore(path)
    for ids in ([1, 2, 3], [4, 5], [1, 2, 3, 4]):
        store.add("m", ids, 10)
    store.close()
    assert forget_replies([[4, 5], [1, 2, 3]], path) is None
    assert SuffixStore(path).replies("m", 10) == [[1, 2, 3, 4]]
    clear_store(path)
    assert not path.exists()


# ------------------------------------------------------------------ the drafter

def test_the_conversation_tree_follows_the_context_and_starts_over_for_another():
    drafter = SuffixDrafter(SpeculationLimits(spec_factor=2.0))
    text = [5, 6, 7, 8, 9, 1, 5, 6]
    assert drafter.propose(text, 4).ids == [7, 8, 9, 1]
    assert drafter.last_source == "conversation"
    assert drafter.propose(text + [7, 8], 4).ids == [9, 1, 5, 6]  # grown by what was committed
    assert drafter.propose([1, 2, 3, 1], 4).ids == [2, 3]  # another conversation: its own tree only
    assert drafter.propose([4, 4], 4).ids == [4]
    drafter.learn([1, 2, 3])  # learning off: nothing is kept
    assert drafter.learned is None


def test_a_learning_drafter_drafts_from_past_replies(tmp_path):
    path = tmp_path / STORE_NAME
    learned = LearnedReplies("m", 100, path)
    drafter = SuffixDrafter(SpeculationLimits(spec_factor=4.0), learned)
    assert drafter.propose([30, 31], 4).ids == []
    drafter.learn([20, 30, 31, 32, 33, 34])
    proposal = drafter.propose([30, 31], 4)
    assert proposal.ids == [32, 33, 34] and drafter.last_source == "learned"
    learned.store.close()
    reopened = SuffixDrafter(SpeculationLimits(spec_factor=4.0), LearnedReplies("m", 100, path))
    assert reopened.propose([30, 31], 4).ids == [32, 33, 34]  # kept across a restart
    assert SuffixDrafter(SpeculationLimits(spec_factor=4.0), LearnedReplies("other", 100, path)).propose(
        [30, 31], 4).ids == []  # another model's replies are its own


# ------------------------------------------------------------------ on the tiny model

TINY_PROMPTS = ["the lazy dog. the lazy dog. the lazy dog. the lazy", "def add(a, b):\n    return a + b\n\ndef add(",
                "hello world, how are you? hello world, how", "Café crème 😀 日本語のテキスト"]


def test_tiny_suffix_greedy_equals_plain(tiny_model, tiny_tokenizer, data_dir):
    engine = local_engine(tiny_model)
    drafted = accepted = 0
    for learn in (False, True):
        spec = SpecConfig("suffix", k=4, params={"learn": learn, "spec_factor": 2.0})
        for text in TINY_PROMPTS:
            prompt = tiny_tokenizer.encode(text, add_special_tokens=False)
            _, _, plain = run(engine, prompt, max_new_tokens=48)
            _, rounds, finished = run(engine, prompt, spec=spec, max_new_tokens=48)
            assert finished.output_ids == plain.output_ids, (learn, text)
            check_round_invariants(rounds, finished)
            assert max((len(r.draft_ids) for r in rounds), default=0) <= 4
            drafted += finished.stats.drafted_tokens
            accepted += finished.stats.accepted_tokens
    assert 0 < accepted < drafted


def drafted_in(engine, prompt, spec) -> tuple[int, int, tuple[int, ...]]:
    _, _, finished = run(engine, prompt, spec=spec, max_new_tokens=40)
    return finished.stats.drafted_tokens, finished.stats.accepted_tokens, finished.output_ids


@pytest.mark.parametrize("learn", [False, True])
def test_a_second_identical_chat_drafts_more_only_when_learning(tiny_model, tiny_tokenizer, data_dir, learn):
    prompt = tiny_tokenizer.encode("Café crème, how are you? 日本語", add_special_tokens=False)
    spec = SpecConfig("suffix", k=4, params={"learn": learn})
    engine = local_engine(tiny_model)
    first = drafted_in(engine, prompt, spec)
    second = drafted_in(engine, prompt, spec)
    assert first[2] == second[2]
    print(f"\nlearn={learn}: drafted/accepted {first[:2]} then {second[:2]}")
    store = data_dir / STORE_NAME
    if learn:
        assert second[0] > first[0] and second[1] > first[1]
        # and after a restart (a new engine, a new drafter reading the store), still more than the first
        assert drafted_in(local_engine(tiny_model), prompt, spec)[0] > first[0]
        assert store.is_file()
        assert len(SuffixStore(store).replies(model_key(tiny_model), 10)) == 3
    else:
        assert second[:2] == first[:2]
        assert not store.exists()  # nothing is written with learning off


N_DRAWS = 3000
SAMPLING = SamplingConfig(temperature=1.0, top_k=3)
CHI2_CRITICAL_DF8 = 44.81  # 8 degrees of freedom (3 × 3 cells − 1) at p = 1e-6


def exact_joint(model, prompt_ids: list[int]) -> dict[tuple[int, int], float]:
    """The target's own joint of the first two new tokens under SAMPLING (engine_testkit.exact_joint)."""
    return joint_under(model, prompt_ids, SAMPLING)


@pytest.mark.usefixtures("one_torch_thread")
def test_sampling_with_suffix_drafts_is_lossless(tiny_model, data_dir):
    """The first two emitted tokens (top-3 sampling) follow the target's own joint distribution. The store holds a
    learned reply starting with each token of the vocabulary, so round 1 drafts after any first token, mostly
    wrongly: the residual distribution is drawn from often."""
    import torch
    g = torch.Generator().manual_seed(0)
    store = SuffixStore(data_dir / STORE_NAME)
    for token in range(tiny_model.vocab_size):
        store.add(model_key(tiny_model), [token, *torch.randint(0, tiny_model.vocab_size, (3,), generator=g).tolist()],
                  max_replies=10_000)
    store.close()
    prompt = [5, 9, 20, 31, 44, 12]
    spec = SpecConfig("suffix", k=3, params={"spec_factor": 4.0, "min_token_prob": 0.0, "learn": True,
                                             "max_learned": 10_000})
    engine = local_engine(tiny_model)
    counts: dict[tuple[int, int], int] = {}
    drafted = rejected = 0
    for seed in range(N_DRAWS):
        sampling = SamplingConfig(temperature=SAMPLING.temperature, top_k=SAMPLING.top_k, seed=seed)
        _, rounds, finished = run(engine, prompt, spec=spec, sampling=sampling, max_new_tokens=spec.k + 2)
        pair = tuple(finished.output_ids[:2])
        counts[pair] = counts.get(pair, 0) + 1
        drafted += bool(rounds[1].draft_ids)
        rejected += rounds[1].n_accepted < len(rounds[1].draft_ids)
    joint = exact_joint(tiny_model, prompt)
    assert len(joint) == 9
    print(f"\ndrafted in round 1: {drafted}/{N_DRAWS}, rejected {rejected}; chi-square "
          f"{chi_square(counts, joint, N_DRAWS):.1f} (critical {CHI2_CRITICAL_DF8})")
    assert drafted == N_DRAWS and rejected > N_DRAWS // 10
    assert chi_square(counts, joint, N_DRAWS) < CHI2_CRITICAL_DF8


# ------------------------------------------------------------------ on the built-in model

DEFAULT_PROMPTS = {
    **PROMPTS,
    "list": "List the days of the week, one per line, each followed by its French name.",
    "json": "Write a JSON list of five fruits, each with its name, colour and a short description.",
    "numbers": "Write the numbers from one to thirty in words, separated by commas.",
    "steps": "Explain step by step how to make a cup of tea.",
    "story": "Write the first lines of a short story about a lighthouse keeper and a cat.",
}


@pytest.mark.model
@pytest.mark.slow
def test_default_suffix_greedy_equals_plain(default_engine, data_dir):
    """Prompts of different kinds × 48 tokens on the built-in model (at least ten of them give all 48), learning
    off and then on (the second pass drafts from the first's replies too): output equal to plain decoding, token
    for token."""
    figures = {}
    full = 0
    for name, prompt in DEFAULT_PROMPTS.items():
        _, _, plain = run(default_engine, prompt, max_new_tokens=48)
        full += len(plain.output_ids) == 48
        for learn in (False, True, True):  # off; on, the first pass (nothing learned of it yet); on again
            spec = SpecConfig("suffix", k=6, params={"learn": learn})
            _, rounds, finished = run(default_engine, prompt, spec=spec, max_new_tokens=48)
            assert finished.output_ids == plain.output_ids, f"suffix learn={learn} on {name!r} differs from plain"
            check_round_invariants(rounds, finished)
            figures.setdefault(name, []).append((finished.stats.accepted_tokens, finished.stats.drafted_tokens))
        runs = figures[name]
        print(f"\n{name:10s} {len(plain.output_ids)} tokens, accepted/drafted: off {runs[0]}, learning (1st) "
              f"{runs[1]}, learning (2nd) {runs[2]}", flush=True)
    assert full >= 10
    assert sum(r[0][1] for r in figures.values()) > 0
    # the second learning pass had the first's reply to draft from: in all, it drafts more
    assert sum(r[2][1] for r in figures.values()) > sum(r[0][1] for r in figures.values())
