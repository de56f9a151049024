"""A real llama-server started here on 127.0.0.1 with the built-in GGUF (tests/e2e/llama_server_kit.py), once
plain and once speculating (n-gram, --metrics): the chat streams through engine.remote.engine, cancel works, the
figures SpecScope shows equal the server's own counters for that request (its /metrics, read here before
and after, and the response's timings), and every failure ends in one clear message with the partial reply
kept: the server killed mid-reply, a closed port, a plain HTTP server that is not OpenAI-compatible, a
server gone silent, /metrics off. The CLI's exit status is checked on the same failures."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
import time

import pytest

from engine.core.config import SamplingConfig, SpecConfig
from engine.core.errors import ConfigError, ServerError
from engine.core.events import GenerationFinished, GenerationStarted, RoundVerified
from engine.remote.engine import load_remote
from engine.remote.metrics import counters_from_metrics
from engine.models.sources import default_model_gguf
from json_handler import JsonHandler
from llama_server_kit import SKIP_REASON, LlamaServer, closed_port, find_llama_server

needs_server = pytest.mark.skipif(find_llama_server() is None, reason=SKIP_REASON)

# a reply that repeats its prompt, so that n-gram drafting finds matches
REPEAT = ("Repeat this list exactly, twice: apple, banana, cherry, date, elderberry, fig, grape, "
          "apple, banana, cherry, date, elderberry, fig, grape.")
SPEC_ARGS = ("--spec-type", "ngram-simple")


@pytest.fixture(scope="module")
def model_path():
    return default_model_gguf()


@pytest.fixture(scope="module")
def plain_server(model_path, tmp_path_factory):
    with LlamaServer(model_path, ("--metrics",), log_dir=tmp_path_factory.mktemp("plain")) as server:
        yield server


@pytest.fixture(scope="module")
def spec_server(model_path, tmp_path_factory):
    with LlamaServer(model_path, ("--metrics", *SPEC_ARGS), log_dir=tmp_path_factory.mktemp("spec")) as server:
        yield server


def run(engine, prompt, **kwargs):
    events = list(engine.generate(prompt, **kwargs))
    assert isinstance(events[0], GenerationStarted) and isinstance(events[-1], GenerationFinished)
    return events[0], [e for e in events if isinstance(e, RoundVerified)], events[-1]


# ------------------------------------------------------------------ chat

@needs_server
def test_plain_server_chat_streams(plain_server):
    engine = load_remote(plain_server.url + "/v1")
    assert engine.server.kind == "llama-server" and engine.server.metrics
    assert engine.target.context_length == 2048
    started, rounds, finished = run(engine, [{"role": "user", "content": "Name three colours."}],
                                    system="Answer in one short line.", max_new_tokens=24)
    assert started.method == "none" and any("tokens are shown plain" in w for w in started.warnings)
    assert rounds and all(r.draft_ids == () and len(r.committed_ids) == 1 for r in rounds)
    assert all(r.committed_ids[0] >= 0 for r in rounds)  # llama-server names each token's id
    assert finished.text == "".join(r.text for r in rounds) and finished.text.strip()
    assert finished.stop_reason in ("eos", "max-new-tokens") and finished.error is None
    # the server counts the end-of-sequence token it generated but does not stream; its count is the reply's, as a
    # local reply's counts its end of sequence
    assert finished.server.completion_tokens == len(rounds) + (finished.stop_reason == "eos")
    assert finished.stats.committed_tokens == finished.server.completion_tokens
    assert finished.server.source == ""  # a plain server: no speculation to report
    assert finished.stats.drafted_tokens == 0 and finished.stats.ttft_seconds > 0
    assert finished.server.server_prompt_seconds > 0 and finished.server.server_tok_per_s > 0
    assert finished.server.settings == (("speculative", "off"), ("speculative.types", "none"))


@needs_server
def test_greedy_reply_is_the_servers_own_and_is_repeatable(plain_server):
    engine = load_remote(plain_server.url)
    one = run(engine, "Count from one to five.", max_new_tokens=16)[2]
    two = run(engine, "Count from one to five.", max_new_tokens=16, sampling=SamplingConfig(seed=1))[2]
    assert one.output_ids == two.output_ids and one.stop_reason == "max-new-tokens"
    assert one.stats.committed_tokens == 16


@needs_server
def test_stop_strings_and_sampling_reach_the_server(plain_server):
    engine = load_remote(plain_server.url)
    free = run(engine, "Count from 1 to 9, separated by commas.", max_new_tokens=30)[2]
    assert "3" in free.text
    stopped = run(engine, "Count from 1 to 9, separated by commas.", max_new_tokens=30, stop_strings=("3",))[2]
    assert "3" not in stopped.text and stopped.text == free.text[: len(stopped.text)]
    sampled = run(engine, "Say something.", max_new_tokens=8,
                  sampling=SamplingConfig(temperature=0.9, top_k=20, top_p=0.9, seed=7))[2]
    again = run(engine, "Say something.", max_new_tokens=8,
                sampling=SamplingConfig(temperature=0.9, top_k=20, top_p=0.9, seed=7))[2]
    assert sampled.output_ids == again.output_ids  # the seed reached the server


@needs_server
def test_cancel_closes_the_stream_and_the_server_stays_usable(plain_server):
    engine = load_remote(plain_server.url)
    cancel = threading.Event()
    rounds, finished = [], None
    for event in engine.generate("Write a long story about the sea.", max_new_tokens=400, cancel=cancel):
        if isinstance(event, RoundVerified):
            rounds.append(event)
            if len(rounds) == 5:
                cancel.set()
        elif isinstance(event, GenerationFinished):
            finished = event
    assert finished.stop_reason == "cancelled" and finished.error is None
    assert 5 <= len(rounds) < 400 and finished.text == "".join(r.text for r in rounds)
    assert run(engine, "Hi", max_new_tokens=4)[2].stats.committed_tokens == 4


@needs_server
def test_own_methods_are_refused_and_noted(plain_server):
    """llama-server can't verify SpecScope's drafts (no log-probabilities of given tokens): told apart in one line."""
    engine = load_remote(plain_server.url)
    with pytest.raises(ConfigError, match="llama-server returns no log-probabilities of tokens it is given"):
        engine.validate(SpecConfig(method="prompt-lookup", k=4))
    started = run(engine, "Hi", max_new_tokens=2, spec=SpecConfig(method="prompt-lookup", k=4))[0]
    assert any("prompt-lookup:k=4 is ignored" in w for w in started.warnings)


# ------------------------------------------------------------------ the server's figures

@needs_server
def test_spec_figures_equal_the_servers_counters_for_the_request(spec_server):
    engine = load_remote(spec_server.url)
    assert engine.spec_settings_words() == "speculative = on"
    before = counters_from_metrics(spec_server.get("/metrics"), "llamacpp")
    started, rounds, finished = run(engine, REPEAT, max_new_tokens=96)
    after = counters_from_metrics(spec_server.get("/metrics"), "llamacpp")
    delta = after.minus(before)
    server = finished.server
    assert server.source == "metrics" and delta.draft_tokens > 0
    assert (server.drafts, server.draft_tokens, server.accepted_tokens) == \
        (delta.drafts, delta.draft_tokens, delta.accepted_tokens)
    assert server.accepted_per_position == delta.accepted_per_position
    assert (server.request_draft_tokens, server.request_accepted_tokens) == \
        (delta.draft_tokens, delta.accepted_tokens)  # the response's timings say the same
    assert finished.stats.drafted_tokens == delta.draft_tokens
    assert finished.stats.accepted_tokens == delta.accepted_tokens
    assert finished.stats.per_position_acceptance == tuple(a / delta.drafts for a in delta.accepted_per_position)
    assert server.per_position_acceptance == finished.stats.per_position_acceptance
    assert ("speculative", "on") in server.settings
    assert all(r.draft_ids == () for r in rounds)  # statuses are never invented
    print(f"\nserver figures: {server.accepted_tokens}/{server.draft_tokens} accepted in {server.drafts} drafts, "
          f"per position {[round(p, 2) for p in server.per_position_acceptance]}, "
          f"{finished.stats.tok_per_s:.1f} tok/s, TTFT {finished.stats.ttft_seconds * 1000:.0f} ms")


@needs_server
def test_figures_come_from_timings_when_metrics_are_off(model_path, tmp_path):
    with LlamaServer(model_path, SPEC_ARGS, log_dir=tmp_path) as server:
        engine = load_remote(server.url)
        assert not engine.server.metrics
        finished = run(engine, REPEAT, max_new_tokens=64)[2]
    assert finished.server.source == "timings" and finished.server.draft_tokens > 0
    assert finished.server.accepted_per_position == () and "--metrics" in finished.server.note
    assert finished.stats.drafted_tokens == finished.server.draft_tokens


# ------------------------------------------------------------------ failures

@needs_server
def test_server_killed_mid_reply_keeps_the_partial_reply(model_path, tmp_path):
    with LlamaServer(model_path, (), log_dir=tmp_path) as server:
        engine = load_remote(server.url)
        rounds, finished = [], None
        for event in engine.generate("Write a long story about the sea.", max_new_tokens=400):
            if isinstance(event, RoundVerified):
                rounds.append(event)
                if len(rounds) == 5:
                    server.kill()
            elif isinstance(event, GenerationFinished):
                finished = event
    assert finished.stop_reason == "server-error"
    assert "mid-reply" in finished.error and "partial reply is kept" in finished.error
    assert len(rounds) >= 5 and finished.text == "".join(r.text for r in rounds)


def test_a_closed_port_is_said_plainly():
    with pytest.raises(ServerError, match="connection refused"):
        load_remote(f"http://127.0.0.1:{closed_port()}")


class _Handler(JsonHandler):
    """A web server that is not an inference server (or, with `slow`, one that goes silent mid-reply)."""

    slow = False
    seen_auth: list = []

    def do_GET(self):
        type(self).seen_auth.append(self.headers.get("Authorization"))
        if self.slow and self.path == "/v1/models":
            return self._send(200, json.dumps({"object": "list", "data": [{"id": "slow-model"}]}).encode())
        self._send(200, b"<html><body>Hello, I am a blog.</body></html>", "text/html")

    def do_POST(self):
        type(self).seen_auth.append(self.headers.get("Authorization"))
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        chunk = {"choices": [{"index": 0, "delta": {"content": "Hello"}, "finish_reason": None}]}
        self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.flush()
        time.sleep(3)  # silent past the client's read timeout


@pytest.fixture
def web_server():
    def start(slow: bool):
        handler = type("Handler", (_Handler,), {"slow": slow, "seen_auth": []})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        servers.append((server, thread))
        return server, handler

    servers = []
    yield start
    for server, thread in servers:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_a_plain_web_server_is_not_openai_compatible(web_server):
    server, _ = web_server(slow=False)
    with pytest.raises(ServerError, match="not an OpenAI-compatible server"):
        load_remote(f"http://127.0.0.1:{server.server_address[1]}")


def test_a_silent_server_times_out_with_the_partial_reply(web_server):
    server, handler = web_server(slow=True)
    engine = load_remote(f"http://127.0.0.1:{server.server_address[1]}", api_key="sk-test-1234",
                         read_timeout=1.0)
    assert engine.server.kind == "openai-compatible"
    _, rounds, finished = run(engine, "Hi", max_new_tokens=8)
    assert finished.stop_reason == "server-error" and "went silent" in finished.error
    assert finished.text == "Hello" and [r.text for r in rounds] == ["Hello"]
    assert "no /metrics" in finished.server.note
    assert set(handler.seen_auth) == {"Bearer sk-test-1234"}  # the key went to this server, on every request


def test_no_key_is_sent_where_none_is_saved(web_server, monkeypatch):
    from engine.models import secrets
    monkeypatch.setattr(secrets, "server_key", lambda origin: "sk-other" if origin == "https://x.example:443"
                        else None)
    server, handler = web_server(slow=True)
    load_remote(f"http://127.0.0.1:{server.server_address[1]}")
    assert set(handler.seen_auth) == {None}


# ------------------------------------------------------------------ the command line

def _cli(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "engine.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_cli_closed_port_exits_2_with_one_line():
    result = _cli("generate", "--model", f"http://127.0.0.1:{closed_port()}", "Hi")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "connection refused" in result.stderr


def test_cli_refuses_plain_http_to_another_machine():
    result = _cli("generate", "--model", "http://192.0.2.1:8000", "Hi")
    assert result.returncode == 2 and "only to this machine" in result.stderr


@needs_server
def test_cli_generate_on_a_spec_server(spec_server):
    result = _cli("generate", "--model", spec_server.url, "--max-new-tokens", "48", REPEAT)
    assert result.returncode == 0, result.stderr
    assert "llama-server /metrics" in result.stdout and "drafted tokens accepted" in result.stdout
    json_run = _cli("generate", "--json", "--model", spec_server.url, "--max-new-tokens", "8", "Hi")
    finished = json.loads(json_run.stdout.splitlines()[-1])
    assert finished["type"] == "finished" and finished["server"]["server"] == "llama-server"


# ------------------------------------------------------------------ the app

@needs_server
def test_the_apps_worker_loads_and_chats_with_a_server(spec_server, qtbot):
    """The worker's real loader (engine.runtime.load_engine, after the safety check) on a server address."""
    from gui.worker import EngineWorker, GenerationRequest
    worker = EngineWorker()
    with qtbot.waitSignal(worker.model_loaded, timeout=60_000) as loaded:
        worker.load(spec_server.url)
    info = loaded.args[0]
    assert "llama-server" in info.name and info.device == spec_server.url and info.context_length == 2048
    finished = []
    worker.generation_finished.connect(lambda rid, event: finished.append(event))
    worker.generate(GenerationRequest(1, spec_server.url, [{"role": "user", "content": REPEAT}], max_new_tokens=48))
    assert finished and finished[0].server.source == "metrics"
    assert finished[0].stats.drafted_tokens == finished[0].server.draft_tokens


def test_the_apps_worker_says_why_a_server_cannot_load(qtbot):
    from gui.worker import EngineWorker
    worker = EngineWorker()
    with qtbot.waitSignal(worker.load_failed, timeout=30_000) as failed:
        worker.load(f"http://127.0.0.1:{closed_port()}")
    assert "connection refused" in failed.args[1]


def test_add_server_in_the_model_manager(qtbot, tmp_path, monkeypatch):
    from PySide6.QtCore import QSettings
    from engine.models import secrets
    from gui import theme
    from gui.persistence.settings import AppSettings
    from gui.views.dialogs.models import ModelManager
    saved = {}
    monkeypatch.setattr(secrets, "set_server_key", lambda origin, key: saved.setdefault(origin, key))
    settings = AppSettings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    manager = ModelManager(settings, theme.LIGHT)
    qtbot.addWidget(manager)
    try:
        with qtbot.waitSignal(manager.load_requested, timeout=5_000) as asked:
            assert manager.add_server("http://localhost:8080/v1", api_key="sk-abc123")
        assert asked.args[:2] == ["http://localhost:8080", None]
        assert saved == {"http://localhost:8080": "sk-abc123"}
        assert not manager.add_server("http://10.1.2.3:8000")
        assert "only to this machine" in manager.status.text()
    finally:
        manager.shutdown()


@needs_server
def test_bench_runs_a_server_beside_the_local_configs(spec_server, tmp_path, capsys):
    from engine.cli.main import main
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": REPEAT}) + "\n" + json.dumps({"prompt": "Name three colours."}))
    out = tmp_path / "out.json"
    label = f"remote:url={spec_server.url}"
    code = main(["bench", "--model", "default", "--prompts", str(prompts), "--max-new-tokens", "32",
                 "--config", label, "--json", str(out)])
    printed = capsys.readouterr().out
    assert code == 0
    configs = json.loads(out.read_text())["configs"]
    assert set(configs) == {"none", label}
    remote, local = configs[label]["all"], configs["none"]["all"]
    assert local["figures_from"] == "measured here"
    assert "llama-server's /metrics" in remote["figures_from"] and "measured here" in remote["figures_from"]
    assert remote["prompts"] == 2 and remote["drafted_tokens"] > 0 and remote["theoretical_speedup"] is None
    assert f"{label}: tok/s and TTFT measured here" in printed
    print(f"\nsame GGUF, greedy: SpecScope llama.cpp plain {local['tok_per_s']:.1f} tok/s, llama-server "
          f"(n-gram) {remote['tok_per_s']:.1f} tok/s, outputs identical {remote['identical_to_none']}/2")


@needs_server
def test_bench_with_the_server_as_the_model(plain_server, tmp_path, capsys):
    from engine.cli.main import main
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "Name three colours."}))
    out = tmp_path / "out.json"
    assert main(["bench", "--model", plain_server.url, "--prompts", str(prompts), "--max-new-tokens", "8",
                 "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    (label, rows), = document["configs"].items()
    assert label == f"remote:url={plain_server.url}" and "llama-server" in rows["all"]["figures_from"]
    assert document["backend"] == "remote"
    assert main(["bench", "--model", plain_server.url, "--prompts", str(prompts), "--config", "prompt-lookup:k=3"]) == 2
    assert "llama-server returns no log-probabilities of tokens it is given" in capsys.readouterr().err
