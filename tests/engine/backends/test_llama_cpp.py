"""The llama.cpp backend (engine/backends/llama_cpp.py): its runner against the Runner contract, its tokenizer
and chat template against the transformers path, and every bad input a clear one-line error.

Runs on a tiny GGUF written here from the tiny HF Llama (no download), and on the built-in model where it
is installed. Skipped as a whole where llama-cpp-python is not installed."""

from __future__ import annotations

import ctypes
import gc
import random

import pytest
import torch

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install llama-cpp-python==0.3.36)")

from engine.backends import llama_cpp as backend  # noqa: E402
from engine.core.chat import IncrementalDetokenizer, normalize_conversation, prompt_ids  # noqa: E402
from engine.core.errors import (ConfigError, DefaultModelMissingError, ModelLoadError, OutOfMemoryError,  # noqa: E402
                           PromptTooLongError)
from tests.fixtures.tiny_gguf import quantize, write_tiny_gguf  # noqa: E402

CONVERSATIONS = {
    "single": [{"role": "user", "content": "What is the capital of Japan?"}],
    "system": [{"role": "system", "content": "You are terse."},
               {"role": "user", "content": "Name three fruits 🍎🍌 and say 日本語 in English."}],
    "multi-turn": [{"role": "system", "content": "Answer in French."},
                   {"role": "user", "content": "Hello!"},
                   {"role": "assistant", "content": "Bonjour ! Comment puis-je vous aider ?"},
                   {"role": "user", "content": "Translate: the café is open 😀"}],
    "no-system": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello, how can I help?"},
                  {"role": "user", "content": "def add(a, b):\n    return a + b\nExplain."}],
}
# Not "½": llama.cpp's "smollm" pre-tokenizer splits " ½" as " " + "½" where the HF regex keeps " ½" together
# (both valid tokenizations of the text; the built-in's prompts then differ in ids, not in text).
TEXTS = ["The quick brown fox jumps over the lazy dog.", "Café crème, naïve façade — déjà vu.",
         "日本語のテキスト、中文文本。한국어", "Emoji 😀 🎉 👍 and more 🎉🎉 👩‍👩‍👧",
         "def add(a, b):\n    return a + b\n\n\tprint(f\"{x!r}\")  # → ∞", "<|im_start|>user\nHi<|im_end|>"]


# ------------------------------------------------------------------ fixtures

@pytest.fixture(scope="session")
def tiny_hf_model(tiny_dir):
    from transformers import LlamaForCausalLM
    return LlamaForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory, tiny_hf_model, tiny_tokenizer):
    """The tiny HF Llama as an F32 GGUF (trained context 4096, so long feeds can be tried)."""
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-f32.gguf", tiny_hf_model, tiny_tokenizer,
                           context_length=4096)


@pytest.fixture(scope="session")
def tiny_q8_gguf(tiny_gguf):
    """Re-quantized to Q8_0 by llama.cpp: batched and one-by-one logits are bit-identical there."""
    return quantize(tiny_gguf, tiny_gguf.with_name("tiny-q8_0.gguf"), "Q8_0")


@pytest.fixture(scope="session")
def tiny_llama(tiny_gguf):
    return backend.load_gguf(tiny_gguf, label="tiny F32")


@pytest.fixture(scope="session")
def tiny_q8(tiny_q8_gguf):
    return backend.load_gguf(tiny_q8_gguf, label="tiny Q8_0")


@pytest.fixture(scope="session")
def builtin_llama():
    from engine.models.sources import default_model_gguf
    try:
        path = default_model_gguf()
    except DefaultModelMissingError as exc:
        pytest.skip(str(exc))
    return backend.load_gguf(path, label="built-in")


@pytest.fixture(scope="session")
def builtin_hf_tokenizer():
    """The tokenizer the transformers backend uses for the built-in model."""
    from engine.models.load import load_tokenizer_only
    try:
        return load_tokenizer_only("default")
    except DefaultModelMissingError as exc:
        pytest.skip(str(exc))


# ------------------------------------------------------------------ tokenizer and chat template

def check_same_tokenizer(llama_tok, hf_tok):
    for text in TEXTS:
        ids = hf_tok.encode(text, add_special_tokens=False)
        assert llama_tok.encode(text) == ids, text
        for skip in (False, True):
            assert llama_tok.decode(ids, skip_special_tokens=skip) == hf_tok.decode(ids, skip_special_tokens=skip)
    for name, conversation in CONVERSATIONS.items():
        messages = normalize_conversation(conversation)
        assert prompt_ids(llama_tok, messages) == prompt_ids(hf_tok, messages), name
    assert (llama_tok.bos_token_id, llama_tok.eos_token_id) == (hf_tok.bos_token_id, hf_tok.eos_token_id)
    assert (llama_tok.bos_token, llama_tok.eos_token) == (hf_tok.bos_token, hf_tok.eos_token)
    assert len(llama_tok) == len(hf_tok)


def check_same_pieces(llama_tok, hf_tok):
    """The incremental detokenizer gives the same pieces on both, one token at a time, split characters too."""
    split_somewhere = False
    for text in TEXTS:
        ids = hf_tok.encode(text, add_special_tokens=False)
        prompt = hf_tok.encode("Say something:", add_special_tokens=False)
        ours, theirs = IncrementalDetokenizer(llama_tok, prompt), IncrementalDetokenizer(hf_tok, prompt)
        for token in ids:
            piece = ours.add([token])
            assert piece == theirs.add([token])
            split_somewhere |= piece == [""]
        assert ours.text == theirs.text == hf_tok.decode(ids, skip_special_tokens=True)
    assert split_somewhere  # some emoji/CJK token ended inside a character: the test saw that case


def test_tiny_tokenizer_and_template_match_transformers(tiny_llama, tiny_tokenizer):
    check_same_tokenizer(tiny_llama.tokenizer, tiny_tokenizer)
    check_same_pieces(tiny_llama.tokenizer, tiny_tokenizer)


@pytest.mark.model
def test_builtin_prompt_ids_equal_the_transformers_path(builtin_llama, builtin_hf_tokenizer):
    """Single- and multi-turn, with and without a system prompt (the template then adds its own)."""
    assert builtin_llama.tokenizer.chat_template == builtin_hf_tokenizer.chat_template
    check_same_tokenizer(builtin_llama.tokenizer, builtin_hf_tokenizer)


@pytest.mark.model
def test_builtin_incremental_pieces_equal_the_transformers_path(builtin_llama, builtin_hf_tokenizer):
    check_same_pieces(builtin_llama.tokenizer, builtin_hf_tokenizer)


@pytest.mark.model
def test_builtin_facts(builtin_llama):
    tok = builtin_llama.tokenizer
    assert builtin_llama.dtype_label == "Q4_1"
    assert (builtin_llama.n_layers, builtin_llama.vocab_size, builtin_llama.n_ctx_train) == (30, 49152, 8192)
    assert builtin_llama.context_length == 8192 and builtin_llama.supports_rollback
    assert tok.eos_token_id in tok.eog_ids and tok.special_tokens_map["eos_token"] == "<|im_end|>"
    assert tok.unk_token == "<|endoftext|>" and tok.vocab_kind == "BPE"
    assert builtin_llama.device_label == ("CPU" if not builtin_llama.n_gpu_layers else builtin_llama.accelerators[0])


# ------------------------------------------------------------------ logits

def test_tiny_gguf_computes_what_the_hf_model_computes(tiny_llama, tiny_hf_model, tiny_tokenizer):
    """The F32 GGUF written from the HF model gives its logits (within float rounding): the file, the
    loader and the batch layout agree with transformers."""
    ids = tiny_tokenizer.encode(TEXTS[0] + TEXTS[3], add_special_tokens=False)
    runner = tiny_llama.new_runner()
    ours = runner.forward(ids, len(ids)).clone()
    with torch.no_grad():
        theirs = tiny_hf_model(torch.tensor([ids])).logits[0]
    assert ours.shape == theirs.shape and ours.dtype == torch.float32
    assert torch.allclose(ours, theirs, atol=2e-3), float((ours - theirs).abs().max())
    assert torch.equal(ours.argmax(-1), theirs.argmax(-1))


def one_by_one(runner, ids):
    runner.reset()
    return torch.stack([runner.forward([token], 1)[0].clone() for token in ids])


@pytest.mark.parametrize("which", ["tiny Q8_0", pytest.param("built-in Q4_1", marks=pytest.mark.model)])
def test_batched_logits_equal_one_by_one(which, request):
    model = request.getfixturevalue("tiny_q8" if which == "tiny Q8_0" else "builtin_llama")
    ids = model.tokenizer.encode(TEXTS[0] + " " + TEXTS[2])[:24]
    runner = model.new_runner()
    batched = runner.forward(ids, len(ids)).clone()
    assert torch.equal(batched, one_by_one(runner, ids))


def test_forward_gives_only_the_rows_asked_for_in_place(tiny_q8):
    runner = tiny_q8.new_runner()
    ids = tiny_q8.tokenizer.encode(TEXTS[1])
    all_rows = runner.forward(ids, len(ids)).clone()
    runner.reset()
    last3 = runner.forward(ids, 3)
    assert last3.shape == (3, tiny_q8.vocab_size) and torch.equal(last3, all_rows[-3:])
    address = ctypes.cast(tiny_q8.lib.llama_get_logits(runner._ctx), ctypes.c_void_p).value
    assert last3.data_ptr() == address  # a view of llama.cpp's buffer, not a copy
    assert runner.ids == ids


def test_a_long_feed_is_split_into_batches(tiny_q8):
    """More than n_batch ids at once: batches of n_batch from the first id, as llama-server feeds a prompt, the
    rows asked for in the last (where it holds them all; else in a batch of their own); the same (within the
    rounding of llama.cpp's large-batch kernels) as feeding the ids in small pieces."""
    n_batch = backend.N_BATCH
    rng = random.Random(1)
    ids = [rng.randrange(tiny_q8.vocab_size) for _ in range(2 * n_batch + 37)]
    runner = tiny_q8.new_runner()
    calls = []
    decode = runner._decode_batch
    runner._decode_batch = lambda chunk, position, n_outputs: (calls.append((position, len(chunk), n_outputs)),
                                                         decode(chunk, position, n_outputs))
    at_once = runner.forward(ids, 9).clone()
    assert calls == [(0, n_batch, 0), (n_batch, n_batch, 0), (2 * n_batch, 37, 9)]
    assert len(runner.ids) == len(ids)
    runner.reset()
    for start in range(0, len(ids) - 9, 100):
        runner.forward(ids[start:min(start + 100, len(ids) - 9)], 1)
    in_pieces = runner.forward(ids[-9:], 9)
    assert torch.allclose(in_pieces, at_once, atol=1e-2) and torch.equal(in_pieces.argmax(-1), at_once.argmax(-1))
    runner.reset()
    calls.clear()
    runner.forward(ids[:2 * n_batch + 5], 9)  # the last batch holds 5 ids: the 9 rows get one of their own
    assert calls == [(0, n_batch, 0), (n_batch, n_batch - 4, 0), (2 * n_batch - 4, 9, 9)]


@pytest.mark.parametrize("which", ["tiny Q8_0", pytest.param("built-in Q4_1", marks=pytest.mark.model)])
def test_next_logits_do_not_depend_on_how_the_prompt_was_fed(which, request):
    """A prompt fed whole, and again for a regenerated reply, gives the same logits: the sync feeds it whole
    again (not its last id alone, which llama.cpp's kernels would round otherwise)."""
    model = request.getfixturevalue("tiny_q8" if which == "tiny Q8_0" else "builtin_llama")
    prompt = model.tokenizer.encode(" ".join(TEXTS[:5]))
    assert len(prompt) > 64  # longer than the batches whose rounding matches one-by-one decoding
    runner = model.new_runner()
    whole = runner.forward(prompt, 1).clone()
    for token in (5, 6, 7):  # a reply's first tokens, one pass each
        runner.forward([token], 1)
    assert runner.sync(prompt) == prompt
    assert torch.equal(runner.forward(prompt, 1), whole)
    longer = prompt + [9]  # a longer context than the last prompt feeds what is new only
    assert runner.sync(longer) == [9]


@pytest.mark.parametrize("which", ["tiny Q8_0", pytest.param("built-in Q4_1", marks=pytest.mark.model)])
def test_rollback_after_random_rejections_equals_a_fresh_context(which, request):
    """Rounds of draft-and-verify with random rejections: after each rollback the next logits equal those
    of a fresh context fed the same ids."""
    model = request.getfixturevalue("tiny_q8" if which == "tiny Q8_0" else "builtin_llama")
    rng = random.Random(7)
    runner, fresh = model.new_runner(), model.new_runner()
    ids = model.tokenizer.encode(TEXTS[4])
    runner.forward(ids, 1)
    for _ in range(12):
        k = rng.randint(1, 6)
        draft = [rng.randrange(model.vocab_size) for _ in range(k)]
        runner.forward(draft + [rng.randrange(model.vocab_size)], k + 1)
        n_accepted = rng.randint(0, k)
        runner.rollback(len(ids) + n_accepted)
        ids = ids + draft[:n_accepted]
        assert runner.ids == ids
        probe = [rng.randrange(model.vocab_size)]
        ours = runner.forward(probe, 1).clone()
        fresh.reset()
        assert torch.equal(ours, fresh.forward(ids + probe, 1))
        runner.rollback(len(ids))


def test_sync_keeps_the_common_prefix(tiny_q8):
    runner = tiny_q8.new_runner()
    ids = tiny_q8.tokenizer.encode(TEXTS[0])
    runner.forward(ids[:-1], 1)
    runner.forward(ids[-1:], 1)
    assert runner.sync(ids) == ids[-1:]  # the last id is always fed again (its logits are needed)
    assert len(runner.ids) == len(ids) - 1
    runner.forward(ids[-1:], 1)
    assert runner.sync(ids + [7]) == [7]
    runner.rollback(len(ids))
    assert runner.sync(ids[:-1]) == ids[:-1]  # the last prompt fed, again: fed whole again (a regenerated reply)
    runner.forward(ids[:-1], 1)
    other = ids[:5] + tiny_q8.tokenizer.encode(" elephant")
    assert runner.sync(other) == other[5:] and runner.ids == ids[:5]


def test_reset_and_release(tiny_q8):
    runner = tiny_q8.new_runner()
    ids = tiny_q8.tokenizer.encode(TEXTS[0])
    first = runner.forward(ids, 1).clone()
    runner.release()
    assert runner.ids == [] and runner._ctx is None
    assert torch.equal(runner.forward(ids, 1), first)  # a new context was made
    runner.reset()
    assert runner.ids == []
    assert torch.equal(runner.forward(ids, 1), first)


def test_threads_are_what_was_asked(tiny_q8_gguf):
    model = backend.load_gguf(tiny_q8_gguf, n_threads=1)
    runner = model.new_runner()
    assert model.lib.llama_n_threads(runner._ctx) == 1
    from engine.host import engine_threads
    assert backend.load_gguf(tiny_q8_gguf).n_threads == engine_threads()


# ------------------------------------------------------------------ bad input to the runner

def test_runner_refuses_what_does_not_fit(tiny_q8_gguf):
    model = backend.load_gguf(tiny_q8_gguf, n_ctx=64)
    runner = model.new_runner()
    runner.forward(list(range(60)), 1)
    with pytest.raises(PromptTooLongError, match="64-token context"):
        runner.forward(list(range(5)), 1)
    assert len(runner.ids) == 60  # nothing of the refused pass was kept
    with pytest.raises(ValueError, match="token ids must be from 0 to"):
        runner.forward([model.vocab_size], 1)
    with pytest.raises(ValueError, match="n_logits"):
        runner.forward([1, 2], 3)
    assert runner.forward([1], 1).shape == (1, model.vocab_size)


# ------------------------------------------------------------------ bad files and settings

@pytest.mark.parametrize("keep", [10, 100, 3000, -1], ids=["header", "metadata", "tensor-infos", "last-byte"])
def test_a_truncated_gguf_is_refused_before_llama_cpp_sees_it(tiny_q8_gguf, tmp_path, keep):
    data = tiny_q8_gguf.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:keep] if keep > 0 else data[:-1])
    with pytest.raises(ModelLoadError, match="truncated") as info:
        backend.load_gguf(cut)
    assert "\n" not in str(info.value)


def test_a_file_that_is_not_gguf(tmp_path):
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"PK\x03\x04" + bytes(200))
    with pytest.raises(ModelLoadError, match="magic bytes"):
        backend.load_gguf(fake)
    with pytest.raises(ModelLoadError, match="cannot read"):
        backend.load_gguf(tmp_path / "missing.gguf")


def test_an_unknown_architecture(tmp_path, tiny_hf_model, tiny_tokenizer):
    path = write_tiny_gguf(tmp_path / "alien.gguf", tiny_hf_model, tiny_tokenizer, architecture="specscope-alien")
    with pytest.raises(ModelLoadError, match="'specscope-alien' model, an architecture this llama.cpp") as info:
        backend.load_gguf(path)
    assert "--backend transformers" in str(info.value) and "\n" not in str(info.value)


def test_a_context_too_long_for_memory_frees_the_model(tmp_path, tiny_hf_model, tiny_tokenizer, monkeypatch):
    """A context whose KV cache exceeds the free memory is refused before it is allocated, and the model
    loaded for it is freed (nothing is left loaded half-way)."""
    n_ctx = 2 ** 30  # 4 layers × 2 KV heads × (16 + 16) dims × 2 bytes = 512 bytes a token: 512 GiB
    path = write_tiny_gguf(tmp_path / "long.gguf", tiny_hf_model, tiny_tokenizer, context_length=n_ctx)
    monkeypatch.delenv("SPECSCOPE_SKIP_MEMORY_CHECK", raising=False)
    lib = backend.library()
    gc.collect()  # models of earlier tests (a model and its tokenizer refer to each other) go first
    freed = []
    real_free = lib.llama_model_free
    monkeypatch.setattr(lib, "llama_model_free", lambda handle: (freed.append(handle), real_free(handle)))
    with pytest.raises(OutOfMemoryError, match="needs 512.0 GB for its KV cache") as info:
        backend.load_gguf(path, n_ctx=n_ctx)
    assert "use a shorter context" in str(info.value)
    gc.collect()
    assert len(freed) == 1


def test_context_and_thread_settings_are_checked(tiny_q8_gguf):
    with pytest.raises(ConfigError, match="from 16 to 4096 tokens"):
        backend.load_gguf(tiny_q8_gguf, n_ctx=8192)
    with pytest.raises(ConfigError, match="from 16 to 4096 tokens"):
        backend.load_gguf(tiny_q8_gguf, n_ctx=4)
    with pytest.raises(ConfigError, match="threads must be"):
        backend.load_gguf(tiny_q8_gguf, n_threads=0)
    with pytest.raises(ConfigError, match="GPU layers must be"):
        backend.load_gguf(tiny_q8_gguf, n_gpu_layers=-2)


def test_gpu_layers_need_a_gpu_build(tiny_q8_gguf):
    if backend.accelerators():
        model = backend.load_gguf(tiny_q8_gguf)
        assert model.n_gpu_layers == -1 and model.device_label == backend.accelerators()[0]
    else:
        with pytest.raises(ConfigError, match="no GPU backend"):
            backend.load_gguf(tiny_q8_gguf, n_gpu_layers=8)
        model = backend.load_gguf(tiny_q8_gguf)
        assert model.n_gpu_layers == 0 and model.device_label == "CPU"


# ------------------------------------------------------------------ through engine.models.load

def test_load_model_dispatches_a_gguf_to_llama_cpp(tiny_q8_gguf):
    from engine.models.load import load_model
    messages = []
    model = load_model(str(tiny_q8_gguf), device="cpu", backend="llama.cpp", progress=messages.append)
    assert (model.backend, model.dtype_label, model.dtype, model.model) == ("llama.cpp", "Q8_0", None, None)
    assert model.device == torch.device("cpu") and model.vocab_size == 400 and model.n_layers == 4
    assert model.eos_ids == model.tokenizer.eog_ids and model.tokenizer.eos_token_id in model.eos_ids
    assert not model.converted_now and messages and "llama.cpp" in messages[0]
    first, second = model.new_runner(), model.new_runner()
    assert first is not second and first._ctx != second._ctx  # a KV cache each
    assert torch.equal(first.forward([1, 2, 3], 1), second.forward([1, 2, 3], 1))


def test_llama_cpp_refuses_a_hugging_face_folder(tiny_dir):
    from engine.models.load import load_model
    with pytest.raises(ModelLoadError, match="not a .gguf file; the llama.cpp backend runs GGUF models only"):
        load_model(str(tiny_dir), device="cpu", backend="llama.cpp")


def test_compat_reads_the_gguf_vocabulary(tiny_q8, tiny_llama, tiny_tokenizer):
    """GGUF against GGUF compares llama.cpp's own vocabularies (the same tiny vocabulary in two files)."""
    from engine.core.compat import tokenizer_difference, compatibility_facts
    facts = compatibility_facts(tiny_q8.tokenizer)
    assert (facts.vocab_kind, facts.size, facts.eos_id) == ("BPE", 400, tiny_tokenizer.eos_token_id)
    assert facts.piece(facts.eos_id) == "<|im_end|>" and facts.piece(400) is None
    assert tokenizer_difference(tiny_q8.tokenizer, tiny_llama.tokenizer) is None
    assert tokenizer_difference(tiny_q8.tokenizer, tiny_tokenizer) is None  # written from that very tokenizer


@pytest.mark.model
def test_compat_tells_two_gguf_vocabularies_apart(tiny_q8, builtin_llama):
    from engine.core.compat import tokenizer_difference
    difference = tokenizer_difference(builtin_llama.tokenizer, tiny_q8.tokenizer)
    assert difference is not None and difference.kind == "vocab-size"


# ------------------------------------------------------------------ a memory that can't be rolled back

@pytest.fixture(scope="session")
def tiny_mamba(tmp_path_factory, tiny_tokenizer):
    from tests.fixtures.tiny_gguf import write_tiny_mamba_gguf
    return backend.load_gguf(write_tiny_mamba_gguf(tmp_path_factory.mktemp("mamba") / "mamba.gguf", tiny_tokenizer),
                             label="tiny mamba")


def test_a_recurrent_state_without_snapshots_rolls_back_by_recomputing(tiny_mamba):
    """llama.cpp keeps no per-token snapshots of a Mamba's state: the model refuses speculation as a target
    (saying why), and its runner rolls back from the checkpoint taken at the last sync (or from the start)."""
    assert not tiny_mamba.supports_rollback and "no per-token snapshots" in tiny_mamba.rollback_refusal
    runner = tiny_mamba.new_runner()
    assert runner.sync([1, 2, 3, 4, 5]) == [1, 2, 3, 4, 5]
    runner.forward([1, 2, 3, 4], 1)
    runner.sync([1, 2, 3, 4, 5])  # the checkpoint: 4 positions
    runner.forward([5, 6, 7], 1)
    runner.rollback(5)  # back into the pass: the checkpoint restored, 5 fed again
    assert runner.ids == [1, 2, 3, 4, 5] and runner.cost.restores == 1
    runner.rollback(2)  # before the checkpoint: from the start
    assert runner.ids == [1, 2] and runner.cost.refills == 1
    after = runner.forward([9], 1).clone()
    fresh = tiny_mamba.new_runner()
    assert torch.allclose(fresh.forward([1, 2, 9], 1), after, atol=1e-5)
    assert runner.rollback_cost()["snapshot_bytes"] > 1000 and runner.rollback_cost()["snapshots"] == 0


def test_weights_that_do_not_fit_are_refused_before_loading(tiny_q8_gguf, monkeypatch):
    monkeypatch.delenv("SPECSCOPE_SKIP_MEMORY_CHECK", raising=False)
    monkeypatch.setattr(backend, "free_memory", lambda device="cpu": 1000)
    lib = backend.library()
    loads = []
    monkeypatch.setattr(lib, "llama_model_load_from_file", lambda *args: loads.append(args))
    with pytest.raises(OutOfMemoryError, match="GB of memory for its weights, but only 0.0 GB is free"):
        backend.load_gguf(tiny_q8_gguf)
    assert loads == []  # llama.cpp never saw the file


def test_the_logits_view_follows_llama_cpps_buffer_across_passes(tiny_q8):
    """forward() reuses its view of llama.cpp's logits buffer while the buffer stays where it is: every pass
    still reads that pass's rows (equal to a fresh context's), at the buffer's current address, in any row count,
    and after the context is made again; a view made inside inference mode is a plain tensor."""
    runner, fresh = tiny_q8.new_runner(), tiny_q8.new_runner()
    ids = tiny_q8.tokenizer.encode(TEXTS[0])
    with torch.inference_mode():
        runner.forward(ids[:-1], 1)
    for step, n_rows in enumerate([1, 1, 3, 1, 2, 1]):
        new = ids[-1:] + tiny_q8.tokenizer.encode(TEXTS[step % len(TEXTS)])[:n_rows - 1]
        rows = runner.forward(new, n_rows)
        address = ctypes.cast(tiny_q8.lib.llama_get_logits(runner._ctx), ctypes.c_void_p).value
        assert rows.shape == (n_rows, tiny_q8.vocab_size) and rows.data_ptr() == address
        assert not rows.is_inference()
        fresh.reset()
        assert torch.equal(rows, fresh.forward(runner.ids, n_rows))
        runner.rollback(len(runner.ids) - len(new))
        if step == 3:
            runner.release()
            runner.forward(ids[:-1], 1)
