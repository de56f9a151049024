"""GGUFs that draft for themselves with their MTP (nextn) layers on llama.cpp, as the catalog finds them from
headers alone: layers inside the file, an mtp-*.gguf head beside it that fits it (the same header-level test
llama.cpp's MTP head uses), the head file itself (listed, but not as a model to chat with), models with
none; the words `specscope models list` prints for them (MethodSpec.own_drafter of method mtp), and the
facts cache that holds them."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from engine.backends import backend_named
from engine.backends.gguf_file import fitting_sidecar, mtp_mismatch, mtp_shape, read_header
from engine.cli.main import main
from engine.core.methods import method_spec
from engine.models import catalog, gguf_facts
from tests.fixtures.tiny_gguf import build


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory, tiny_tokenizer):
    """inside/ (nextn layer inside), pair/ (target + mtp-target.gguf), hybrid/ (a qwen35 with none), plain/
    (a llama with none, and a qwen35 head beside it that does not fit)."""
    root = tmp_path_factory.mktemp("mtp-ggufs")
    inside, = build("qwen35-mtp", root / "inside" / "qwen35-mtp.gguf", tiny_tokenizer)
    target, head = build("qwen35-mtp-sidecar", root / "pair" / "tiny-qwen35.gguf", tiny_tokenizer)
    hybrid, = build("hybrid", root / "hybrid" / "tiny-hybrid.gguf", tiny_tokenizer)
    plain = write_plain_llama(root / "plain" / "tiny-llama.gguf")
    stranger = shutil.copy(head, plain.with_name("mtp-tiny-llama.gguf"))
    return {"inside": inside, "target": target, "head": head, "hybrid": hybrid, "plain": plain,
            "stranger": Path(stranger)}


def write_plain_llama(path: Path) -> Path:
    import gguf
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_context_length(256)
    writer.add_embedding_length(16)
    writer.add_head_count(2)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list([f"t{i}" for i in range(40)])
    writer.add_tensor("token_embd.weight", np.zeros((40, 16), np.float32))
    writer.add_tensor("blk.0.attn_norm.weight", np.ones(16, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSCOPE_CACHE_DIR", str(tmp_path / "cache"))  # facts read from the files here
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))  # an empty hub cache for `models list`


def test_nextn_layers_inside_a_gguf_draft_for_it_on_llama_cpp(ggufs):
    entry = catalog.describe_path(ggufs["inside"])
    assert entry.usable and entry.architecture == "qwen35"
    assert entry.n_mtp_layers == 1 and entry.mtp_sidecar is None
    assert catalog.own_drafter(entry) == ("mtp", "drafts for itself: 1 MTP layer (llama.cpp)")
    assert method_spec("mtp").own_settings(entry, ()) == {}  # one head re-applies itself: k is not capped
    if backend_named("llama.cpp").available():  # auto: its GGUF on llama.cpp, where the layers draft
        assert catalog.entry_backend(entry, "auto", "mtp") == "llama.cpp"


def test_a_fitting_head_beside_a_gguf_drafts_for_it(ggufs):
    entry = catalog.describe_path(ggufs["target"])
    assert entry.usable and entry.n_mtp_layers == 1 and entry.mtp_sidecar == ggufs["head"]
    assert catalog.own_drafter(entry) == ("mtp", "drafts for itself: 1 MTP layer in mtp-tiny-qwen35.gguf "
                                                 "(llama.cpp)")
    assert catalog.entry_as_dict(entry)["mtp_sidecar"] == str(ggufs["head"])
    # the catalog's test is llama.cpp's MTP head's (engine.backends.llama_cpp_mtp.find_sidecar): one function
    assert fitting_sidecar(ggufs["target"], mtp_shape(read_header(ggufs["target"]))) == ggufs["head"]


def test_the_head_file_itself_is_no_model_to_chat_with(ggufs):
    head = catalog.describe_path(ggufs["head"])
    assert not head.usable and head.n_mtp_layers == 0 and catalog.own_drafter(head) is None
    assert head.problem == ("an MTP head (1 nextn layer) for tiny-qwen35.gguf, not a model to chat with; load "
                            "tiny-qwen35.gguf (method mtp drafts with this)")
    stranger = catalog.describe_path(ggufs["stranger"])  # beside a llama it does not fit: whose it is, by kind
    assert not stranger.usable and stranger.problem.startswith("an MTP head (1 nextn layer) for a qwen35 model, "
                                                               "not a model to chat with; load its target")


def test_models_without_mtp_layers_have_no_own_drafter(ggufs):
    for name in ("hybrid", "plain"):  # the llama has a head beside it, but of another architecture and width
        entry = catalog.describe_path(ggufs[name])
        assert entry.usable and entry.n_mtp_layers == 0 and entry.mtp_sidecar is None, name
        assert catalog.own_drafter(entry) is None, name
    why = mtp_mismatch(mtp_shape(read_header(ggufs["head"])), mtp_shape(read_header(ggufs["plain"])), "tiny-llama")
    assert why == "it is for a 'qwen35' model, tiny-llama is 'llama'"


def test_own_drafter_words_by_backend_and_heads(tmp_path):
    """One head on llama.cpp: any k; chained heads (Step-3.5): k ≤ heads; a HF folder: transformers' words (not
    for Qwen 3.5, whose MTP weights transformers drops); where llama.cpp would refuse mtp: none."""
    mtp = method_spec("mtp")
    gguf = catalog.CatalogEntry(name="m", label="m", kind="gguf", path=tmp_path / "m.gguf", weights_format="gguf")
    step = replace(gguf, architecture="step35", n_mtp_layers=3)
    assert mtp.own_drafter(step, ()) == "drafts for itself: 3 MTP layers (llama.cpp, chained, k ≤ 3)"
    assert mtp.own_settings(step, ()) == {"max_k": 3}
    # no MTP graph; no rollback of its recurrent state (plain only); llama.cpp runs one qwen35 layer
    for architecture, layers in (("llama", 1), ("qwen3next", 1), ("qwen35", 2)):
        assert mtp.own_drafter(replace(gguf, architecture=architecture, n_mtp_layers=layers), ()) is None
    folder = catalog.CatalogEntry(name="f", label="f", kind="folder", path=tmp_path, model_type="deepseek_v3",
                                  n_mtp_layers=2)
    assert mtp.own_drafter(folder, ()) == "drafts for itself: 2 MTP layers (method mtp, k ≤ 2)"
    assert mtp.own_settings(folder, ()) == {"max_k": 2}
    assert mtp.own_drafter(replace(folder, model_type="qwen3_5"), ()) is None


def test_the_facts_cache_holds_the_mtp_facts(ggufs, monkeypatch):
    path = ggufs["inside"]
    cached = gguf_facts.facts_file(path)
    assert cached.name.endswith(f"-v{gguf_facts.FACTS_VERSION}.json")  # older caches lack these facts: not read
    catalog.describe_path(path)
    facts = json.loads(cached.read_text())
    assert facts["nextn_layers"] == 1 and facts["mtp_only"] is False and facts["architecture"] == "qwen35"
    assert facts["embedding_length"] and facts["n_tokens"] == facts["vocab_size"]

    def no_reading(_path):
        raise AssertionError("read from the cache, not the file")
    monkeypatch.setattr("engine.backends.gguf_file.read_header", no_reading)
    assert catalog.describe_path(path).n_mtp_layers == 1


def test_models_list_says_which_ggufs_draft_for_themselves(ggufs, capsys):
    paths = [ggufs[name] for name in ("inside", "target", "head", "plain")]
    args = ["models", "list", "--device", "cpu"] + [arg for p in paths for arg in ("--path", str(p))]
    assert main(args) == 0
    table = capsys.readouterr().out
    assert "drafts for itself: 1 MTP layer (llama.cpp)" in table
    assert "drafts for itself: 1 MTP layer in mtp-tiny-qwen35.gguf (llama.cpp)" in table
    assert table.count("drafts for itself") == 2  # not the head alone, not the llama
    assert main(args + ["--json"]) == 0
    rows = {Path(r["path"]).name: r for r in json.loads(capsys.readouterr().out)}
    assert rows["qwen35-mtp.gguf"]["own_drafter"] == {"method": "mtp",
                                                      "words": "drafts for itself: 1 MTP layer (llama.cpp)"}
    head = rows["mtp-tiny-qwen35.gguf"]
    assert not head["usable"] and head["own_drafter"] is None and head["problem"].startswith("an MTP head")


def test_a_gemma4_gguf_with_its_assistant_beside_it_drafts_with_it(tmp_path, tiny_tokenizer, capsys):
    """A Gemma 4 GGUF offers the gemma4-assistant GGUF beside it (method assistant, the file as its draft); the
    assistant file itself is listed as a drafter for that model, not as a model to chat with."""
    target, assistant = build("gemma4-assistant", tmp_path / "tiny-gemma4.gguf", tiny_tokenizer)
    entry = catalog.describe_path(target)
    assert entry.assistant_file == assistant and entry.problem is None
    assert catalog.own_drafter(entry) == ("assistant", f"drafts with its assistant {assistant.name} (method "
                                                       "assistant, llama.cpp)")
    assert method_spec("assistant").own_settings(entry, []) == {"draft": str(assistant)}
    alone = catalog.describe_path(assistant)
    assert alone.problem == (f"a Gemma 4 assistant drafter for {target.name}, not a model to chat with; load "
                             f"{target.name} (method assistant drafts with this)")
    assert catalog.own_drafter(alone) is None
    lone = tmp_path / "alone"
    lone.mkdir()
    moved = Path(shutil.copy(assistant, lone / assistant.name))
    assert "load its Gemma 4 target" in catalog.describe_path(moved).problem
