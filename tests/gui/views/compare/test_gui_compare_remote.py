"""A server's model as a setting in the compare window: plain decoding here beside `remote:url=…` on a tiny
stdlib OpenAI-compatible server (streamed SSE), the remote row labelled with where its figures came from, in
the table and in the exports."""

import csv
import http.server
import json
import threading

import pytest

from json_handler import JsonHandler

from engine.measure.compare import with_plain_first
from engine.core.config import SpecConfig, parse_spec
from engine.core.errors import ConfigError
from fakes import FakeEngine
from gui.views.compare.parts import SettingRow

WAIT_MS = 10_000
WORDS = ["Served", " from", " elsewhere", "."]


class _FakeServer(JsonHandler):
    """/v1/models lists one model; /v1/chat/completions streams WORDS as SSE chunks; the rest is 404."""

    posts: list = []

    def do_GET(self):
        if self.path == "/v1/models":
            return self._send(200, json.dumps({"object": "list", "data": [{"id": "fake-model"}]}).encode())
        self._send(404, b"{}")

    def do_POST(self):
        type(self).posts.append(json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0)))))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for i, word in enumerate(WORDS):
            last = i == len(WORDS) - 1
            chunk = {"choices": [{"index": 0, "delta": {"content": word}, "finish_reason": "stop" if last else None}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


@pytest.fixture
def server_url():
    handler = type("Handler", (_FakeServer,), {"posts": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def test_a_remote_setting_parses_labels_and_stays_beside_plain():
    spec = parse_spec("remote:url=http://127.0.0.1:8080")
    assert spec.remote_url == "http://127.0.0.1:8080" and not spec.speculative
    assert spec.label() == "remote:url=http://127.0.0.1:8080" and parse_spec(spec.label()) == spec
    assert with_plain_first([spec]) == [SpecConfig(), spec]  # not dropped as a second plain run
    with pytest.raises(ConfigError, match="remote:url="):
        parse_spec("remote:host=x")
    with pytest.raises(ConfigError, match="takes no method"):
        SpecConfig(method="prompt-lookup", backend="remote:url=http://127.0.0.1:8080")


def test_a_setting_row_on_a_server_takes_a_url_or_a_remote_spec(qtbot):
    row = SettingRow(SpecConfig(method="prompt-lookup", k=3))
    qtbot.addWidget(row)
    assert row.url.isHidden()
    row.backend.setCurrentIndex(row.backend.findData("remote:"))
    assert not row.url.isHidden() and row.k.isHidden() and not row.method.isEnabled()
    with pytest.raises(ConfigError, match="remote:url="):
        row.spec()  # no URL yet
    row.url.setText("http://127.0.0.1:9000")
    assert row.spec() == parse_spec("remote:url=http://127.0.0.1:9000")
    row.url.setText("remote:url=http://127.0.0.1:9001")
    assert row.spec().remote_url == "http://127.0.0.1:9001"
    again = SettingRow(row.spec())
    qtbot.addWidget(again)
    assert again.on_server and again.url.text() == "http://127.0.0.1:9001" and again.spec() == row.spec()


def test_plain_and_a_remote_row_give_two_rows_the_remote_one_labelled_server(make_window, qtbot, server_url,
                                                                            tmp_path):
    url, handler = server_url
    window = make_window(FakeEngine())
    compare = window.open_compare()
    qtbot.addWidget(compare)
    compare.set_specs([parse_spec(f"remote:url={url}")])
    compare.prompt.setPlainText("Say where you run.")
    compare.max_new_tokens.setValue(12)
    with qtbot.waitSignal(compare.comparison_finished, timeout=WAIT_MS) as blocker:
        assert compare.run_comparison()
    session = blocker.args[0]
    assert [c.spec.label() for c in window.engine.calls] == ["none"]  # only plain ran on the local engine
    assert len(handler.posts) == 1 and handler.posts[0]["max_tokens"] == 12
    rows = session.rows()
    assert len(rows) == 2
    assert rows[0].figures_from == "measured here"
    assert rows[1].figures_from == f"the server at {url}" and rows[1].text == "".join(WORDS)
    assert rows[1].equality.startswith("not compared") and rows[1].divergence is None
    table = compare.table
    assert table.rowCount() == 2
    assert table.item(0, 0).text() == "plain decoding"
    assert table.item(1, 0).text() == f"remote:url={url} (figures: the server at {url})"
    assert "not compared" in table.item(1, 8).text()
    compare.export_csv(tmp_path / "summary.csv")
    compare.export_json(tmp_path / "summary.json")
    with open(tmp_path / "summary.csv", newline="", encoding="utf-8") as file:
        read = list(csv.DictReader(file))
    assert [(r["label"], r["figures_from"]) for r in read] == [("none", "measured here"),
                                                              (f"remote:url={url}", f"the server at {url}")]
    document = json.loads((tmp_path / "summary.json").read_text(encoding="utf-8"))
    assert [r["figures_from"] for r in document["rows"]] == ["measured here", f"the server at {url}"]
