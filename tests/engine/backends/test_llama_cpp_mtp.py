"""The 2026 models on llama.cpp, on tiny random GGUFs written here (tests/fixtures/tiny_gguf.py): a Qwen 3.5-style
hybrid (Gated DeltaNet + full attention) speculates, rolled back through llama.cpp's per-token state snapshots
(the verifying target) or a checkpoint and recompute (a draft model); its MTP head drafts (`mtp`), inside the
GGUF or in an mtp-*.gguf beside it. Greedy output equals plain decoding token for token, forced full
acceptance and rejection at position 0 leave both contexts (the target's and the MTP head's) as a fresh one
would be, sampling stays lossless, and every bad input is one clear line. Skipped where llama-cpp-python is
not installed."""

from __future__ import annotations

import random

import pytest
import torch

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install llama-cpp-python==0.3.36)")

from engine.backends import llama_cpp as backend  # noqa: E402
from engine.backends.llama_cpp_mtp import MtpContext, MtpHead  # noqa: E402
from engine.core.config import SamplingConfig, SpecConfig  # noqa: E402
from engine.core.errors import ConfigError, ModelLoadError  # noqa: E402
from engine.drafters import make_drafter  # noqa: E402
from engine.models.load import load_model  # noqa: E402
from engine.runtime import local_engine  # noqa: E402
from engine_testkit import SteeredDrafter, check_round_invariants, random_prompt, run  # noqa: E402
from tests.fixtures.tiny_gguf import QWEN35_SHAPE, write_qwen35_gguf, write_qwen35_sidecar  # noqa: E402

N_NEW = 40


@pytest.fixture(scope="module")
def files(tmp_path_factory, tiny_tokenizer):
    folder = tmp_path_factory.mktemp("qwen35")
    for name in ("inside", "split", "hybrid"):
        (folder / name).mkdir()
    inside = write_qwen35_gguf(folder / "inside" / "tiny-qwen35-mtp.gguf", tiny_tokenizer)
    target, sidecar = write_qwen35_sidecar(folder / "split" / "tiny-qwen35.gguf", tiny_tokenizer)
    hybrid = write_qwen35_gguf(folder / "hybrid" / "tiny-hybrid.gguf", tiny_tokenizer, mtp=False, seed=3,
                               trunk_scale=1.0)
    return {"inside": inside, "split": target, "sidecar": sidecar, "hybrid": hybrid, "folder": folder}


@pytest.fixture(scope="module")
def models(files):
    return {name: load_model(str(files[name]), device="cpu") for name in ("inside", "split", "hybrid")}


prompt = random_prompt


@pytest.fixture(scope="module")
def baselines(models):
    out = {}
    for name, model in models.items():
        engine = local_engine(model)
        out[name] = {seed: run(engine, prompt(seed), max_new_tokens=N_NEW)[2] for seed in (1, 2)}
    return out


def assert_equal(finished, baseline, label):
    assert list(finished.output_ids) == list(baseline.output_ids), label


# ------------------------------------------------------------------ loading

def test_the_fixtures_load_as_llama_cpp_describes_them(models, files):
    inside, split, hybrid = (models[n].native for n in ("inside", "split", "hybrid"))
    assert inside.recurrent and inside.supports_rollback and inside.n_nextn == 1
    assert split.n_nextn == 0 and hybrid.n_nextn == 0 and hybrid.recurrent and hybrid.supports_rollback
    assert inside.n_layers == QWEN35_SHAPE["n_layer"]  # the trunk: the nextn block is not counted
    head = MtpHead(split)
    assert head.sidecar == files["sidecar"] and head.n_heads == 1 and not head.chained
    head.release()


# ------------------------------------------------------------------ greedy equals plain

@pytest.mark.parametrize("where", ["inside", "split"])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_mtp_greedy_equals_plain(models, baselines, where, k):
    engine = local_engine(models[where])
    for seed in (1, 2):
        started, rounds, finished = run(engine, prompt(seed), spec=SpecConfig("mtp", k=k), max_new_tokens=N_NEW)
        assert_equal(finished, baselines[where][seed], f"mtp k={k} {where} seed {seed}")
        check_round_invariants(rounds, finished)
        stats = finished.stats
        assert stats.drafted_tokens > 0 and 0 < stats.accepted_tokens < stats.drafted_tokens
        assert len(stats.per_position_acceptance) == k
    note = " ".join(started.notes)
    assert "MTP on llama.cpp: 1 head" in note and ("beside the model" in note) == (where == "split")
    assert "re-applied on its own guess" in note


def test_the_sidecar_drafts_as_the_layer_inside_does(models):
    """The same head split off into mtp-*.gguf: the same drafts, round for round."""
    runs = [run(local_engine(models[w]), prompt(1), spec=SpecConfig("mtp", k=3), max_new_tokens=N_NEW)[1]
            for w in ("inside", "split")]
    assert [r.draft_ids for r in runs[0]] == [r.draft_ids for r in runs[1]]


@pytest.mark.parametrize("where", ["inside", "split"])
def test_after_release_the_head_drafts_from_the_new_generations_states(models, where):
    """Engine.release() between runs (every compare and bench run starts so) frees the head's context and stops
    it reading the target's states; the next generation reads them again and drafts exactly as a fresh engine's
    does (before, it drafted from the last generation's states, then read past them)."""
    spec = SpecConfig("mtp", k=3)
    fresh = run(local_engine(models[where]), prompt(2), spec=spec, max_new_tokens=N_NEW)[1]
    engine = local_engine(models[where])
    run(engine, prompt(1)[:6], spec=spec, max_new_tokens=4)
    engine.release()
    again = run(engine, prompt(2), spec=spec, max_new_tokens=N_NEW)[1]
    assert [r.draft_ids for r in again] == [r.draft_ids for r in fresh]


@pytest.mark.parametrize("method", ["prompt-lookup", "draft-model"])
def test_a_hybrid_target_speculates_losslessly(models, baselines, files, method):
    # draft-model: another hybrid drafts, so its runner rolls back by checkpoint and recompute
    spec = SpecConfig(method, k=3, draft=str(files["inside"]) if method == "draft-model" else None)
    engine = local_engine(models["hybrid"])
    repeat = prompt(1) * 3  # prompt lookup finds matches
    base = run(engine, repeat, max_new_tokens=N_NEW)[2]
    for ids, baseline in ((repeat, base), (prompt(2), baselines["hybrid"][2])):
        started, rounds, finished = run(engine, ids, spec=spec, max_new_tokens=N_NEW)
        assert_equal(finished, baseline, spec.label())
        check_round_invariants(rounds, finished)
        assert finished.stats.drafted_tokens > 0
        assert started.rollback.startswith("Recurrent state: llama.cpp keeps 4 per-token snapshots of it (")
    cost = engine.runner.rollback_cost()
    assert cost["snapshots"] == 4 and cost["snapshot_bytes"] > 10_000  # k + 1 per-token snapshots
    if spec.method == "draft-model":
        draft_cost = engine.drafts._drafter.runner.rollback_cost()
        assert draft_cost["snapshots"] == 0 and draft_cost["restores"] > 0


def test_the_drafters_take_in_the_prompt_in_the_prefill_round(models, files):
    """The MTP head's cache and a draft model's take in the prompt during the first (prefill) round, in the time to
    the first token (as llama-server's draft-mtp and draft-simple do in its prompt processing): the first decoding
    round drafts from one new entry, not the whole prompt."""
    ids = prompt(1)
    for spec in (SpecConfig("mtp", k=3), SpecConfig("draft-model", k=3, draft=str(files["inside"]))):
        engine = local_engine(models["inside"])
        events = engine.generate_ids(ids, spec=spec, max_new_tokens=N_NEW)
        next(events)  # started
        prefill = next(events)
        drafter = engine.drafts._drafter
        if spec.method == "mtp":
            assert drafter.context.attached._seen == ids  # an entry per prompt position, before any draft
        else:
            assert drafter.runner.ids == ids  # the prompt fed; the first token is fed by the first draft
        assert prefill.index == 0 and prefill.draft_seconds > 0  # its time is the prefill round's
        first = next(events)
        assert first.draft_ids  # and the next round drafts at once
        for _ in events:
            pass


def test_plain_decoding_on_a_recurrent_target_keeps_no_checkpoint(models, baselines):
    """A plain pass is never cut back, so the target saves no copy of its recurrent state at every round (it
    did: a state copy a token); a speculative generation after it still rolls back exactly."""
    engine = local_engine(models["hybrid"])
    finished = run(engine, prompt(2), max_new_tokens=N_NEW)[2]
    assert_equal(finished, baselines["hybrid"][2], "plain")
    assert engine.runner._rollback._checkpoint is None
    finished = run(engine, prompt(2), spec=SpecConfig("prompt-lookup", k=3), max_new_tokens=N_NEW)[2]
    assert_equal(finished, baselines["hybrid"][2], "prompt-lookup after plain")


# ------------------------------------------------------------------ both contexts stay exact


@pytest.mark.parametrize("where", ["inside", "split"])
def test_full_acceptance_and_rejection_at_zero_leave_both_contexts_exact(models, baselines, where):
    model = models[where]
    ids = prompt(1)
    continuation = list(baselines[where][1].output_ids)
    made = []

    def factory(spec, target, draft, target_runner=None):
        made.append(SteeredDrafter(make_drafter(spec, target, draft, target_runner=target_runner), continuation,
                               len(ids), model.vocab_size))
        return made[-1]

    engine = local_engine(model, drafter_factory=factory)
    _, rounds, finished = run(engine, ids, spec=SpecConfig("mtp", k=3), max_new_tokens=N_NEW)
    assert_equal(finished, baselines[where][1], "steered")
    outcomes = [(r.n_accepted, len(r.draft_ids)) for r in rounds if r.draft_ids]
    assert (3, 3) in outcomes and any(n == 0 for n, _ in outcomes)
    # the target: its next logits as a fresh context's for the same ids
    context = ids + list(finished.output_ids)
    runner = engine.runner
    feed = runner.sync(context)
    kept = runner.forward(feed, 1).clone()
    fresh = model.new_runner()
    assert torch.allclose(fresh.forward(context, 1), kept, atol=1e-4)
    # the MTP head: the draft it makes next as a fresh head's on a fresh target context
    mtp = made[-1].inner.context
    runner.rollback(len(context) - 1)
    ours = mtp.draft(context, 3, lambda logits: int(torch.argmax(logits)))[1]
    fresh.rollback(len(context) - 1)
    other = MtpContext(MtpHead(model.native), fresh)
    fresh.reset()
    fresh.forward(context[:-1], 1)
    theirs = other.draft(context, 3, lambda logits: int(torch.argmax(logits)))[1]
    for a, b in zip(ours, theirs):
        assert torch.allclose(a, b, atol=1e-4)
    other.release()


def test_random_rollbacks_of_a_hybrid_runner_leave_it_exact(models):
    """Snapshots (the target's), checkpoints (a draft's) and refills from the start, mixed at random."""
    model = models["hybrid"].native
    rng = random.Random(0)
    for depth in (0, 4):
        runner = model.new_runner()
        runner.reserve_rollback(depth)
        context = prompt(5, 12)
        runner.forward(context, 1)
        for _ in range(40):
            runner.sync(context + [1])
            guess = [rng.randrange(3, 390) for _ in range(rng.randrange(1, 4))]
            for token in guess:  # fed one by one (a draft) or together (a verification)
                runner.forward([token], 1) if depth == 0 else None
            if depth:
                runner.forward(guess, len(guess))
            keep = rng.randrange(0, len(guess) + 1)
            context = context + guess[:keep]
            runner.rollback(len(context) - (rng.random() < 0.1) * 2)
            context = context[:len(runner.ids)]
        after = runner.forward([7], 1).clone()
        fresh = model.new_runner()
        assert torch.allclose(fresh.forward(context + [7], 1), after, atol=1e-4), f"depth {depth}"
        cost = runner.rollback_cost()
        assert cost["restores"] + cost["refills"] > 0
        if depth:
            assert cost["snapshots"] == depth


# ------------------------------------------------------------------ sampling

def test_mtp_sampling_is_lossless(models):
    """The first two emitted tokens follow the target's own joint distribution (chi-square), with the head
    drafting both (k = 2) from its own distribution and the residual drawn on every rejection."""
    from test_llama_cpp_engine import CHI2_CRITICAL_DF8, SAMPLING, chi_square, exact_joint
    model = models["inside"]
    engine = local_engine(model)
    ids = prompt(3)
    counts: dict[tuple[int, int], int] = {}
    rejected = 0
    draws = 2000
    torch.set_num_threads(1)
    for seed in range(draws):
        sampling = SamplingConfig(temperature=SAMPLING.temperature, top_k=SAMPLING.top_k, seed=seed)
        _, rounds, finished = run(engine, ids, spec=SpecConfig("mtp", k=2), sampling=sampling, max_new_tokens=4)
        pair = tuple(finished.output_ids[:2])
        counts[pair] = counts.get(pair, 0) + 1
        rejected += rounds[1].n_accepted < len(rounds[1].draft_ids)
    joint = exact_joint(model, ids)
    assert len(joint) == 9 and rejected > draws // 10
    assert chi_square(counts, joint, draws) < CHI2_CRITICAL_DF8


# ------------------------------------------------------------------ bad input

def test_a_file_declaring_nextn_layers_without_their_tensors_is_refused(tmp_path, tiny_tokenizer):
    path = write_qwen35_gguf(tmp_path / "cut.gguf", tiny_tokenizer, drop=(".nextn.",))
    with pytest.raises(ModelLoadError, match="declares 1 MTP .nextn. layer but lacks their tensors") as info:
        backend.load_gguf(path)
    assert "\n" not in str(info.value)


def test_a_sidecar_for_another_model_is_refused(models, tmp_path, tiny_tokenizer):
    import gguf
    import numpy as np
    other = tmp_path / "mtp-other.gguf"  # the head of a wider model
    writer = gguf.GGUFWriter(str(other), "qwen35")
    writer.add_embedding_length(96)
    writer.add_block_count(5)
    writer.add_nextn_predict_layers(1)
    writer.add_tensor("blk.4.nextn.enorm.weight", np.ones(96, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    engine = local_engine(models["split"])
    with pytest.raises(ConfigError, match="mtp-other.gguf is not .*'s MTP head: its hidden size is 96") as info:
        engine.validate(SpecConfig("mtp", k=2, draft=str(other)))
    assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="is not an MTP head file"):
        engine.validate(SpecConfig("mtp", k=2, draft=str(models["hybrid"].source.file)))


def test_an_mtp_file_given_as_a_model_is_refused(files):
    with pytest.raises(ModelLoadError, match="is an MTP head alone .* not a model: load its target"):
        load_model(str(files["sidecar"]), device="cpu")


def test_mtp_on_a_model_without_a_head_says_what_to_do(models):
    with pytest.raises(ConfigError, match="has none inside .* and no mtp-\\*.gguf head lies beside it"):
        local_engine(models["hybrid"]).validate(SpecConfig("mtp", k=1))


def test_k_beyond_chained_heads_is_refused():
    from engine.backends.llama_cpp_heads import check_chained_k

    class Chained:
        chained, n_heads, label = True, 3, "tiny step35's own MTP layers"

    assert check_chained_k(Chained, 3) == 3
    with pytest.raises(ConfigError, match="chains 3 MTP heads, one drafted token each, so k is at most 3, got k=4"):
        check_chained_k(Chained, 4)


def test_a_llama_cpp_python_without_the_mtp_bindings_is_named(models, monkeypatch):
    import llama_cpp.llama_cpp_ext as ext
    monkeypatch.delattr(ext, "llama_get_embeddings_nextn_ith")
    from engine.backends import llama_cpp_library
    monkeypatch.setattr(llama_cpp_library, "_bindings", None)
    with pytest.raises(ConfigError, match="needs llama-cpp-python 0.3.36 .* pip install llama-cpp-python==0.3.36"):
        local_engine(models["inside"]).validate(SpecConfig("mtp", k=2))


@pytest.mark.parametrize("case, fragment", [
    ("head-as-model", "is an MTP head alone"),
    ("no-head", "has none inside (qwen35.nextn_predict_layers) and no mtp-*.gguf head lies beside it"),
    ("model-as-head", "is not an MTP head file"),
    ("head-as-draft", "is an MTP head alone"),
])
def test_the_cli_says_each_bad_mtp_input_in_one_line_and_exits_2(files, capsys, case, fragment):
    from engine.cli.main import main
    argv = {"head-as-model": ["--model", str(files["sidecar"])],
            "no-head": ["--model", str(files["hybrid"]), "--method", "mtp", "--k", "2"],
            "model-as-head": ["--model", str(files["split"]), "--method", "mtp", "--draft", str(files["hybrid"])],
            "head-as-draft": ["--model", str(files["hybrid"]), "--method", "draft-model", "--draft",
                              str(files["sidecar"])]}[case]
    code = main(["generate", *argv, "--max-new-tokens", "4", "hi"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and fragment in err and "\n" not in err and "Traceback" not in err


def test_the_verify_cost_curve_of_a_hybrid_is_measured_with_its_snapshots(models):
    """As the verifying target runs (k + 1 snapshots written by each pass); every rollback restores the
    checkpoint taken after the context, none recomputes the context."""
    from engine.measure.verify_cost import measure
    model = models["hybrid"]
    runner = model.new_runner()
    runner.reserve_rollback(5)
    cost = measure(runner, model.vocab_size, 4, repeats=2)
    assert len(cost.seconds) == 4 and all(s > 0 for s in cost.seconds)
    assert runner.rollback_cost()["refills"] == 0 and runner.rollback_cost()["snapshots"] == 5
