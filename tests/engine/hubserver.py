"""A fake Hugging Face Hub on 127.0.0.1, speaking just enough of its protocol for huggingface_hub downloads:
model info (/api/models/{repo}/revision/{rev}) and files (/{repo}/resolve/{rev}/{path}) with ETag,
X-Repo-Commit, Content-Length and Range. Gated repos want `Authorization: Bearer <token>`."""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse


@dataclass
class FakeRepo:
    files: dict[str, bytes]
    sha: str = "0123456789abcdef0123456789abcdef01234567"
    token: str | None = None  # gated: this token is needed


@dataclass
class FakeHub:
    repos: dict[str, FakeRepo] = field(default_factory=dict)
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)  # method, path, authorization
    hold: dict[str, threading.Event] = field(default_factory=dict)  # GET of this file waits for its event
    server: ThreadingHTTPServer | None = None
    thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def gets(self, filename: str) -> int:
        return sum(1 for method, path, _ in self.requests if method == "GET" and path.endswith("/" + filename))

    def start(self) -> "FakeHub":
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _send(self, status, body=b"", headers=None):
                self.send_response(status)
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _repo(self, repo_id):
                repo = hub.repos.get(repo_id)
                if repo is None:
                    self._send(404, b"{}", {"X-Error-Code": "RepoNotFound"})
                    return None
                if repo.token and self.headers.get("Authorization") != f"Bearer {repo.token}":
                    self._send(403, b"{}", {"X-Error-Code": "GatedRepo", "X-Error-Message": "gated"})
                    return None
                return repo

            def _handle(self):
                path = unquote(urlparse(self.path).path)
                hub.requests.append((self.command, path, self.headers.get("Authorization")))
                parts = path.strip("/").split("/")
                if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] == "revision":
                    repo_id = "/".join(parts[2:4])
                    repo = self._repo(repo_id)
                    if repo is None:
                        return
                    siblings = [{"rfilename": name, "size": len(data)} for name, data in sorted(repo.files.items())]
                    body = json.dumps({"id": repo_id, "sha": repo.sha, "siblings": siblings}).encode()
                    self._send(200, body, {"Content-Type": "application/json"})
                elif len(parts) >= 5 and parts[2] == "resolve":
                    repo = self._repo("/".join(parts[:2]))
                    if repo is None:
                        return
                    name = "/".join(parts[4:])
                    if name not in repo.files:
                        self._send(404, b"", {"X-Error-Code": "EntryNotFound"})
                        return
                    data = repo.files[name]
                    if self.command == "GET" and name in hub.hold:
                        hub.hold[name].wait(10)
                    headers = {"ETag": f'"{hashlib.sha256(data).hexdigest()}"', "X-Repo-Commit": repo.sha,
                               "Accept-Ranges": "bytes"}
                    start = 0
                    ranged = self.headers.get("Range")
                    if ranged and ranged.startswith("bytes="):
                        start = int(ranged[6:].split("-")[0] or 0)
                        headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
                        self._send(206, data[start:], headers)
                    else:
                        self._send(200, data, headers)
                else:
                    self._send(404, b"")

            do_GET = do_HEAD = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)
