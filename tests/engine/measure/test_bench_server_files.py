"""bench --compare-llama-server's options for the methods that name files (engine.drafters.mtp's and
engine.drafters.draft_model's llama_server_args), on the tiny Qwen 3.5-style GGUFs (tests/fixtures/tiny_gguf): the
MTP head inside the target or in the mtp-*.gguf beside it, a draft model drafting for itself; and what llama-server
has no equal of, refused with the reason. No server runs here (tests/e2e/test_mtp_llama_server.py runs one)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")

from engine.core.compat import TokenizerFacts  # noqa: E402
from engine.core.config import parse_spec  # noqa: E402
from engine.core.errors import ConfigError  # noqa: E402
from engine.host import engine_threads  # noqa: E402
from engine.measure.bench_server import server_args  # noqa: E402
from engine.models.load import load_model  # noqa: E402
from engine.runtime import local_engine  # noqa: E402
from tests.fixtures.tiny_gguf import build  # noqa: E402

MTP_K3 = ("--spec-type", "draft-mtp", "--spec-draft-n-max", "3", "--spec-draft-n-min", "0")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("server-files")
    (inside,) = build("qwen35-mtp", folder / "inside" / "tiny-qwen35-mtp.gguf")
    target, sidecar = build("qwen35-mtp-sidecar", folder / "split" / "tiny-qwen35.gguf")
    (hybrid,) = build("hybrid", folder / "hybrid" / "tiny-hybrid.gguf")
    return {"inside": inside, "split": target, "sidecar": sidecar, "hybrid": hybrid}


@pytest.fixture(scope="module")
def engines(files):
    """An engine on one of the files, loaded once."""
    loaded = {}

    def engine(where: str):
        if where not in loaded:
            loaded[where] = local_engine(load_model(str(files[where]), device="cpu"))
        return loaded[where]
    yield engine
    for each in loaded.values():
        each.release()


def test_mtp_layers_inside_the_target_need_no_file(engines):
    assert server_args(parse_spec("mtp:k=3"), engines("inside")) == MTP_K3


def test_mtp_head_beside_the_target_or_named_is_given_as_the_draft(files, engines):
    named = ("-md", str(files["sidecar"].resolve()))
    assert server_args(parse_spec("mtp:k=3"), engines("split")) == MTP_K3 + named
    assert server_args(parse_spec(f"mtp:k=2,draft={files['sidecar']}"), engines("split")) == \
        MTP_K3[:3] + ("2",) + MTP_K3[4:] + named


def test_mtp_without_a_head_or_with_several_of_one_head_kind_has_no_equal(engines):
    with pytest.raises(ConfigError, match="no MTP layers inside and no mtp-"):
        server_args(parse_spec("mtp:k=3"), engines("hybrid"))
    several = SimpleNamespace(target=SimpleNamespace(label="tiny", native=SimpleNamespace(
        n_nextn=2, header=SimpleNamespace(architecture="qwen35"))))
    with pytest.raises(ConfigError, match="runs one MTP layer for 'qwen35' models"):
        server_args(parse_spec("mtp:k=1"), several)


def test_draft_model_names_the_draft_file_its_k_and_the_targets_threads(files, engines):
    for draft in ("inside", "split"):
        assert server_args(parse_spec(f"draft-model:k=3,draft={files[draft]}"), engines("inside")) == (
            "--spec-type", "draft-simple", "-md", str(files[draft].resolve()), "--spec-draft-n-max", "3",
            "--spec-draft-n-min", "0", "--spec-draft-p-min", "0", "-td", str(engine_threads()))


def test_a_recurrent_draft_of_a_recurrent_target_is_compared(files, engines):
    """llama-server restores both from a checkpoint after a rejected draft (the outputs stay equal; it drafts in
    fewer rounds: tests/e2e/test_mtp_llama_server.py)."""
    args = server_args(parse_spec(f"draft-model:k=4,draft={files['hybrid']}"), engines("inside"))
    assert args[2:6] == ("-md", str(files["hybrid"].resolve()), "--spec-draft-n-max", "4")


def _facts(size: int) -> TokenizerFacts:
    return TokenizerFacts(vocab_kind="BPE", size=size, bos_id=1, bos_token="<s>", eos_id=2, eos_token="</s>",
                          piece=lambda token_id: f"piece{token_id}")


def _engine(*, draft_backend="llama.cpp", draft_size=400, draft_recurrent=False, target_recurrent=False):
    """An engine as llama_server_args reads it: the target's tokenizer and kind, the draft it loads."""
    draft = SimpleNamespace(label="draft", backend=draft_backend, tokenizer=_facts(draft_size),
                            source=SimpleNamespace(gguf_file="draft.gguf" if draft_backend == "llama.cpp" else None,
                                                   file="draft.gguf"),
                            native=SimpleNamespace(recurrent=draft_recurrent))
    target = SimpleNamespace(label="target", tokenizer=_facts(400), native=SimpleNamespace(recurrent=target_recurrent))
    return SimpleNamespace(target=target, drafts=SimpleNamespace(draft_model=lambda name: draft))


@pytest.mark.parametrize("engine, words", [
    (_engine(draft_size=50_000), "refuses a draft of another vocabulary"),
    (_engine(draft_backend="transformers"), "drafts with a GGUF on llama.cpp; draft runs on transformers"),
    (_engine(draft_recurrent=True), "keeps a recurrent state, which llama-server cuts back only for a recurrent"),
])
def test_draft_model_without_llama_servers_equal_is_refused_with_the_reason(engine, words):
    with pytest.raises(ConfigError, match=words):
        server_args(parse_spec("draft-model:k=3,draft=d.gguf"), engine)


def test_an_adaptive_draft_length_has_no_equal(engines):
    with pytest.raises(ConfigError, match="adaptive has no equal"):
        server_args(parse_spec("mtp:k=3,adaptive=1"), engines("inside"))
