"""Downloads through huggingface_hub against a fake hub on 127.0.0.1: progress, cancel, retry-continues,
offline and unreachable hubs, gated repos (the token is sent, never shown), pickle refusal, remote code."""

from __future__ import annotations

import json
import socket
import threading

import numpy as np
import pytest
from safetensors.numpy import save

from engine.models import catalog, folder_facts, hub
from engine.core.errors import DownloadCancelledError, DownloadError, UnsafeCheckpointError
from engine.models.sources import resolve_source
from hubserver import FakeHub, FakeRepo

TOKEN = "hf_SECRETtoken0123456789abcdefXYZ"
REPO = "acme/tiny-llama"
SHARD_1, SHARD_2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"


def _config(**extra) -> bytes:
    return json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "torch_dtype": "float32",
                       "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                       "hidden_size": 64, "max_position_embeddings": 256, "vocab_size": 300, **extra}).encode()


def sharded_repo() -> dict[str, bytes]:
    shard_1 = save({"embed": np.zeros((300, 64), np.float32), "norm": np.ones(64, np.float32)})
    shard_2 = save({"head": np.zeros((300, 64), np.float32)})
    index = {"metadata": {"total_size": (300 * 64 * 2 + 64) * 4},
             "weight_map": {"embed": SHARD_1, "norm": SHARD_1, "head": SHARD_2}}
    return {"config.json": _config(), SHARD_1: shard_1, SHARD_2: shard_2,
            "model.safetensors.index.json": json.dumps(index).encode(),
            "pytorch_model.bin": b"pickle bytes that must never be fetched",
            "tf_model.h5": b"not for us", "README.md": b"# tiny"}


@pytest.fixture
def fake_hub():
    server = FakeHub(repos={REPO: FakeRepo(sharded_repo())}).start()
    yield server
    server.stop()


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    cache = tmp_path / "hf-cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    return cache


def cached_entry(repo_id):
    return next(e for e in catalog.list_hub_cache() if e.repo_id == repo_id)


def test_download_fetches_safetensors_only_with_progress(fake_hub, hf_cache):
    seen = []
    result = hub.download(REPO, endpoint=fake_hub.endpoint, progress=seen.append, max_workers=2)
    assert set(result.files) == {"config.json", SHARD_1, SHARD_2, "model.safetensors.index.json", "README.md"}
    assert result.files[-1] == "config.json"
    assert fake_hub.gets("pytorch_model.bin") == 0 and fake_hub.gets("tf_model.h5") == 0
    total = sum(len(fake_hub.repos[REPO].files[f]) for f in result.files)
    assert seen[0].bytes_done == 0 and all(p.bytes_total == total for p in seen)
    assert [p.bytes_done for p in seen] == sorted(p.bytes_done for p in seen)  # never goes back
    assert seen[-1].bytes_done == total and seen[-1].files_done == seen[-1].files_total == len(result.files)
    assert result.bytes_downloaded == total
    entry = cached_entry(REPO)
    assert entry.usable and entry.n_parameters == 300 * 64 * 2 + 64 and entry.architecture == "LlamaForCausalLM"
    assert resolve_source(REPO).path == result.folder  # loadable by its repo id from HF_HUB_CACHE
    assert result.name == REPO and not result.needs_remote_code
    requests_before, again = len(fake_hub.requests), []
    assert hub.download(REPO, endpoint=fake_hub.endpoint, progress=again.append).bytes_downloaded == 0
    assert again[0].bytes_done == again[-1].bytes_done == total and again[-1].files_done == len(result.files)
    assert not [r for r in fake_hub.requests[requests_before:] if r[0] == "GET" and "/resolve/" in r[1]]


def test_cancel_keeps_finished_files_and_retry_continues(fake_hub, hf_cache):
    cancel = threading.Event()

    def stop_in_second_shard(progress):
        if progress.current_file == SHARD_2:
            cancel.set()

    with pytest.raises(DownloadCancelledError, match="downloading it again continues"):
        hub.download(REPO, endpoint=fake_hub.endpoint, progress=stop_in_second_shard, cancel=cancel,
                      max_workers=1)
    assert fake_hub.gets(SHARD_1) == 1 and fake_hub.gets(SHARD_2) == 1
    entry = cached_entry(REPO)  # listed, but not usable: no config.json, no main ref yet
    assert not entry.usable and "not finished" in entry.problem
    with pytest.raises(Exception, match="not in the local Hugging Face cache"):
        resolve_source(REPO)
    assert not list(hf_cache.rglob("*.incomplete"))  # the dropped file left nothing behind

    seen = []
    result = hub.download(REPO, endpoint=fake_hub.endpoint, progress=seen.append, max_workers=1)
    assert fake_hub.gets(SHARD_1) == 1  # finished before the cancel: not fetched again
    assert fake_hub.gets(SHARD_2) == 2
    shard_1_size = len(fake_hub.repos[REPO].files[SHARD_1])
    assert seen[0].bytes_done >= shard_1_size and seen[0].files_done >= 1  # the retry starts where it stopped
    assert seen[-1].bytes_done == seen[-1].bytes_total
    assert result.bytes_downloaded == seen[-1].bytes_total - seen[0].bytes_done
    assert cached_entry(REPO).usable


def test_cancel_before_start_registers_nothing(fake_hub, hf_cache):
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(DownloadCancelledError):
        hub.download(REPO, endpoint=fake_hub.endpoint, cancel=cancel)
    assert not [e for e in catalog.list_hub_cache() if e.usable]


def test_offline_mode_is_a_typed_error(fake_hub, hf_cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DownloadError, match="downloads are off"):
        hub.download(REPO, endpoint=fake_hub.endpoint)
    assert fake_hub.requests == []


def test_unreachable_hub_is_a_typed_error(hf_cache):
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(DownloadError, match="could not be reached") as info:
        hub.download(REPO, endpoint=f"http://127.0.0.1:{port}", token=TOKEN)
    assert TOKEN not in str(info.value) and len(str(info.value).splitlines()) == 1


def test_gated_repo_uses_the_token_and_never_shows_it(fake_hub, hf_cache, caplog):
    fake_hub.repos["acme/gated"] = FakeRepo({"config.json": _config(),
                                             "model.safetensors": save({"w": np.zeros(8, np.float32)})},
                                            token=TOKEN)
    with pytest.raises(DownloadError, match="gated") as info:
        hub.download("acme/gated", endpoint=fake_hub.endpoint, token="hf_wrong_" + TOKEN[::-1])
    assert TOKEN[::-1] not in str(info.value)
    result = hub.download("acme/gated", endpoint=fake_hub.endpoint, token=TOKEN)
    assert (result.folder / "model.safetensors").is_file()
    assert {auth for _, path, auth in fake_hub.requests if "gated" in path} >= {f"Bearer {TOKEN}"}
    assert TOKEN not in caplog.text
    for file in hf_cache.rglob("*"):  # nor anywhere in the cache
        if file.is_file():
            assert TOKEN.encode() not in file.read_bytes()


def test_unknown_repo_and_bad_id(fake_hub, hf_cache):
    with pytest.raises(DownloadError, match="not found on the Hugging Face Hub"):
        hub.download("acme/nope", endpoint=fake_hub.endpoint)
    with pytest.raises(DownloadError, match="not a repository id"):
        hub.download("just-a-name", endpoint=fake_hub.endpoint)


def test_pickle_only_repo_needs_consent(fake_hub, hf_cache):
    fake_hub.repos["acme/old"] = FakeRepo({"config.json": _config(), "pytorch_model.bin": b"\x80\x04pickle"})
    with pytest.raises(UnsafeCheckpointError, match="can run any code"):
        hub.download("acme/old", endpoint=fake_hub.endpoint)
    assert fake_hub.gets("pytorch_model.bin") == 0
    result = hub.download("acme/old", endpoint=fake_hub.endpoint, allow_pickle=True)
    assert (result.folder / "pytorch_model.bin").is_file()


def test_gguf_repo_needs_a_choice_and_downloads_one_file(fake_hub, hf_cache):
    fake_hub.repos["acme/tiny-GGUF"] = FakeRepo({"tiny.Q4_0.gguf": b"GGUF" + b"\0" * 64,
                                                 "tiny.Q8_0.gguf": b"GGUF" + b"\1" * 64})
    with pytest.raises(DownloadError, match="2 GGUF files"):
        hub.download("acme/tiny-GGUF", endpoint=fake_hub.endpoint)
    plan = hub.plan_download("acme/tiny-GGUF", endpoint=fake_hub.endpoint, files=["*Q8_0.gguf"])
    assert [f.path for f in plan.files] == ["tiny.Q8_0.gguf"] and plan.total_bytes == 68
    result = hub.download("acme/tiny-GGUF", endpoint=fake_hub.endpoint, plan=plan)
    assert result.name.endswith("tiny.Q8_0.gguf") and fake_hub.gets("tiny.Q4_0.gguf") == 0


def test_needs_remote_code(tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.json").write_bytes(_config())
    custom = tmp_path / "custom"
    custom.mkdir()
    (custom / "config.json").write_bytes(_config(auto_map={"AutoModelForCausalLM": "modeling_x.XForCausalLM"}))
    assert not folder_facts.needs_remote_code(plain)
    assert folder_facts.needs_remote_code(custom)
    assert catalog.describe_path(custom).needs_remote_code


def test_select_files_rules():
    files = [hub.RepoFile(n, 1) for n in ("config.json", "model.safetensors", "pytorch_model.bin",
                                         "flax_model.msgpack", "onnx/model.onnx", "tokenizer.json")]
    chosen, skipped = hub.select_files(files)
    assert [f.path for f in chosen] == ["model.safetensors", "tokenizer.json", "config.json"]
    assert set(skipped) == {"pytorch_model.bin", "flax_model.msgpack", "onnx/model.onnx"}
    with pytest.raises(UnsafeCheckpointError):
        hub.select_files(files, ["pytorch_model.bin"])
    assert hub.scrub(f"Authorization: Bearer {TOKEN}", TOKEN) == "Authorization: Bearer ***"


def test_cli_download(fake_hub, hf_cache, monkeypatch, capsys):
    from engine.cli.main import main
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.endpoint)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    assert main(["models", "download", REPO]) == 0
    out, err = capsys.readouterr()
    assert f"use it with --model {REPO}" in out and "skipped 2 file(s)" in err
    assert main(["models", "download", "acme/nope"]) == 2
    err = capsys.readouterr().err
    assert "not found on the Hugging Face Hub" in err and len(err.strip().splitlines()) == 1
