"""Combined methods `lookup+model` (issue 24, item 4; engine.core.methods.combined_spec, engine.drafters.combined):
the lookup drafts where it has a match, the model otherwise, each round named by its proposer; greedy output is
plain decoding's; a sampled round is verified against its own proposer's distribution; per-drafter acceptance in the stats; bad combinations refused in
words; the combinations in the menus."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

import engine.drafters  # noqa: F401  (registers the methods)
from engine.core.config import SamplingConfig, SpecConfig, parse_spec
from engine.core.errors import ConfigError
from engine.core.methods import method_spec, methods
from engine.drafters.combined import MODEL_BUCKET, CombinedDrafter
from engine.runtime import local_engine
from engine_testkit import ScriptedDrafter, check_round_invariants, factory_for, run

PROMPTS = ["hello world, hello world, hello", "def add(a, b):\n    return a + b\ndef add(", "Café crème 😀 日本語",
           "one two three four one two three four one", "Translate: Bonjour, ça va?"]


def test_the_lookup_drafts_where_it_matches_and_the_model_otherwise():
    lookup = ScriptedDrafter([[5, 6], [], [7], []])
    lookup.name = "prompt-lookup"
    model = ScriptedDrafter([[1, 2, 3], [4]])
    model.name = "draft-model"
    combined = CombinedDrafter(lookup, model)
    names, buckets = [], []
    for _ in range(4):
        proposal = combined.propose([1, 2, 3], 3)
        names.append(combined.name)
        buckets.append(proposal.bucket)
        combined.observe(len(proposal.ids))
    assert names == ["prompt-lookup", "draft-model", "prompt-lookup", "draft-model"]
    assert lookup.observed == [2, 1] and model.observed == [3, 1]  # each told about its own proposals only
    assert len(model.contexts) == 2  # the model drafter is asked only when the lookup has nothing
    assert buckets[1] >= MODEL_BUCKET and buckets[0] < MODEL_BUCKET


def test_greedy_equals_plain_on_every_prompt_and_both_drafters_draft(tiny_model, tiny_draft_dir):
    specs = [SpecConfig("prompt-lookup+draft-model", k=3, draft=str(tiny_draft_dir)),
             SpecConfig("prompt-lookup+early-exit", k=2, params={"layers": 2, "ngram_max": 2})]
    for spec in specs:
        seen: Counter = Counter()
        for prompt in PROMPTS:
            _, _, plain = run(local_engine(tiny_model), prompt, max_new_tokens=48)
            _, rounds, finished = run(local_engine(tiny_model), prompt, spec=spec, max_new_tokens=48)
            assert finished.output_ids == plain.output_ids, (spec.label(), prompt)
            check_round_invariants(rounds, finished)
            seen.update(r.drafter for r in rounds if r.draft_ids)
            by_drafter = {name: (d, a) for name, _r, d, a in finished.stats.by_drafter}
            assert sum(d for d, _ in by_drafter.values()) == finished.stats.drafted_tokens
            assert sum(a for _, a in by_drafter.values()) == finished.stats.accepted_tokens
            for name, (drafted, accepted) in by_drafter.items():
                assert drafted == sum(len(r.draft_ids) for r in rounds if r.drafter == name)
                assert accepted == sum(r.n_accepted for r in rounds if r.drafter == name)
        second = spec.info.parts[1]
        assert seen["prompt-lookup"] > 0 and seen[second] > 0, (spec.label(), seen)


def test_sampled_rounds_carry_each_drafters_own_distribution(tiny_model, tiny_draft_dir):
    """Sampling stays exact round by round because each round is verified against the distribution its own
    proposer drafted from: a lookup's guesses one-hot (no p_draft), the model's with its probabilities; the
    seeded reply is reproducible. (Each kind of round is shown lossless by the chi-square tests of
    test_engine_sampling and of the methods themselves.)"""
    spec = SpecConfig("prompt-lookup+draft-model", k=3, draft=str(tiny_draft_dir))
    sampling = SamplingConfig(temperature=0.2, seed=4)  # a tiny random model repeats itself at a low temperature
    outputs, kinds = [], Counter()
    for _ in range(2):
        _, rounds, finished = run(local_engine(tiny_model), PROMPTS[3], spec=spec, sampling=sampling,
                                  max_new_tokens=40)
        check_round_invariants(rounds, finished)
        outputs.append(finished.output_ids)
        for r in rounds:
            if r.draft_ids:
                kinds[r.drafter] += 1
                if r.drafter == "prompt-lookup":
                    assert all(p is None for p in r.p_draft)
                else:
                    assert all(p is not None and 0 < p <= 1 for p in r.p_draft)
    assert outputs[0] == outputs[1]
    assert kinds["prompt-lookup"] and kinds["draft-model"], kinds


def test_bad_combinations_are_refused_in_words():
    for text, words in [("draft-model+prompt-lookup:k=2,draft=x", "drafts from the text alone"),
                        ("prompt-lookup+none:k=2", "drafts with a model or head"),
                        ("prompt-lookup+prompt-lookup:k=2", "drafts with a model or head"),
                        ("prompt-lookup+draft-model+early-exit:k=2,draft=x", "joins two methods"),
                        ("prompt-lookup+nothing:k=2", "unknown method 'nothing'"),
                        ("prompt-lookup+draft-model:k=2", "needs a draft model")]:
        with pytest.raises(ConfigError, match=words):
            parse_spec(text)
    with pytest.raises(ConfigError, match="ngram sizes|n-gram sizes"):
        parse_spec("prompt-lookup+early-exit:k=2,ngram_min=3,ngram_max=2")


def test_the_combinations_in_the_menus_and_their_parameters():
    offered = [m.name for m in methods() if m.offered]
    assert "prompt-lookup+draft-model" in offered and "prompt-lookup+early-exit" in offered
    info = method_spec("prompt-lookup+early-exit")
    assert [p.name for p in info.params] == ["ngram_max", "ngram_min", "layers"]
    assert info.backends == ("transformers",) and info.parts == ("prompt-lookup", "early-exit")
    assert method_spec("prompt-lookup+draft-model").needs_draft
    spec = parse_spec("prompt-lookup+early-exit:k=3,layers=2,ngram_max=2")
    assert parse_spec(spec.label()) == spec
    assert dataclasses.replace(spec, k=4).label() == "prompt-lookup+early-exit:k=4,ngram_max=2,layers=2"


def test_a_learning_lookup_learns_through_the_combination():
    class Learner(ScriptedDrafter):
        learned: list = []

        def learn(self, reply_ids):
            self.learned.append(list(reply_ids))
    lookup, model = Learner([]), ScriptedDrafter([])
    CombinedDrafter(lookup, model).learn([4, 5, 6])
    assert lookup.learned == [[4, 5, 6]]
