"""Combined methods `lookup+model` (issue 24, item 4; engine.core.methods.combined_spec, engine.drafters.combined):
the lookup drafts where it has a match, the model otherwise, each round named by its proposer; greedy output is
plain decoding's; each sampled round emits what the target would (a chi-square against its exact row, with a broken
combination as the control that it catches); per-drafter acceptance in the stats; bad combinations refused in
words; the combinations in the menus."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest
import torch

import engine.drafters  # noqa: F401  (registers the methods)
from engine.core.config import SamplingConfig, SpecConfig, parse_spec
from engine.core.drafting import Proposal
from engine.core.errors import ConfigError
from engine.core.loop import verify_pass
from engine.core.methods import method_spec, methods
from engine.core.sampling import make_generator, probabilities
from engine.drafters.combined import MODEL_BUCKET, CombinedDrafter
from engine.models.load import load_model
from engine.runtime import local_engine
from engine_testkit import ScriptedDrafter, check_round_invariants, factory_for, run

CRITICAL = 41.30  # chi-square, 10 degrees of freedom, p = 1e-5 (scipy.stats.chi2.isf(1e-5, 10)): seeded, so fixed
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


class _Overconfident(CombinedDrafter):
    """A broken combination for the control: the model's drafts go out with rows that claim certainty they
    don't have (p_draft 1 on each drafted token, a distribution the token wasn't drawn from), which biases the
    output towards the drafter's picks."""

    def propose(self, context_ids, k):
        proposal = super().propose(context_ids, k)
        if proposal.p_draft is not None:
            rows = proposal.p_draft.clone().zero_()
            rows[range(len(proposal.ids)), proposal.ids] = 1.0
            return Proposal(proposal.ids, rows, proposal.bucket)
        return proposal


def _first_emitted(target, drafter, context: list[int], sampling, n: int) -> tuple[Counter, Counter, torch.Tensor]:
    """n rounds from one context, each drafted afresh by `drafter` and verified (engine.core.loop.verify_pass):
    the counts of the first token each round emits, of the drafter that drafted, and the target's exact
    distribution of that token (its row at the context)."""
    runner = target.new_runner()
    generator = make_generator(torch.device("cpu"), 0)
    drafter.begin(sampling, generator)
    with torch.inference_mode():
        exact = probabilities(runner.forward(context, 1)[-1:], sampling)[0]
    emitted: Counter = Counter()
    drafters: Counter = Counter()
    for _ in range(n):
        proposal = drafter.propose(context, 3)
        drafters[drafter.name] += 1
        feed = runner.sync(context)
        checked = verify_pass(runner, feed, proposal, sampling, generator)
        drafter.observe(checked.n_accepted)
        emitted[proposal.ids[0] if checked.n_accepted else checked.target_id] += 1
    runner.release()
    return emitted, drafters, exact


def _chi_square(counts: Counter, exact: torch.Tensor, bins: int = 10) -> float:
    """Pearson's statistic of `counts` against `exact` over its `bins` likeliest tokens and the rest."""
    n = sum(counts.values())
    top = torch.topk(exact, bins).indices.tolist()
    observed = [counts[t] for t in top] + [n - sum(counts[t] for t in top)]
    expected = [float(exact[t]) * n for t in top] + [n * (1.0 - float(exact[top].sum()))]
    return sum((o - e) ** 2 / e for o, e in zip(observed, expected) if e > 0)


def test_each_round_emits_what_the_target_would_and_the_test_catches_a_broken_one(tiny_model, tiny_draft_dir):
    """Lossless sampling, round by round: whichever drafter proposes (the lookup on a context where it matches,
    the model where it doesn't), the first token a round emits follows the target's own distribution there."""
    sampling = SamplingConfig(temperature=0.6, seed=0)
    spec = SpecConfig("prompt-lookup+draft-model", k=3, draft=str(tiny_draft_dir))
    draft = load_model(str(tiny_draft_dir), device="cpu", dtype="float32")
    repeated = tiny_model.tokenizer.encode("one two three four one two three", add_special_tokens=False)
    fresh = tiny_model.tokenizer.encode("Café crème 😀", add_special_tokens=False)
    n = 1500
    for context, who in ((repeated, "prompt-lookup"), (fresh, "draft-model")):
        drafter = spec.info.build(spec, tiny_model, draft, None)
        emitted, drafters, exact = _first_emitted(tiny_model, drafter, context, sampling, n)
        assert set(drafters) == {who}, drafters
        assert _chi_square(emitted, exact) < CRITICAL, (who, _chi_square(emitted, exact))
    real = spec.info.build(spec, tiny_model, draft, None)
    emitted, _, exact = _first_emitted(tiny_model, _Overconfident(real.lookup, real.model), fresh, sampling, n)
    assert _chi_square(emitted, exact) > CRITICAL


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
