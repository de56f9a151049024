"""Talking to an OpenAI-compatible inference server: the address rules, HTTP requests, the server-sent-events
stream of a chat completion, and what kind of server it is (llama-server, vLLM, SGLang, or another).

Rules: http only to this machine (localhost, 127.0.0.1, ::1), https otherwise; no user name, password,
query or fragment in the address; the API key (engine.models.secrets' per-server entry) goes in the Authorization
header of requests to that address only, and never into a message. Every read has a timeout; a stream is
cancelled by shutting its socket from a watcher thread (which ends with the stream).

Touches the network (stdlib http.client) and nothing else; no Qt. engine.remote.engine builds the engine on it.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import urllib.parse
from dataclasses import dataclass, field
from typing import Iterator

from engine.core.errors import ServerError
from engine.remote.metrics import metric_prefixes

LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")
CONNECT_TIMEOUT = 10.0
READ_TIMEOUT = 60.0  # a server silent this long mid-reply is given up on (the partial reply is kept)
MAX_BODY = 8 * 1024 * 1024  # the most we read of a non-streamed answer


@dataclass(frozen=True, slots=True)
class ServerAddress:
    scheme: str
    host: str
    port: int
    base: str  # the path before /v1 ("" for most servers)

    @property
    def origin(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    @property
    def url(self) -> str:
        return self.origin + self.base

    def path(self, endpoint: str) -> str:
        return self.base + endpoint


def parse_server_url(text: str) -> ServerAddress:
    """`http(s)://HOST:PORT[/prefix][/v1]` → a ServerAddress; ServerError with the rule that was broken."""
    parts = urllib.parse.urlsplit(text.strip())
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise ServerError(f"{text!r} is not a server address; give http(s)://HOST:PORT")
    if parts.username or parts.password:
        raise ServerError("put no user name or password in the server address; save an API key for it instead")
    if parts.query or parts.fragment:
        raise ServerError(f"a server address has no query or fragment: {text!r}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        raise ServerError(f"the port in {text!r} is not a number from 1 to 65535") from None
    if not host:
        raise ServerError(f"no host in {text!r}; give http(s)://HOST:PORT")
    if scheme == "http" and host.lower() not in LOCAL_HOSTS:
        raise ServerError(f"plain http is allowed only to this machine (localhost, 127.0.0.1); use https://{host}"
                          f"{':' + str(port) if port else ''} for another machine")
    base = parts.path.rstrip("/")
    if base.endswith("/v1"):
        base = base[: -len("/v1")]
    return ServerAddress(scheme, host.lower(), port or (443 if scheme == "https" else 80), base)


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self):
        try:
            return json.loads(self.body)
        except (ValueError, UnicodeDecodeError):
            return None


class ServerClient:
    """HTTP to one server address; `api_key` is sent to it and to nothing else."""

    def __init__(self, address: ServerAddress, api_key: str | None = None, *, read_timeout: float = READ_TIMEOUT,
                 connect_timeout: float = CONNECT_TIMEOUT) -> None:
        self.address = address
        self._api_key = api_key
        self.read_timeout = read_timeout
        self.connect_timeout = connect_timeout

    def _connection(self) -> http.client.HTTPConnection:
        a = self.address
        if a.scheme == "https":
            return http.client.HTTPSConnection(a.host, a.port, timeout=self.connect_timeout,
                                               context=ssl.create_default_context())
        return http.client.HTTPConnection(a.host, a.port, timeout=self.connect_timeout)

    def _headers(self, body: bytes | None) -> dict[str, str]:
        headers = {"Accept": "application/json, text/event-stream, text/plain", "User-Agent": "specscope"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def _open(self, method: str, endpoint: str, payload: dict | None):
        """Send a request; (connection, response). ServerError for an unreachable or silent server."""
        body = json.dumps(payload).encode() if payload is not None else None
        connection = self._connection()
        try:
            connection.connect()
            connection.sock.settimeout(self.read_timeout)
            connection.request(method, self.address.path(endpoint), body=body, headers=self._headers(body))
            return connection, connection.getresponse()
        except BaseException as exc:
            connection.close()
            raise ServerError(self.network_problem(exc)) from None

    def network_problem(self, exc: BaseException) -> str:
        """One sentence for a network failure (never the API key: it is in no exception's text)."""
        where = self.address.url
        if isinstance(exc, ConnectionRefusedError):
            return f"nothing answers at {where} (connection refused): is the server running, on that port?"
        if isinstance(exc, (socket.timeout, TimeoutError)):
            return f"the server at {where} did not answer within {self.read_timeout:.0f} s"
        if isinstance(exc, socket.gaierror):
            return f"cannot find the host {self.address.host!r}: check the address"
        if isinstance(exc, ssl.SSLError):
            return f"the secure connection to {where} failed ({exc.reason or 'TLS error'})"
        if isinstance(exc, (http.client.HTTPException, ConnectionError, OSError)):
            return f"the connection to {where} failed ({type(exc).__name__}: {exc})"
        raise exc

    def get(self, endpoint: str) -> Reply:
        return self._whole("GET", endpoint, None)

    def post(self, endpoint: str, payload: dict) -> Reply:
        """POST `payload` as JSON and read the whole answer (a non-streamed request)."""
        return self._whole("POST", endpoint, payload)

    def _whole(self, method: str, endpoint: str, payload: dict | None) -> Reply:
        connection, response = self._open(method, endpoint, payload)
        try:
            body = response.read(MAX_BODY)
        except (OSError, http.client.HTTPException) as exc:
            raise ServerError(self.network_problem(exc)) from None
        finally:
            connection.close()
        return Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, body)

    def stream(self, endpoint: str, payload: dict, cancel: threading.Event) -> "EventStream":
        """POST `payload` and return its server-sent events; ServerError when the server refuses it."""
        connection, response = self._open("POST", endpoint, payload)
        if response.status != 200:
            try:
                text = response.read(MAX_BODY)
            finally:
                connection.close()
            raise ServerError(f"the server refused the request (HTTP {response.status}): "
                              f"{error_text(text) or response.reason}")
        return EventStream(connection, response, cancel)


def error_text(body: bytes) -> str:
    """The message in an OpenAI-style error body ({"error": {"message": …}}), else its first line."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return body.decode("utf-8", "replace").strip().splitlines()[0][:300] if body.strip() else ""
    error = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(error, dict):
        return str(error.get("message") or error.get("detail") or error)[:300]
    return str(error)[:300]


class StreamCut(Exception):
    """The stream ended without its end marker, or the server went silent; `reason` is for the user."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class EventStream:
    """The `data:` payloads of a server-sent-events response, parsed as JSON, until `[DONE]`. Setting
    `cancel` shuts the socket (the blocked read returns at once) and the stream ends quietly."""

    connection: http.client.HTTPConnection
    response: http.client.HTTPResponse
    cancel: threading.Event
    _done: threading.Event = field(default_factory=threading.Event)

    def _watch(self) -> None:
        while not self._done.wait(0.05):
            if self.cancel.is_set():
                try:
                    self.connection.sock.shutdown(socket.SHUT_RDWR)
                except (OSError, AttributeError):
                    pass
                return

    def __iter__(self) -> Iterator[dict]:
        watcher = threading.Thread(target=self._watch, name="stream-cancel", daemon=True)
        watcher.start()
        try:
            yield from self._events()
        finally:
            self._done.set()
            watcher.join()
            self.connection.close()

    def _events(self) -> Iterator[dict]:
        while True:
            try:
                line = self.response.readline(MAX_BODY)
            except (socket.timeout, TimeoutError):
                raise StreamCut("the server went silent mid-reply") from None
            except (OSError, http.client.HTTPException, ValueError) as exc:
                if self.cancel.is_set():
                    return
                raise StreamCut(f"the connection broke mid-reply ({type(exc).__name__})") from None
            if not line:
                if self.cancel.is_set():
                    return
                raise StreamCut("the server closed the stream mid-reply")
            line = line.strip()
            if line.startswith(b"data:"):
                data = line[5:].strip()
                if data == b"[DONE]":
                    return
                yield _json_event(data)
            elif line.startswith(b"error:"):
                yield {"error": _json_event(line[6:].strip())}


def _json_event(data: bytes) -> dict:
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise StreamCut("the server sent an event that is not JSON") from None
    return value if isinstance(value, dict) else {"error": {"message": str(value)}}


# ------------------------------------------------------------------ what kind of server

@dataclass(frozen=True, slots=True)
class ServerInfo:
    kind: str  # llama-server | vllm | sglang | openai-compatible
    models: tuple[str, ...]
    props: dict | None  # llama-server's /props
    metrics: bool  # /metrics answers with spec-decode-capable Prometheus text
    context_length: int | None
    version: str | None = None
    slots: list | None = None  # llama-server's /slots (whether each slot speculates)


def list_models(client: ServerClient) -> tuple[tuple[str, ...], list]:
    """The server's model ids (/v1/models) and the raw entries; ServerError when it is not OpenAI-compatible."""
    reply = client.get("/v1/models")
    where = client.address.url
    if reply.status in (401, 403):
        raise ServerError(f"{where} refused the API key (HTTP {reply.status}); save the right key for this server")
    if reply.status != 200:
        raise ServerError(f"{where} is not an OpenAI-compatible server: /v1/models answered HTTP {reply.status}")
    data = reply.json()
    entries = data.get("data") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not all(isinstance(e, dict) and isinstance(e.get("id"), str)
                                                for e in entries):
        raise ServerError(f"{where} is not an OpenAI-compatible server: /v1/models is not a model list")
    if not entries:
        raise ServerError(f"{where} serves no model (its /v1/models list is empty)")
    return tuple(e["id"] for e in entries), entries


def detect_server(client: ServerClient) -> ServerInfo:
    """Ask what the server is: its models, then /props (llama-server), /version (vLLM), /get_server_info
    (SGLang) and /metrics' name prefixes; the models' `owned_by` breaks ties."""
    models, entries = list_models(client)
    owners = {str(e.get("owned_by", "")).lower() for e in entries}
    props, kind, version = _json_or_none(client, "/props"), "openai-compatible", None
    if isinstance(props, dict) and "default_generation_settings" in props:
        kind = "llama-server"
        version = str(props.get("build_info") or "") or None
    elif "vllm" in owners:
        kind = "vllm"
    elif "sglang" in owners or isinstance(_json_or_none(client, "/get_server_info"), dict):
        kind = "sglang"
    metrics_text = metrics(client)
    prefixes = metric_prefixes(metrics_text) if metrics_text else set()
    if kind == "openai-compatible":
        kind = next((k for k, p in (("vllm", "vllm"), ("sglang", "sglang"), ("llama-server", "llamacpp"))
                     if p in prefixes), kind)
    if kind == "vllm":
        answer = _json_or_none(client, "/version")
        version = str(answer.get("version")) if isinstance(answer, dict) and answer.get("version") else version
    slots = _json_or_none(client, "/slots") if kind == "llama-server" else None
    return ServerInfo(kind, models, props if kind == "llama-server" else None, bool(prefixes),
                      _context_length(props, entries), version, slots if isinstance(slots, list) else None)


def _json_or_none(client: ServerClient, endpoint: str):
    try:
        reply = client.get(endpoint)
    except ServerError:
        return None
    return reply.json() if reply.status == 200 else None


def metrics(client: ServerClient) -> str | None:
    """The /metrics text, or None when the endpoint is off or is not Prometheus text."""
    try:
        reply = client.get("/metrics")
    except ServerError:
        return None
    if reply.status != 200:
        return None
    text = reply.body.decode("utf-8", "replace")
    return text if metric_prefixes(text) else None


def _context_length(props, entries: list) -> int | None:
    """The context the server gives one request: llama-server's n_ctx, vLLM's max_model_len."""
    if isinstance(props, dict):
        settings = props.get("default_generation_settings")
        n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
        if isinstance(n_ctx, int) and n_ctx > 0:
            return n_ctx
    for entry in entries:
        value = entry.get("max_model_len") or (entry.get("meta") or {}).get("n_ctx_train")
        if isinstance(value, int) and value > 0:
            return value
    return None
