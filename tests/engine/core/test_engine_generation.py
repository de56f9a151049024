"""The generation loop's stops and state: cancellation, EOS, stop strings, the token budget, a full context,
and multi-turn chat reusing the KV prefix."""

from __future__ import annotations

import threading

import pytest

from engine.core.config import SpecConfig
from engine.core.events import GenerationFinished, RoundVerified
from engine.runtime import local_engine
from engine_testkit import check_round_invariants, run

PROMPT = "Tell me about speculative decoding."
SPECS = [SpecConfig(), SpecConfig("draft-model", k=4, draft="__same__"), SpecConfig("prompt-lookup", k=4)]
SPEC_IDS = ["none", "draft-model", "prompt-lookup"]


def resolve(spec, tiny_dir):
    return SpecConfig("draft-model", k=spec.k, draft=str(tiny_dir)) if spec.draft == "__same__" else spec


@pytest.fixture(scope="module")
def baseline(tiny_model):
    _, _, finished = run(local_engine(tiny_model), PROMPT, max_new_tokens=40)
    assert finished.stop_reason == "max-new-tokens"
    return finished


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_cancel_between_rounds_keeps_what_was_committed(tiny_model, tiny_dir, baseline, spec):
    spec = resolve(spec, tiny_dir)
    engine = local_engine(tiny_model)
    cancel = threading.Event()
    rounds, finished = [], None
    for event in engine.generate(PROMPT, spec=spec, max_new_tokens=40, cancel=cancel):
        if isinstance(event, RoundVerified):
            rounds.append(event)
            if len(rounds) == 3:
                cancel.set()
        elif isinstance(event, GenerationFinished):
            finished = event
    assert finished.stop_reason == "cancelled"
    assert len(rounds) == 3  # no round starts once the event is set
    committed = [t for r in rounds for t in r.committed_ids]
    assert list(finished.output_ids) == committed == list(baseline.output_ids[:len(committed)])
    assert finished.text == "".join(r.text for r in rounds)
    assert baseline.text.startswith(finished.text)
    check_round_invariants(rounds, finished)
    # the engine is usable again at once, and its caches are right
    _, _, again = run(engine, PROMPT, spec=spec, max_new_tokens=40)
    assert again.output_ids == baseline.output_ids


def test_cancel_before_the_first_round(tiny_engine):
    cancel = threading.Event()
    cancel.set()
    _, rounds, finished = run(tiny_engine, PROMPT, max_new_tokens=10, cancel=cancel)
    assert rounds == [] and finished.stop_reason == "cancelled" and finished.output_ids == ()


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_stops_at_eos(tiny_model, tiny_dir, baseline, spec):
    """Make a token of the known greedy output the EOS: generation stops right after it."""
    spec = resolve(spec, tiny_dir)
    out = list(baseline.output_ids)
    position = next(i for i in range(6, len(out)) if out[i] not in out[:i])
    engine = local_engine(tiny_model)
    engine.eos_ids = frozenset({out[position]})
    _, rounds, finished = run(engine, PROMPT, spec=spec, max_new_tokens=40)
    assert finished.stop_reason == "eos"
    assert list(finished.output_ids) == out[:position + 1]
    check_round_invariants(rounds, finished)


def test_eos_of_the_tokenizer_is_used(tiny_model, tiny_tokenizer):
    assert tiny_tokenizer.eos_token_id in local_engine(tiny_model).eos_ids


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_stops_at_a_stop_string(tiny_model, tiny_dir, baseline, spec):
    spec = resolve(spec, tiny_dir)
    text = baseline.text
    # a stop string from the middle of the known output, occurring there for the first time
    start = next(i for i in range(len(text) // 3, len(text) - 3) if text.find(text[i:i + 3]) == i
                 and text[i:i + 3].strip())
    stop = text[start:start + 3]
    _, rounds, finished = run(local_engine(tiny_model), PROMPT, spec=spec, max_new_tokens=40, stop_strings=(stop,))
    assert finished.stop_reason == "stop-string"
    assert stop not in finished.text
    assert text.startswith(finished.text)
    # The text ends where the stop string begins; only text already shown in an earlier round (part of a stop
    # string that spans rounds) may remain.
    assert start <= len(finished.text) < start + len(stop)
    assert "".join(r.text for r in rounds) == finished.text
    assert len(finished.output_ids) < len(baseline.output_ids)


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
@pytest.mark.parametrize("budget", [1, 2, 7])
def test_max_new_tokens(tiny_model, tiny_dir, baseline, spec, budget):
    spec = resolve(spec, tiny_dir)
    _, rounds, finished = run(local_engine(tiny_model), PROMPT, spec=spec, max_new_tokens=budget)
    assert finished.stop_reason == "max-new-tokens"
    assert finished.output_ids == baseline.output_ids[:budget]
    check_round_invariants(rounds, finished)


def test_context_full(tiny_model, tiny_tokenizer):
    context = tiny_model.context_length
    prompt = (tiny_tokenizer.encode("the lazy dog " * 200, add_special_tokens=False))[:context - 5]
    _, rounds, finished = run(local_engine(tiny_model), prompt, spec=SpecConfig("prompt-lookup", k=4),
                              max_new_tokens=50)
    assert finished.stop_reason == "context-full"
    assert len(finished.output_ids) == 5
    assert len(prompt) + len(finished.output_ids) == context


def test_multi_turn_reuses_the_kv_prefix(tiny_model):
    engine = local_engine(tiny_model)
    first = [{"role": "user", "content": "hello world, how are you?"}]
    started1, _, reply1 = run(engine, first, max_new_tokens=12)
    assert started1.reused_prefix_tokens == 0
    second = first + [{"role": "assistant", "content": reply1.text},
                      {"role": "user", "content": "Translate: the quick brown fox."}]
    started2, _, reply2 = run(engine, second, spec=SpecConfig("prompt-lookup", k=3), max_new_tokens=12)
    first_prompt = engine.prompt_ids(first)
    assert started2.reused_prefix_tokens >= len(first_prompt)
    assert started2.prompt_tokens == len(engine.prompt_ids(second))
    # reusing the cache changes nothing: a fresh engine gives the same second reply
    _, _, fresh = run(local_engine(tiny_model), second, max_new_tokens=12)
    assert reply2.output_ids == fresh.output_ids


def test_system_prompt_goes_through_the_template(tiny_model):
    engine = local_engine(tiny_model)
    with_system = engine.prompt_ids("hello", system="Be brief.")
    assert len(with_system) > len(engine.prompt_ids("hello"))
    assert "Be brief." in tiny_model.tokenizer.decode(with_system)


def test_stats_of_a_real_generation(tiny_model, tiny_draft_dir):
    spec = SpecConfig("draft-model", k=4, draft=str(tiny_draft_dir))
    _, rounds, finished = run(local_engine(tiny_model), PROMPT, spec=spec, max_new_tokens=30)
    stats = finished.stats
    drafting = [r for r in rounds if r.draft_ids]
    assert stats.drafting_rounds == len(drafting)
    assert stats.acceptance_rate == pytest.approx(sum(r.n_accepted for r in rounds)
                                                  / sum(len(r.draft_ids) for r in rounds))
    assert stats.mean_accepted_length == pytest.approx(len(finished.output_ids) / len(rounds))
    assert finished.stop_reason == "max-new-tokens"
    assert sum(stats.accept_length_histogram) == len(drafting)
    assert stats.k == 4


@pytest.mark.model
def test_default_model_multi_turn_and_eos(default_model):
    engine = local_engine(default_model)
    first = [{"role": "user", "content": "Reply with one word: what colour is the sky on a clear day?"}]
    started1, _, reply1 = run(engine, first, max_new_tokens=24)
    assert reply1.stop_reason == "eos"
    assert reply1.output_ids[-1] in engine.eos_ids
    assert "<|im_end|>" not in reply1.text and reply1.text.strip()
    second = first + [{"role": "assistant", "content": reply1.text},
                      {"role": "user", "content": "And at night?"}]
    started2, rounds, reply2 = run(engine, second, spec=SpecConfig("prompt-lookup", k=3), max_new_tokens=8)
    assert started2.reused_prefix_tokens >= len(engine.prompt_ids(first))
    assert started2.reused_prefix_tokens < started2.prompt_tokens
    check_round_invariants(rounds, reply2)


def test_draft_loading_reports_its_status(tiny_model, tiny_draft_dir):
    """A draft model is loaded on first use; the line that says so reaches the caller's on_status."""
    lines: list[str] = []
    engine = local_engine(tiny_model, on_status=lines.append)
    run(engine, "hello", spec=SpecConfig("draft-model", k=2, draft=str(tiny_draft_dir)), max_new_tokens=3)
    assert lines and lines[0] == f"Loading draft model {tiny_draft_dir}…"
    assert any(line.startswith("Loading tiny-draft") for line in lines[1:])  # the loader's own progress
    lines.clear()
    run(engine, "hello again", spec=SpecConfig("draft-model", k=2, draft=str(tiny_draft_dir)), max_new_tokens=3)
    assert lines == []  # loaded once


def test_a_method_the_backend_cannot_serve_is_refused_before_the_first_round(tiny_model):
    import dataclasses

    from engine.core.errors import ConfigError
    on_llama = dataclasses.replace(tiny_model, backend="llama.cpp")
    with pytest.raises(ConfigError, match="method early-exit needs the transformers backend"):
        local_engine(on_llama).generate("hello", spec=SpecConfig("early-exit", k=2))


def test_python_collections_leave_what_the_process_held_out_during_the_rounds(tiny_engine):
    """During a reply's rounds what the process held before it is frozen out of Python's collections (a full
    collection of a long session's objects took 50–100 ms, counted as a round's time where it landed); it is
    collectable again after the reply, or when the reply is abandoned."""
    import gc
    events = tiny_engine.generate("Hello", max_new_tokens=4)
    next(events)  # started
    next(events)  # the first round
    assert gc.get_freeze_count() > 0
    for _ in events:
        pass
    assert gc.get_freeze_count() == 0
    events = tiny_engine.generate("Hello", max_new_tokens=4)
    next(events), next(events)
    events.close()
    assert gc.get_freeze_count() == 0
