"""`specscope bench --concurrency` (engine.measure.concurrency) against a tiny stdlib OpenAI-compatible server that
says it is vLLM and counts the requests it serves at once: N streams really run at once, one row per N is
printed (and written to --json), the server's per-request speculation is summed per batch, --serve's two servers
give the ratio lines and the verdict, and what is refused before anything starts. The real vLLM runs in
tests/e2e/test_vllm_server.py."""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
import time
from types import SimpleNamespace

import pytest

from json_handler import JsonHandler

from engine.cli.main import build_parser, main
from engine.core.config import SamplingConfig
from engine.core.errors import ConfigError, ServerError
from engine.core.stats import ServerStats
from engine.measure import concurrency
from engine.measure.concurrency import (BatchRow, Served, Sweep, batch_row, check_args, in_turn, one_batch,
                                        parse_levels, ratios, verdict)
from engine.measure.prompts import Prompt
from engine.measure.vllm_server import MISSING_VLLM
from engine.remote.metrics import SpecCounters

WORDS = ["Served", " at", " once", "."]
STEPS = {"num_spec_steps": 2, "num_draft_tokens": 6, "num_accepted_draft_tokens": 3}


class _Server(JsonHandler):
    """/v1/models names one model owned by vllm; a chat streams WORDS after `delay` seconds, then the usage and (with
    `speculates`) this request's speculative decoding metrics; `fail_after` requests, it sends an error instead.
    `active`/`most` count the chats served at once."""

    delay, speculates, fail_after = 0.05, True, None
    lock = threading.Lock()
    active = most = served = 0

    def do_GET(self):
        if self.path == "/v1/models":
            body = json.dumps({"object": "list", "data": [{"id": "fake", "owned_by": "vllm"}]}).encode()
            return self._send(200, body)
        self._send(404, b"{}")

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        cls = type(self)
        with cls.lock:
            cls.active += 1
            cls.most = max(cls.most, cls.active)
            cls.served += 1
            failing = cls.fail_after is not None and cls.served > cls.fail_after
        time.sleep(cls.delay)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        chunks = [{"error": {"message": "out of memory"}}] if failing else self._chunks()
        for chunk in chunks:
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        with cls.lock:
            cls.active -= 1

    def _chunks(self) -> list[dict]:
        chunks = [{"choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}]} for word in WORDS]
        chunks[-1]["choices"][0]["finish_reason"] = "stop"
        last = {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": len(WORDS)}}
        if self.speculates:
            last["metrics"] = {"speculative_decoding": STEPS}
        return chunks + [last]


@contextlib.contextmanager
def fake_server(**settings):
    handler = type("Handler", (_Server,), {"lock": threading.Lock(), **settings})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield SimpleNamespace(url=f"http://127.0.0.1:{server.server_address[1]}", handler=handler)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def bench_args(*argv: str):
    return build_parser().parse_args(["bench", *argv])


def table_rows(out: str) -> dict[int, list[str]]:
    """The rows of the printed tables whose first cell is N, by N (the last table's where several)."""
    rows = {}
    for line in out.splitlines():
        cells = [cell.strip() for cell in line.strip("│┃ ").split("│")]
        if len(cells) == 8 and cells[0].isdigit():
            rows[int(cells[0])] = cells
    return rows


# ------------------------------------------------------------------ what is refused


def test_levels_are_positive_whole_numbers_ascending_once_each():
    assert parse_levels("4,1, 2,2") == [1, 2, 4]
    for text, words in (("1,x", "whole numbers"), ("", "whole numbers"), ("1.5", "whole numbers"),
                        ("0", "from 1 to"), ("2,-4", "from 1 to"), ("100000", "from 1 to")):
        with pytest.raises(ConfigError, match=words):
            parse_levels(text)


@pytest.mark.parametrize("argv, words", [
    (("--concurrency", "1,4"), "needs --model http://"),
    (("--model", "default", "--concurrency", "2"), "needs --model http://"),
    (("--model", "http://127.0.0.1:8000", "--concurrency", "1", "--serve", "vllm"), "drop --model"),
    (("--serve", "vllm"), "give --concurrency"),
    (("--model", "http://127.0.0.1:8000", "--concurrency", "1", "--config", "prompt-lookup"), "drop --config"),
])
def test_what_concurrency_refuses_before_anything_starts(argv, words):
    with pytest.raises(ConfigError, match=words):
        check_args(bench_args(*argv))


def test_a_local_model_with_concurrency_is_a_clear_error_on_the_command_line(capsys):
    assert main(["bench", "--concurrency", "1,2"]) == 2
    assert "measures a server's concurrent streams and needs --model http://" in capsys.readouterr().err
    assert main(["bench", "--model", "default"]) == 2  # and without it, bench still needs its prompts
    assert "--prompts" in capsys.readouterr().err


def test_serve_vllm_without_vllm_says_how_to_get_it(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("SPECSCOPE_VLLM_PYTHON", str(tmp_path / "no-python"))
    assert main(["bench", "--concurrency", "1,4", "--serve", "vllm"]) == 2
    assert MISSING_VLLM in capsys.readouterr().err


# ------------------------------------------------------------------ against a server


def test_n_streams_run_at_once_and_each_n_prints_its_row(tmp_path, capsys):
    out_file = tmp_path / "figures.json"
    with fake_server() as server:
        code = main(["bench", "--model", server.url + "/v1", "--concurrency", "4,1", "--max-new-tokens", "8",
                     "--json", str(out_file)])
        most = server.handler.most
    out, err = capsys.readouterr()
    assert code == 0, err
    assert most == 4  # the four streams of N=4 were on the server together
    rows = table_rows(out)
    assert sorted(rows) == [1, 4]
    assert rows[4][1] == str(4 * len(WORDS)) and rows[4][6] == "12/24" and rows[4][7] == "50%"
    assert float(rows[1][3]) > 0 and float(rows[4][3]) > 0  # aggregate tok/s
    assert "speculation figures from: request" in out
    document = json.loads(out_file.read_text())
    (served,) = document["servers"]
    assert document["mode"] == "concurrency" and document["levels"] == [1, 4] and document["ratios"] is None
    assert [row["n"] for row in served["rows"]] == [1, 4] and served["rows"][1]["tokens"] == 16
    assert served["rows"][1]["acceptance"] == 0.5 and len(served["rows"][1]["stream_tok_per_s"]) == 4


def test_a_server_that_reports_no_speculation_has_no_acceptance():
    with fake_server(speculates=False, delay=0.0) as server:
        row = one_batch(server.url, 2, [Prompt("a", "chat", "Hi")], 8, SamplingConfig())
    assert (row.n, row.tokens, row.drafted, row.acceptance, row.figures_from) == (2, 8, None, None, "")


def test_a_failed_stream_fails_the_batch_naming_it():
    with fake_server(fail_after=1, delay=0.0) as server, pytest.raises(ServerError, match="of 2 failed: .*memory"):
        one_batch(server.url, 2, [Prompt("a", "chat", "Hi")], 8, SamplingConfig())


def _reply(source, drafted, accepted, request=(None, None), tokens=10, tok_per_s=20.0):
    server = ServerStats(server="llama-server", url="u", source=source, drafts=2, draft_tokens=drafted,
                         accepted_tokens=accepted, accepted_per_position=(), completion_tokens=tokens,
                         request_draft_tokens=request[0], request_accepted_tokens=request[1])
    return SimpleNamespace(server=server, stats=SimpleNamespace(committed_tokens=tokens, tok_per_s=tok_per_s))


def test_a_batch_sums_the_streams_own_figures_else_takes_the_servers_counters_around_it():
    # llama-server with --metrics: each reply's own timings, never the overlapping server-wide deltas
    row = batch_row(2, 0.5, [_reply("metrics", 99, 99, (4, 3)), _reply("timings", 6, 2, tok_per_s=10.0)])
    assert (row.tokens, row.drafted, row.accepted, row.figures_from) == (20, 10, 5, "timings")
    assert (row.aggregate_tok_per_s, row.median_stream_tok_per_s, row.min_stream_tok_per_s) == (40.0, 15.0, 10.0)
    counters = SpecCounters(drafts=5, draft_tokens=15, accepted_tokens=9, accepted_per_position=())
    row = batch_row(2, 1.0, [_reply("metrics", 15, 9), _reply("metrics", 15, 9)], counters)
    assert (row.drafted, row.accepted, row.figures_from) == (15, 9, "metrics (the batch's)")
    assert batch_row(1, 1.0, [_reply("", 0, 0)]).figures_from == ""
    # a stream that reported nothing is said, not counted as drafting nothing
    row = batch_row(2, 1.0, [_reply("timings", 6, 2), _reply("", 0, 0)])
    assert (row.drafted, row.accepted, row.figures_from) == (6, 2, "timings (1 of 2 streams)")


def test_prompts_take_their_categories_in_turn():
    prompts = [Prompt(str(i), category, category + str(i)) for i, category in enumerate("aabbbc")]
    assert [p.id for p in in_turn(prompts)] == ["0", "2", "5", "1", "3", "4"]


# ------------------------------------------------------------------ --serve: plain against speculation


def _sweep(*aggregate_and_stream):
    return Sweep("s", "u", tuple(BatchRow(n, int(tokens), 1.0, (stream,))
                                 for n, (tokens, stream) in zip((1, 4, 8), aggregate_and_stream)))


def test_the_ratios_and_where_speculation_stops_paying():
    plain, speculating = _sweep((10, 10), (30, 8), (50, 6)), _sweep((18, 18), (36, 9), (45, 5))
    rows = ratios(plain, speculating)
    assert [(r["n"], r["aggregate"], r["per_stream"]) for r in rows] == \
        [(1, 1.8, 1.8), (4, 1.2, 9 / 8), (8, 0.9, 5 / 6)]
    assert verdict(rows) == "speculation stops paying at N=8: its aggregate tok/s is below plain's at N=8"
    assert verdict(rows[:2]) == "speculation pays at every N measured (1, 4)"
    assert verdict(rows[2:]).startswith("speculation pays at no N measured (8)")
    assert verdict([rows[2] | {"n": 1}, rows[0] | {"n": 4}]).startswith("speculation pays at N=4 and not at N=1")


def test_serve_runs_the_sweep_against_plain_and_speculation_and_prints_the_ratios(monkeypatch, capsys):
    started = []

    def served(label, **settings):
        def start(logs):
            started.append((label, logs))
            return fake_server(**settings)
        return Served(label, start)

    pair = (served("vLLM plain", speculates=False, delay=0.05), served("vLLM n-gram k=3", delay=0.0))  # it pays
    monkeypatch.setattr(concurrency, "served_pair", lambda kind, streams: pair if (kind, streams) == ("vllm", 2)
                        else pytest.fail(f"{kind} {streams}"))
    assert main(["bench", "--concurrency", "1,2", "--serve", "vllm", "--max-new-tokens", "8"]) == 0
    out = capsys.readouterr().out
    assert [label for label, _ in started] == ["vLLM plain", "vLLM n-gram k=3"]
    assert out.index("vLLM plain") < out.index("vLLM n-gram k=3") < out.index("N=1: speculation / plain = ")
    assert "N=2: speculation / plain = " in out and "a stream (median)" in out
    assert out.rstrip().endswith("speculation pays at every N measured (1, 2)")
