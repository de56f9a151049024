"""Drafting with a draft of another tokenizer (engine.drafters.cross_tokenizer): the translation through text
on hand-made vocabularies (a token spanning draft tokens, a draft token spanning target tokens, a boundary
that merges with the context, no shared prefix, a partial last word), the shared vocabulary and its refusal,
and, on transformers, a tiny pair of two different tokenizers: greedy output equal to plain decoding and
sampling lossless (chi-square against the target's exact distribution)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.core.config import SamplingConfig, SpecConfig
from engine.core.errors import ConfigError
from engine.drafters.cross_tokenizer import (continuation, piece_ends, retokenize, shared_vocabulary,
                                             shared_vocabulary_refusal, shared_vocabulary_words, sources_of,
                                             translate)
from engine.models.load import load_model
from engine.runtime import local_engine
from engine_testkit import TINY_CORPUS, check_round_invariants, chi_square, run, save_tiny_model
from engine_testkit import exact_joint as joint_under


class GreedyTokenizer:
    """Longest match over a fixed vocabulary (ids in list order), one id per unknown character (appended)."""

    def __init__(self, vocabulary: list[str], special: tuple[str, ...] = ()) -> None:
        self.pieces = list(special) + list(vocabulary)
        self.all_special_ids = list(range(len(special)))

    def __len__(self) -> int:
        return len(self.pieces)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids, at = [], 0
        while at < len(text):
            match = max((p for p in self.pieces[len(self.all_special_ids):] if text.startswith(p, at)),
                        key=len, default=None)
            if match is None:
                self.pieces.append(text[at])
                match = text[at]
            ids.append(self.pieces.index(match))
            at += len(match)
        return ids

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return "".join(self.pieces[i] for i in ids if not (skip_special_tokens and i in self.all_special_ids))


TARGET = GreedyTokenizer(["hello", "he", "l", "lo", "o", " world", " wor", "ld", " ", "w", "r", "d", "!", "x",
                          "y"], special=("<bos>",))
DRAFT = GreedyTokenizer(["hel", "lo", " world", " ", "wor", "ld", "!", "x", "o", "l", "he"], special=("<s>",))


def ids(tokenizer, *pieces: str) -> list[int]:
    return [tokenizer.pieces.index(p) for p in pieces]


def test_a_target_token_spanning_two_draft_tokens_names_both():
    translation = translate(TARGET, [], ["hel", "lo"], k=4)
    assert translation.ids == ids(TARGET, "hello") and translation.sources == ("hel · lo",)


def test_a_draft_token_spanning_two_target_tokens_is_the_source_of_both():
    target = GreedyTokenizer(["a", " wor", "ld", "!"])
    translation = translate(target, [], [" world", "!"], k=4)
    assert translation.ids == ids(target, " wor", "ld", "!")
    assert translation.sources == (" world", " world", "!")


def test_the_boundary_is_split_as_the_target_splits_text_after_its_context():
    # the context ends in "he"; the drafted "llo" would merge into "hello" tokenized together, which is not a
    # continuation of the context's ids: the text is tokenized alone
    assert retokenize(TARGET, ids(TARGET, "he"), "llo!") == ids(TARGET, "l", "lo", "!")
    # a context whose last id survives re-tokenization: the new ids follow it
    assert retokenize(TARGET, ids(TARGET, "hello"), " world!") == ids(TARGET, " world", "!")
    assert retokenize(TARGET, [], "") == []


def test_a_text_ending_inside_a_word_drops_its_last_target_token_but_never_the_only_one():
    assert translate(TARGET, [], [" wor"], k=4).ids == ids(TARGET, " wor")
    assert translate(TARGET, [], ["hello", " wor"], k=4).ids == ids(TARGET, "hello")
    assert translate(TARGET, [], ["hello", " world", "!"], k=4).ids == ids(TARGET, "hello", " world", "!")
    assert translate(TARGET, [], ["hello", " world", "!"], k=2).ids == ids(TARGET, "hello", " world")


def test_continuation_with_no_shared_prefix_takes_the_ids_text_alone():
    class CleaningUp(GreedyTokenizer):
        def decode(self, ids, skip_special_tokens=False):  # clean_up_tokenization_spaces: " ." → "."
            return super().decode(ids).replace(" .", ".")
    tok = CleaningUp(["x", " ", ".", "y"])
    assert continuation(tok, ids(tok, "x", " "), ids(tok, ".", "y")) == ".y"  # "x " is not a prefix of "x.y"
    assert continuation(tok, ids(tok, "x"), ids(tok, " ", "y")) == " y"


def test_piece_ends_and_sources_of():
    assert piece_ends(TARGET, ids(TARGET, "hello", " world"), ids(TARGET, "he")) == [5, 11]
    assert sources_of([2, 5], ["hel", "lo"]) == ["hel", "hel · lo"]
    # a target token ending inside a character has no text of its own: the draft piece that completes it
    assert sources_of([0, 3], ["", "abc"]) == ["abc", "abc"]


def test_the_shared_vocabulary_is_one_to_one_and_leaves_out_specials():
    draft_ids, target_ids = shared_vocabulary(TARGET, DRAFT)
    shared = {DRAFT.pieces[d]: TARGET.pieces[t] for d, t in zip(draft_ids, target_ids)}
    assert shared and all(a == b for a, b in shared.items())
    assert "<s>" not in shared and "<bos>" not in shared and "hel" not in shared
    assert {"lo", " world", "!", "o", "l", "he"} <= set(shared)


def test_too_small_a_shared_vocabulary_is_refused_in_one_line():
    assert shared_vocabulary_refusal(5000, 262144, 49152) is None
    refusal = shared_vocabulary_refusal(0, 262144, 49152)
    assert refusal.startswith("the two tokenizers share 0 tokens (at least 4,915") and "greedy" in refusal
    assert "\n" not in refusal
    assert "sampling is refused" in shared_vocabulary_words(TARGET, GreedyTokenizer(["q"]))


# ------------------------------------------------------------------ a tiny pair on transformers

@pytest.fixture(scope="module")
def other_tokenizer():
    """A byte-level BPE of another size trained on the same corpus: most short pieces spelled alike."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=330, special_tokens=["<s>", "</s>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([text[::-1] for text in TINY_CORPUS] + TINY_CORPUS[:2], trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")


def permuted_twin(folder: Path, tiny_dir: Path, tokenizer, noise: float = 0.001) -> Path:
    """The target's weights (plus a little noise) behind its own pieces at other ids (the non-special ids
    reversed, the embedding and output rows moved with them): another tokenizer to the engine, every piece
    shared, so the draft often guesses right and the acceptance path of the rejection rule is exercised."""
    import json

    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast
    tokenizer.save_pretrained(folder)
    data = json.loads((folder / "tokenizer.json").read_text())
    special = {t["id"] for t in data["added_tokens"]}
    movable = sorted(set(data["model"]["vocab"].values()) - special)
    new_id = dict(zip(movable, reversed(movable)))
    data["model"]["vocab"] = {piece: new_id.get(i, i) for piece, i in data["model"]["vocab"].items()}
    (folder / "tokenizer.json").write_text(json.dumps(data))
    twin = PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"), bos_token=tokenizer.bos_token,
                                   eos_token=tokenizer.eos_token)
    model = LlamaForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32)
    order = torch.arange(len(tokenizer))
    for old, new in new_id.items():
        order[new] = old
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for matrix in (model.model.embed_tokens.weight, model.lm_head.weight):
            matrix.copy_(matrix[order])
        for parameter in model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * noise)
    model.save_pretrained(folder)
    twin.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def twin_pair(tmp_path_factory, tiny_model, tiny_dir, tiny_tokenizer):
    folder = permuted_twin(tmp_path_factory.mktemp("permuted-twin"), tiny_dir, tiny_tokenizer)
    return local_engine(tiny_model), SpecConfig("draft-model", k=3, draft=str(folder))


def test_a_permuted_twin_is_another_tokenizer_that_drafts_well(twin_pair):
    """The translation keeps the twin's guesses (many are accepted), and greedy output is the target's own."""
    engine, spec = twin_pair
    drafted = accepted = 0
    for prompt in ["hello world, how are you?", "The quick brown fox", "def add(a, b):\n    return"]:
        _, _, plain = run(engine, prompt, max_new_tokens=24)
        started, rounds, crossed = run(engine, prompt, spec=spec, max_new_tokens=24)
        assert crossed.output_ids == plain.output_ids and any("cross-tokenizer" in w for w in started.notes)
        drafted += crossed.stats.drafted_tokens
        accepted += crossed.stats.accepted_tokens
    # random weights write many bytes that make no character alone, where drafts stop; a translation that lost
    # the twin's guesses would keep next to none of them
    assert drafted and accepted / drafted > 0.3, (accepted, drafted)


@pytest.fixture(scope="module")
def cross_pair(tmp_path_factory, tiny_model, other_tokenizer):
    folder = save_tiny_model(tmp_path_factory.mktemp("other-tokenizer"), other_tokenizer, seed=3)
    return local_engine(tiny_model), SpecConfig("draft-model", k=3, draft=str(folder))


def test_greedy_with_a_draft_of_another_tokenizer_equals_plain(cross_pair, tiny_tokenizer):
    engine, spec = cross_pair
    drafted = 0
    for prompt in ["hello world, how are you?", "def add(a, b):\n    return", "The quick brown fox",
                   "Café crème 😀 日本語"]:
        _, _, plain = run(engine, prompt, max_new_tokens=24)
        started, rounds, crossed = run(engine, prompt, spec=spec, max_new_tokens=24)
        check_round_invariants(rounds, crossed)
        assert crossed.output_ids == plain.output_ids and crossed.text == plain.text, prompt
        assert any("cross-tokenizer" in w for w in started.notes)
        drafted += sum(len(r.draft_ids) for r in rounds)
        assert all(len(r.draft_sources) == len(r.draft_ids) for r in rounds if r.draft_sources)
    assert drafted > 0


N_DRAWS = 1500
SAMPLING = SamplingConfig(temperature=1.0, top_k=2)
CHI2_CRITICAL_DF3 = 30.66  # 2 × 2 cells − 1 at p = 1e-6 (scipy.stats.chi2.isf(1e-6, 3))


def exact_joint(model, prompt_ids: list[int]) -> dict[tuple[int, int], float]:
    """The target's own joint of the first two new tokens under SAMPLING (engine_testkit.exact_joint)."""
    return joint_under(model, prompt_ids, SAMPLING)


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_sampling_with_a_draft_of_another_tokenizer_is_lossless(twin_pair, tiny_model):
    """The first two emitted tokens (the second drafted, from the shared vocabulary) follow the target's joint
    distribution; the twin's guesses are kept often and rejected often, so both halves of the rule do work."""
    engine, spec = twin_pair
    prompt_ids = engine.prompt_ids("hello world, how are you?")
    counts: dict[tuple[int, int], int] = {}
    drafted = rejected = kept = 0
    for seed in range(N_DRAWS):
        sampling = SamplingConfig(temperature=SAMPLING.temperature, top_k=SAMPLING.top_k, seed=seed)
        _, rounds, finished = run(engine, prompt_ids, spec=spec, sampling=sampling, max_new_tokens=spec.k + 2)
        pair = tuple(finished.output_ids[:2])
        counts[pair] = counts.get(pair, 0) + 1
        drafted += len(rounds[1].draft_ids)
        rejected += rounds[1].n_accepted < len(rounds[1].draft_ids)
        kept += rounds[1].n_accepted > 0
    target_joint = exact_joint(tiny_model, prompt_ids)
    assert len(target_joint) == 4 and sum(target_joint.values()) == pytest.approx(1.0, abs=1e-5)
    print(f"\nround 1: a draft token kept in {kept}/{N_DRAWS}, one rejected in {rejected}/{N_DRAWS}")
    assert drafted > N_DRAWS and kept > N_DRAWS // 10 and rejected > N_DRAWS // 10
    statistic = chi_square(counts, target_joint, N_DRAWS)
    print(f"\nchi-square {statistic:.2f} (critical {CHI2_CRITICAL_DF3}), rejected rounds {rejected}/{N_DRAWS}")
    assert statistic < CHI2_CRITICAL_DF3


def test_sampling_is_refused_where_the_shared_vocabulary_is_too_small(tiny_model, tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    words = {w: i for i, w in enumerate(["<unk>", "alpha", "beta", "gamma", "delta"] + [f"w{i}" for i in range(60)])}
    tok = Tokenizer(models.WordLevel(words, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    stranger = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<unk>")
    folder = save_tiny_model(tmp_path / "stranger", stranger, seed=1, bos_token_id=0, eos_token_id=0)
    engine = local_engine(tiny_model)
    spec = SpecConfig("draft-model", k=3, draft=str(folder))
    with pytest.raises(ConfigError, match="cross-tokenizer drafting can't sample here: the two tokenizers share"):
        run(engine, "hello", spec=spec, sampling=SamplingConfig(temperature=1.0, seed=0), max_new_tokens=4)
    _, _, greedy = run(engine, "hello", spec=spec, max_new_tokens=6)  # greedy drafts still go through text
    _, _, plain = run(engine, "hello", max_new_tokens=6)
    assert greedy.output_ids == plain.output_ids
