"""The worker thread (gui/worker.py) on a real engine: the loader gets its options, every slow step (loading
the model, loading a draft model) reaches `status_reported`, a refused setting fails a comparison before any
run, consent questions stop a load before the loader sees it, and a server's revised rounds come between its rounds and
its end."""

from __future__ import annotations

import json

import pytest


from engine.core.config import SpecConfig  # noqa: E402
from engine.models.consent import REMOTE_CODE  # noqa: E402
from engine.runtime import load_engine  # noqa: E402
from engine_testkit import build_tiny_tokenizer, save_tiny_model  # noqa: E402
import revised_events  # noqa: E402
from revised_events import RevisingEngine  # noqa: E402
from gui.worker import ComparisonRequest, GenerationRequest, LoadOptions, WorkerThread  # noqa: E402
from PySide6.QtCore import QObject, Signal  # noqa: E402

WAIT_MS = 60_000


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory):
    tokenizer = build_tiny_tokenizer()
    target = save_tiny_model(tmp_path_factory.mktemp("target"), tokenizer, seed=0)
    draft = save_tiny_model(tmp_path_factory.mktemp("draft"), tokenizer, seed=0, noise=0.001)
    return str(target), str(draft)


class Window(QObject):
    """Asks the worker the way the windows do: queued signals, so each slot runs on the worker's thread."""

    load_options_changed = Signal(object)  # LoadOptions
    load_requested = Signal(str)
    generation_requested = Signal(object)
    comparison_requested = Signal(object)


@pytest.fixture
def worker_thread():
    loads = []

    def loader(name, progress=None, *, on_status=None, consent=None, **options):
        loads.append((name, options))  # what the model is loaded with; the callbacks are the worker's own
        return load_engine(name, progress, on_status=on_status, consent=consent, **options)

    thread = WorkerThread(loader)
    thread.loads = loads
    thread.window = Window()
    thread.window.load_options_changed.connect(thread.worker.set_load_options)
    thread.window.load_requested.connect(thread.worker.load)
    thread.window.generation_requested.connect(thread.worker.generate)
    thread.window.comparison_requested.connect(thread.worker.compare)
    yield thread
    thread.shutdown()
    assert not thread.thread.isRunning()


def test_loading_and_draft_loading_reach_the_status_line(qtbot, worker_thread, tiny_pair):
    target, draft = tiny_pair
    worker = worker_thread.worker
    statuses = []
    worker.status_reported.connect(statuses.append)
    worker_thread.window.load_options_changed.emit(LoadOptions(device="cpu"))
    with qtbot.waitSignal(worker.model_loaded, timeout=WAIT_MS) as loaded:
        worker_thread.window.load_requested.emit(target)
    assert loaded.args[0].requested == target and loaded.args[0].device == "cpu"
    assert worker_thread.loads == [(target, {"device": "cpu", "dtype": None, "backend": "auto",
                                             "trust_remote_code": False, "allow_pickle": False})]
    assert statuses == [f"Loading {target}…"]
    request = GenerationRequest(request_id=1, model=target, conversation="hello",
                                spec=SpecConfig(method="draft-model", k=2, draft=draft), max_new_tokens=6)
    with qtbot.waitSignal(worker.generation_finished, timeout=WAIT_MS) as finished:
        worker_thread.window.generation_requested.emit(request)
    assert finished.args[0] == 1 and finished.args[1].stats.committed_tokens > 0
    assert statuses[1] == f"Loading draft model {draft}…"  # Engine.on_status, wired by the worker
    assert len(worker_thread.loads) == 1  # the target stayed loaded


def test_a_refused_setting_fails_the_comparison_before_any_run(qtbot, worker_thread, tiny_pair):
    target, _ = tiny_pair
    worker = worker_thread.worker
    worker_thread.window.load_options_changed.emit(LoadOptions(device="cpu"))
    advanced = []
    worker.comparison_advanced.connect(lambda *args: advanced.append(args))
    request = ComparisonRequest(request_id=7, model=target, prompt="hi",
                                specs=(SpecConfig(method="prompt-lookup", k=2),
                                       SpecConfig(method="early-exit", k=2, params={"layers": 9})))
    with qtbot.waitSignal(worker.comparison_failed, timeout=WAIT_MS) as failed:
        worker_thread.window.comparison_requested.emit(request)
    assert failed.args[0] == 7 and failed.args[1].startswith("early-exit:k=2,layers=9: ")
    assert advanced == []


def test_a_model_with_its_own_code_is_asked_about_before_the_loader_runs(qtbot, worker_thread, tmp_path):
    folder = tmp_path / "custom"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "auto_map": {"AutoModel": "m.M"}}))
    (folder / "model.safetensors").write_bytes(b"")
    worker = worker_thread.worker
    with qtbot.waitSignal(worker.consent_needed, timeout=WAIT_MS) as asked:
        worker_thread.window.load_requested.emit(str(folder))
    assert asked.args[:2] == [str(folder), REMOTE_CODE] and "own Python code" in asked.args[2]
    assert worker_thread.loads == []


def test_a_servers_revised_rounds_reach_the_window_after_its_rounds_and_before_its_end(qtbot):
    thread = WorkerThread(lambda name, progress=None, **options: RevisingEngine())
    window = Window()
    window.load_requested.connect(thread.worker.load)
    window.generation_requested.connect(thread.worker.generate)
    seen = []
    for name in ("generation_started", "round_verified", "rounds_revised", "generation_finished"):
        getattr(thread.worker, name).connect(lambda rid, event, name=name: seen.append((name, rid, event)))
    try:
        with qtbot.waitSignal(thread.worker.generation_finished, timeout=WAIT_MS):
            window.load_requested.emit("default")
            window.generation_requested.emit(GenerationRequest(request_id=5, model="default", conversation="hi"))
        assert [(name, rid) for name, rid, _ in seen] == ([("generation_started", 5)] + [("round_verified", 5)] * 8
                                                          + [("rounds_revised", 5), ("generation_finished", 5)])
        assert seen[-2][2] == revised_events.revision()
    finally:
        thread.shutdown()
    assert not thread.thread.isRunning()
