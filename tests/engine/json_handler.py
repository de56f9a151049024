"""The base of the tests' fake HTTP servers (an OpenAI-compatible server, a web server that is not one): quiet,
and one way to send a whole answer."""

from __future__ import annotations

import http.server


class JsonHandler(http.server.BaseHTTPRequestHandler):
    """A request handler that logs nothing and answers with `_send` (JSON unless told otherwise)."""

    def log_message(self, *args):
        pass

    def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
