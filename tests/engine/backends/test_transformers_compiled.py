"""--compile on the transformers backend (engine.backends.transformers_static): the StaticRunner's static KV cache,
rolled back by position, gives the eager runner's logits after any rollback, sync or reset, and the Engine on it
decodes what plain eager decoding does (greedy token for token, sampling at a seed); models it can't serve keep
the eager runner, with the reason. Correctness is checked uncompiled (torch.compile on a CPU takes a minute a
width); one test compiles a one-layer model, width 1, and checks the same."""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch

from engine.backends.transformers import TransformersRunner
from engine.backends.transformers_static import StaticRunner, static_refusal, static_runner_factory
from engine.core.config import SamplingConfig, SpecConfig
from engine.core.errors import PromptTooLongError
from engine.models.load import load_model
from engine.runtime import local_engine
from engine_testkit import run, save_tiny_hybrid_model, tiny_config

N_NEW = 24
PROMPT = "the lazy dog. the lazy dog. the lazy"
ATOL = 1e-4  # float32: the static cache's masked attention over all positions sums in another order


def static_twin(loaded, lines: list[str] | None = None, context_length: int | None = None):
    """The loaded model with StaticRunners (uncompiled) instead of eager ones."""
    length = context_length or loaded.context_length
    say = lines.append if lines is not None else (lambda line: None)
    return dataclasses.replace(loaded, context_length=length,
                               runner_factory=lambda: StaticRunner(loaded.model, None, length, say))


def static_drafts(name, **options):
    return static_twin(load_model(name, **options))


@pytest.fixture(scope="module")
def static_model(tiny_model):
    return static_twin(tiny_model)


def logits_of(runner, ids: list[int], n_logits: int = 1) -> torch.Tensor:
    with torch.inference_mode():
        return runner.forward(ids, n_logits).clone()


def eager_logits(model, ids: list[int], n_logits: int = 1) -> torch.Tensor:
    return logits_of(TransformersRunner(model.model), ids, n_logits)


def test_rollback_into_a_pass_then_other_ids_gives_the_eager_logits(static_model):
    runner = static_model.new_runner()
    assert isinstance(runner, StaticRunner)
    prompt = list(range(5, 25))
    logits_of(runner, prompt)
    logits_of(runner, [40, 41, 42, 43, 44], 5)
    runner.rollback(len(prompt) + 2)  # into the middle of the last pass: its last 3 positions go stale
    assert int(runner.static_cache.get_seq_length()) == len(runner.ids) == len(prompt) + 2
    got = logits_of(runner, [7, 8, 9], 3)
    want = eager_logits(static_model, prompt + [40, 41, 7, 8, 9], 3)
    torch.testing.assert_close(got, want, atol=ATOL, rtol=0)


def test_random_rollbacks_and_passes_track_a_fresh_eager_runner(static_model):
    rng = random.Random(0)
    runner = static_model.new_runner()
    for step in range(12):
        if runner.ids and step % 2:
            runner.rollback(rng.randrange(1, len(runner.ids) + 1))
        new_ids = [rng.randrange(3, 390) for _ in range(rng.randrange(1, 6))]
        got = logits_of(runner, new_ids, len(new_ids))
        torch.testing.assert_close(got, eager_logits(static_model, runner.ids, len(new_ids)), atol=ATOL, rtol=0)


def test_sync_keeps_the_common_prefix_and_reset_starts_over(static_model):
    runner = static_model.new_runner()
    first = list(range(10, 30))
    logits_of(runner, runner.sync(first))
    second = first[:12] + [100, 101, 102]
    feed = runner.sync(second)
    assert feed == [100, 101, 102] and runner.ids == first[:12]
    torch.testing.assert_close(logits_of(runner, feed), eager_logits(static_model, second), atol=ATOL, rtol=0)
    runner.reset()
    assert runner.ids == [] and runner.sync(second) == second
    torch.testing.assert_close(logits_of(runner, second), eager_logits(static_model, second), atol=ATOL, rtol=0)
    runner.release()
    assert runner.static_cache is None
    torch.testing.assert_close(logits_of(runner, second), eager_logits(static_model, second), atol=ATOL, rtol=0)


def test_context_overflow_is_prompt_too_long_and_leaves_the_runner_usable(tiny_model):
    small = static_twin(tiny_model, context_length=16)
    runner = small.new_runner()
    logits_of(runner, list(range(3, 13)))
    with pytest.raises(PromptTooLongError):
        logits_of(runner, list(range(3, 10)))
    assert len(runner.ids) == 10
    torch.testing.assert_close(logits_of(runner, [50]), eager_logits(small, list(range(3, 13)) + [50]),
                               atol=ATOL, rtol=0)
    with pytest.raises(PromptTooLongError):
        run(local_engine(small), list(range(3, 30)), max_new_tokens=2)


@pytest.fixture(scope="module")
def baseline(tiny_model):
    _, _, finished = run(local_engine(tiny_model), PROMPT, max_new_tokens=N_NEW)
    return list(finished.output_ids)


@pytest.mark.parametrize("spec", [SpecConfig(), SpecConfig("prompt-lookup", k=3),
                                  SpecConfig("draft-model", k=3, draft="__draft__"),
                                  SpecConfig("early-exit", k=3, params={"layers": 2})],
                         ids=["none", "prompt-lookup", "draft-model", "early-exit"])
def test_greedy_through_the_engine_equals_plain_eager_decoding(static_model, baseline, tiny_draft_dir, spec):
    if spec.draft == "__draft__":
        spec = SpecConfig("draft-model", k=3, draft=str(tiny_draft_dir))
    engine = local_engine(static_model, draft_loader=static_drafts)
    _, rounds, finished = run(engine, PROMPT, spec=spec, max_new_tokens=N_NEW)
    assert list(finished.output_ids) == baseline
    assert isinstance(engine.runner, StaticRunner) and not engine.runner.eager_reason
    if spec.method == "draft-model":
        assert isinstance(engine.drafts._drafter.runner, StaticRunner)
    _, _, again = run(engine, PROMPT, spec=spec, max_new_tokens=N_NEW)  # a second turn: synced by prefix
    assert list(again.output_ids) == baseline


def test_sampling_at_a_seed_equals_eager_sampling(tiny_model, static_model):
    sampling = SamplingConfig(temperature=0.9, seed=7)
    spec = SpecConfig("prompt-lookup", k=3)
    _, _, eager = run(local_engine(tiny_model), PROMPT, spec=spec, sampling=sampling, max_new_tokens=N_NEW)
    _, _, static = run(local_engine(static_model), PROMPT, spec=spec, sampling=sampling, max_new_tokens=N_NEW)
    assert static.output_ids == eager.output_ids


class RecordingForward:
    """Stands in for CompiledForward (whose compiling takes minutes on a CPU): runs the model's own forward and
    records the widths it was given."""

    def __init__(self, model) -> None:
        self.model, self.widths, self.seconds, self.failed = model, [], {}, ""

    def __call__(self, input_ids, cache):
        self.widths.append(input_ids.shape[1])
        self.seconds[input_ids.shape[1]] = 0.0
        return self.model(input_ids=input_ids, cache=cache, use_cache=True).logits[0]


def test_reserve_rollback_warms_up_each_width_before_the_next_pass_and_leaves_the_cache_as_it_was(static_model):
    lines: list[str] = []
    compiled = RecordingForward(static_model.model)
    runner = StaticRunner(static_model.model, compiled, static_model.context_length, lines.append)
    runner.reserve_rollback(4)  # nothing compiles yet: the drafter, built next, may want the eager runner
    assert compiled.widths == []
    prompt = list(range(5, 25))
    got = logits_of(runner, prompt)  # the warm-up (widths 1…4 after an eager allocating pass), then the prompt
    assert compiled.widths == [1, 2, 3, 4] and any("widths 1…4" in line for line in lines)
    torch.testing.assert_close(got, eager_logits(static_model, prompt), atol=ATOL, rtol=0)
    got = logits_of(runner, [40, 41, 42], 3)  # a verify pass of width 3: compiled
    assert compiled.widths[-1] == 3
    torch.testing.assert_close(got, eager_logits(static_model, prompt + [40, 41, 42], 3), atol=ATOL, rtol=0)
    runner.reserve_rollback(4)  # compiled already: no second warm-up
    logits_of(runner, [43])
    assert compiled.widths[4:] == [3, 1]


def test_a_runner_asked_for_hidden_states_runs_eager_with_the_reason(static_model):
    lines: list[str] = []
    runner = static_twin(static_model, lines).new_runner()
    logits_of(runner, [5, 6, 7])
    runner.record_outputs()  # what MTP, EAGLE and assistant drafters ask of their target
    assert "record_outputs" in runner.eager_reason and any("runs eager" in line for line in lines)
    assert runner.static_cache is None and runner.ids == []
    got = logits_of(runner, [5, 6, 7, 8])
    assert runner.cache is not None and runner.hidden.rows(0).shape[0] == 4
    torch.testing.assert_close(got, eager_logits(static_model, [5, 6, 7, 8]), atol=ATOL, rtol=0)


def test_a_hybrid_model_keeps_the_eager_runner_with_the_reason(tmp_path, tiny_tokenizer):
    folder = save_tiny_hybrid_model(tmp_path / "hybrid", tiny_tokenizer)
    lines: list[str] = []
    model = load_model(str(folder), device="cpu", dtype="float32", progress=lines.append, compile=True)
    assert "LinearAttention" in static_refusal(model.model, model.device)
    assert type(model.new_runner()) is TransformersRunner
    assert any(line.startswith("--compile:") and "runs eager" in line for line in lines)


def test_a_sliding_window_model_is_refused_a_static_cache(tiny_tokenizer):
    from transformers import LlamaForCausalLM
    config = tiny_config(tiny_tokenizer, num_hidden_layers=2, layer_types=["sliding_attention", "full_attention"],
                         sliding_window=8)
    model = LlamaForCausalLM(config).eval()
    assert "SlidingWindow" in static_refusal(model, torch.device("cpu"))
    assert static_refusal(LlamaForCausalLM(tiny_config(tiny_tokenizer, num_hidden_layers=1)), torch.device("cpu")) == ""


@pytest.mark.slow
def test_compiled_width_one_passes_give_the_eager_logits(tiny_tokenizer):
    """The one test that compiles (a one-layer model, width 1; a minute or two on a CPU): rollback and a new
    runner on a fresh cache reuse the graph, no second compile."""
    from transformers import LlamaForCausalLM
    torch.manual_seed(0)
    model = LlamaForCausalLM(tiny_config(tiny_tokenizer, num_hidden_layers=1)).eval()
    lines: list[str] = []
    factory, length, refusal = static_runner_factory(model, torch.device("cpu"), 256, "tiny", lines.append)
    assert refusal == "" and length == 256
    runner = factory()
    prompt = list(range(5, 20))
    ids = list(prompt)
    logits_of(runner, prompt)  # eager: allocates the cache
    for token in (40, 41, 42):
        ids.append(token)
        torch.testing.assert_close(logits_of(runner, [token]), eager_logits_on(model, ids), atol=ATOL, rtol=0)
    runner.rollback(len(prompt) + 1)
    torch.testing.assert_close(logits_of(runner, [77]), eager_logits_on(model, ids[:len(prompt) + 1] + [77]),
                               atol=ATOL, rtol=0)
    assert runner.compiled.seconds.keys() == {1} and not runner.compiled.failed
    second = factory()
    second.reserve_rollback(1)  # width 1 is compiled: no warm-up
    logits_of(second, prompt)
    torch.testing.assert_close(logits_of(second, [40]), eager_logits_on(model, prompt + [40]), atol=ATOL, rtol=0)
    assert sum("Compiled verify width" in line for line in lines) == 1, lines


def eager_logits_on(model, ids: list[int]) -> torch.Tensor:
    return logits_of(TransformersRunner(model), ids)
