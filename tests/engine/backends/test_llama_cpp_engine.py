"""The speculative engine on the llama.cpp backend: greedy output equal to plain decoding token for token for
prompt-lookup and draft-model (on the built-in model, ≥ 10 prompts of different kinds × 48 tokens, and on a
tiny GGUF written here), sampling lossless (a chi-square on the emitted tokens against the target's exact
distribution, computed with the same runner), and the methods llama.cpp can't serve refused before the first
round. Skipped as a whole where llama-cpp-python is not installed."""

from __future__ import annotations

import pytest

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install llama-cpp-python==0.3.36)")

from engine.measure.compare import first_difference  # noqa: E402
from engine.core.config import SamplingConfig, SpecConfig  # noqa: E402
from engine.core.errors import ConfigError  # noqa: E402
from engine.models.load import load_model  # noqa: E402
from engine.runtime import local_engine  # noqa: E402
from engine_testkit import PROMPTS, check_round_invariants, chi_square, run, save_tiny_model  # noqa: E402
from engine_testkit import exact_joint as joint_under  # noqa: E402
from tests.fixtures.tiny_gguf import quantize, write_tiny_gguf  # noqa: E402

N_NEW = 48
# Ten kinds of prompt for the built-in model (the engine suite's five, and five more), each giving 48+ tokens:
# those that quote the prompt let prompt lookup draft long runs, open ones make it guess wrong often.
BUILTIN_PROMPTS = {**PROMPTS,
                   "explain": "Explain how a bicycle works to a child, in detail.",
                   "email": "Write an email to a landlord about a broken heater, with three paragraphs.",
                   "steps": "Describe the water cycle step by step.",
                   "pycode": "Write a Python function for binary search, with comments on every line.",
                   "story": "Continue the story: The lighthouse keeper had not seen a ship in forty days, until "
                            "one stormy night"}
TINY_PROMPTS = {"chat": "hello world, how are you?", "code": "def add(a, b):\n    return",
                "multilingual": "Café crème 😀 日本語のテキスト", "repeat": "the lazy dog. the lazy dog. the lazy"}


def assert_same_as_plain(finished, baseline, label: str) -> None:
    """Token for token; where it differs, say where (the evidence DESIGN.md asks for)."""
    at = first_difference(finished.output_ids, baseline.output_ids)
    assert at is None, f"{label}: first difference at new token {at}"
    assert finished.text == baseline.text and finished.stop_reason == baseline.stop_reason


# ------------------------------------------------------------------ built-in model

@pytest.fixture(scope="module")
def builtin_engine():
    from engine.core.errors import DefaultModelMissingError
    try:
        return local_engine(load_model("default", device="cpu", backend="llama.cpp"))
    except DefaultModelMissingError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def builtin_baselines(builtin_engine):
    out = {}
    for name, prompt in BUILTIN_PROMPTS.items():
        _, rounds, finished = run(builtin_engine, prompt, max_new_tokens=N_NEW)
        assert finished.stop_reason == "max-new-tokens" and len(finished.output_ids) == N_NEW, name
        check_round_invariants(rounds, finished)
        out[name] = finished
    return out


@pytest.mark.model
@pytest.mark.parametrize("spec", [SpecConfig("prompt-lookup", k=2), SpecConfig("prompt-lookup", k=5),
                                  SpecConfig("draft-model", k=4, draft="default")], ids=lambda s: s.label())
def test_builtin_speculative_greedy_equals_plain(builtin_engine, builtin_baselines, spec):
    drafted = accepted = 0
    for name, prompt in BUILTIN_PROMPTS.items():
        _, rounds, finished = run(builtin_engine, prompt, spec=spec, max_new_tokens=N_NEW)
        assert_same_as_plain(finished, builtin_baselines[name], f"{spec.label()} on {name!r}")
        check_round_invariants(rounds, finished)
        drafted += finished.stats.drafted_tokens
        accepted += finished.stats.accepted_tokens
    assert drafted > 0 and accepted > 0
    if spec.method == "draft-model":  # the model drafting for itself agrees with itself everywhere
        assert accepted == drafted
    else:
        assert accepted < drafted


@pytest.mark.model
def test_builtin_as_its_own_draft_shows_the_drafts_distribution(builtin_engine):
    """p_draft of every drafted token is the draft model's own probability (rows kept, not overwritten by
    the drafter's next pass): drafting for itself, it equals p_target."""
    spec = SpecConfig("draft-model", k=4, draft="default")
    _, rounds, _ = run(builtin_engine, BUILTIN_PROMPTS["steps"], spec=spec, max_new_tokens=24)
    drafted = [r for r in rounds if r.draft_ids]
    assert drafted
    for r in drafted:
        assert r.p_draft == pytest.approx(r.p_target, abs=1e-4)


@pytest.mark.model
def test_builtin_regenerating_gives_the_same_reply(builtin_engine, builtin_baselines):
    """The second time, the prompt is synced back to its last id instead of fed whole: same output."""
    _, _, again = run(builtin_engine, BUILTIN_PROMPTS["story"], max_new_tokens=N_NEW)
    assert_same_as_plain(again, builtin_baselines["story"], "regenerated")


@pytest.mark.model
def test_early_exit_is_refused_before_the_first_round(builtin_engine):
    with pytest.raises(ConfigError, match="transformers") as info:
        builtin_engine.generate("Hi", spec=SpecConfig("early-exit", k=3))
    assert "llama.cpp" in str(info.value) and "\n" not in str(info.value)


# ------------------------------------------------------------------ tiny GGUF

@pytest.fixture(scope="module")
def tiny_ggufs(tmp_path_factory, tiny_dir, tiny_tokenizer):
    """Q8_0 GGUFs of the tiny target, of a slightly noisy copy (drafts partly accepted), and of an unrelated
    model (seed 1: drafts often rejected)."""
    from transformers import LlamaForCausalLM
    folder = tmp_path_factory.mktemp("tiny-ggufs")
    paths = {}
    for name, kwargs in {"target": {}, "noisy": {"noise": 0.001}, "other": {"seed": 1}}.items():
        hf_dir = save_tiny_model(folder / f"{name}-hf", tiny_tokenizer, **{"seed": 0, **kwargs})
        f32 = write_tiny_gguf(folder / f"{name}-f32.gguf", LlamaForCausalLM.from_pretrained(hf_dir), tiny_tokenizer)
        paths[name] = quantize(f32, folder / f"{name}.gguf", "Q8_0")
    return paths


@pytest.fixture(scope="module")
def tiny_target(tiny_ggufs):
    return load_model(str(tiny_ggufs["target"]), device="cpu", backend="llama.cpp")


@pytest.mark.parametrize("draft", [None, "noisy", "target"])
@pytest.mark.parametrize("k", [1, 4])
def test_tiny_speculative_greedy_equals_plain(tiny_target, tiny_ggufs, draft, k):
    engine = local_engine(tiny_target)
    spec = SpecConfig("prompt-lookup", k=k) if draft is None else \
        SpecConfig("draft-model", k=k, draft=str(tiny_ggufs[draft]))
    drafted = accepted = 0
    for name, prompt in TINY_PROMPTS.items():
        _, _, baseline = run(engine, prompt, max_new_tokens=N_NEW)
        _, rounds, finished = run(engine, prompt, spec=spec, max_new_tokens=N_NEW)
        assert_same_as_plain(finished, baseline, f"{spec.label()} on {name!r}")
        check_round_invariants(rounds, finished)
        drafted += finished.stats.drafted_tokens
        accepted += finished.stats.accepted_tokens
    assert drafted > 0 and accepted > 0
    assert (accepted == drafted) == (draft == "target")


def test_tiny_noisy_draft_mixes_rejection_partial_and_full(tiny_target, tiny_ggufs):
    engine = local_engine(tiny_target)
    spec = SpecConfig("draft-model", k=4, draft=str(tiny_ggufs["noisy"]))
    n_accepted = set()
    for prompt in TINY_PROMPTS.values():
        _, rounds, _ = run(engine, prompt, spec=spec, max_new_tokens=N_NEW)
        n_accepted.update(r.n_accepted for r in rounds if len(r.draft_ids) == 4)
    assert 0 in n_accepted and 4 in n_accepted and n_accepted & {1, 2, 3}


# ------------------------------------------------------------------ sampling is lossless

N_DRAWS = 3000
SAMPLING = SamplingConfig(temperature=1.0, top_k=3)
# Chi-square critical value for 8 degrees of freedom (3 × 3 cells − 1) at p = 1e-6
CHI2_CRITICAL_DF8 = 44.81


def exact_joint(model, prompt_ids: list[int]) -> dict[tuple[int, int], float]:
    """The target's own joint of the first two new tokens under SAMPLING (engine_testkit.exact_joint)."""
    return joint_under(model, prompt_ids, SAMPLING)


@pytest.mark.usefixtures("engine_threads_for_torch")
def test_sampling_through_the_llama_cpp_runner_is_lossless(tiny_target, tiny_ggufs):
    """Draft-model sampling with an unrelated draft (many rejections, so the residual distribution does the
    work): the first two emitted tokens follow the target's joint distribution. The same statistic against
    the draft's own joint is far off, so the test has power at this many draws."""
    engine = local_engine(tiny_target)
    spec = SpecConfig("draft-model", k=3, draft=str(tiny_ggufs["other"]))
    prompt_ids = engine.prompt_ids(TINY_PROMPTS["chat"])
    counts: dict[tuple[int, int], int] = {}
    rejected = 0
    for seed in range(N_DRAWS):
        sampling = SamplingConfig(temperature=SAMPLING.temperature, top_k=SAMPLING.top_k, seed=seed)
        # a budget of k + 2 lets round 1 (after the prefill round) draft all k
        _, rounds, finished = run(engine, prompt_ids, spec=spec, sampling=sampling, max_new_tokens=spec.k + 2)
        pair = tuple(finished.output_ids[:2])
        counts[pair] = counts.get(pair, 0) + 1
        rejected += rounds[1].n_accepted < len(rounds[1].draft_ids)
    target_joint = exact_joint(tiny_target, prompt_ids)
    assert len(target_joint) == 9 and sum(target_joint.values()) == pytest.approx(1.0, abs=1e-5)
    assert rejected > N_DRAWS // 10  # the residual was drawn from often
    assert chi_square(counts, target_joint, N_DRAWS) < CHI2_CRITICAL_DF8
    draft_joint = exact_joint(load_model(str(tiny_ggufs["other"]), device="cpu", backend="llama.cpp"), prompt_ids)
    off = {cell: counts.get(cell, 0) for cell in draft_joint}
    assert sum((off[c] - p * N_DRAWS) ** 2 / (p * N_DRAWS) for c, p in draft_joint.items()) > CHI2_CRITICAL_DF8 * 5


# ------------------------------------------------------------------ drafts that can't draft

def test_a_gguf_draft_with_another_vocabulary_drafts_through_text(tiny_target):
    """The built-in model (another tokenizer) drafts for the tiny GGUF: cross-tokenizer drafting (it was refused,
    'their tokenizers differ'), the output the target's own."""
    from engine.models.sources import default_model_gguf
    from engine.core.errors import DefaultModelMissingError
    try:
        builtin = str(default_model_gguf())
    except DefaultModelMissingError as exc:
        pytest.skip(str(exc))
    engine = local_engine(tiny_target)
    for name, prompt in TINY_PROMPTS.items():
        _, _, plain = run(engine, prompt, max_new_tokens=24)
        for spec in (SpecConfig("draft-model", k=3, draft=builtin),
                     SpecConfig("prompt-lookup+draft-model", k=3, draft=builtin)):  # the model where no match
            started, rounds, crossed = run(engine, prompt, spec=spec, max_new_tokens=24)
            check_round_invariants(rounds, crossed)
            assert_same_as_plain(crossed, plain, f"{name} {spec.method}")
            assert any(r.draft_sources for r in rounds), (name, spec.method)
            assert "cross-tokenizer drafting" in " ".join(started.notes)


def test_a_draft_runs_on_its_targets_backend(tiny_target, tiny_ggufs, tiny_dir, tiny_model):
    """A GGUF draft of a GGUF target loads on llama.cpp too; a Hugging Face draft for a llama.cpp target, or a
    GGUF draft for a Hugging Face target, is refused before anything loads, with the way out."""
    engine = local_engine(tiny_target)
    assert engine.drafts.draft_model(str(tiny_ggufs["noisy"])).backend == "llama.cpp"
    with pytest.raises(ConfigError, match="is a Hugging Face model, but target runs on llama.cpp") as info:
        engine.generate("hello", spec=SpecConfig("draft-model", k=3, draft=str(tiny_dir)))
    assert "--backend transformers" in str(info.value)
    with pytest.raises(ConfigError, match="is a GGUF file, but .* is a Hugging Face model"):
        local_engine(tiny_model).generate("hello", spec=SpecConfig("draft-model", k=3, draft=str(tiny_ggufs["noisy"])))


def test_the_started_event_names_the_backend_and_device(tiny_target):
    started, _, finished = run(local_engine(tiny_target), "hello", max_new_tokens=4)
    assert started.device == "llama.cpp · CPU" and started.dtype == "Q8_0"
    assert len(finished.output_ids) == 4


def test_a_recurrent_model_runs_plain_decoding_only(tmp_path, tiny_tokenizer):
    from tests.fixtures.tiny_gguf import write_tiny_mamba_gguf
    mamba = load_model(str(write_tiny_mamba_gguf(tmp_path / "mamba.gguf", tiny_tokenizer)), device="cpu")
    assert mamba.backend == "llama.cpp" and not mamba.supports_rollback
    engine = local_engine(mamba)
    _, _, first = run(engine, "hello world", max_new_tokens=12)
    _, _, again = run(engine, "hello world", max_new_tokens=12)  # synced by emptying and refeeding
    assert len(first.output_ids) == 12 and again.output_ids == first.output_ids
    with pytest.raises(ConfigError, match="keeps no per-token snapshots of it for 'mamba'.*plain decoding"):
        engine.generate("hello", spec=SpecConfig("prompt-lookup", k=3))


# ------------------------------------------------------------------ backend= in a SPEC

def test_a_spec_names_its_backend():
    from engine.core.config import parse_spec
    for text in ("prompt-lookup:k=4,backend=transformers", "none:backend=llama.cpp",
                 "draft-model:k=3,draft=default,backend=llama.cpp"):
        assert parse_spec(text).label() == text and parse_spec(parse_spec(text).label()) == parse_spec(text)
    assert parse_spec("prompt-lookup:k=4,backend=llama.cpp").with_k(2).backend == "llama.cpp"
    with pytest.raises(ConfigError, match="method early-exit needs the transformers backend, not llama.cpp"):
        parse_spec("early-exit:k=3,backend=llama.cpp")
    with pytest.raises(ConfigError, match="unknown backend 'onnx'"):
        parse_spec("none:backend=onnx")


def test_the_engine_refuses_a_spec_for_another_backend(tiny_target):
    spec = SpecConfig("prompt-lookup", k=3, backend="transformers")
    with pytest.raises(ConfigError, match="asks for the transformers backend, but target runs on llama.cpp"):
        local_engine(tiny_target).generate("hello", spec=spec)
    _, _, finished = run(local_engine(tiny_target), "hello", spec=SpecConfig("prompt-lookup", k=3, backend="llama.cpp"),
                         max_new_tokens=4)
    assert len(finished.output_ids) == 4
