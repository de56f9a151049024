"""llama.cpp's own llama-server, started here as an oracle (`specscope bench --compare-llama-server`, the
e2e tests): where the binary is, and a context manager that starts it on 127.0.0.1 (a free port) with a GGUF and
stops it; its greedy `/completion` of prompt ids. packaging/install.sh builds the binary (llama.cpp's server
target from the tree that llama-cpp-python's source distribution carries) into SPECSCOPE_TOOLS_DIR (default
~/.cache/specscope-tools); SPECSCOPE_LLAMA_SERVER names another binary.

Every wait is bounded; a server that does not come up is a ServerError with its own log's last lines.
Touches: the process it starts, its log file, the loopback address; no Qt.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

from engine.core.errors import ServerError
from engine.host import engine_threads

LLAMA_CPP_PYTHON_VERSION = "0.3.36"


def tools_dir() -> Path:
    return Path(os.environ.get("SPECSCOPE_TOOLS_DIR") or Path.home() / ".cache" / "specscope-tools")


def find_llama_server() -> Path | None:
    """The llama-server binary: SPECSCOPE_LLAMA_SERVER, else install.sh's build, else one on PATH."""
    named = os.environ.get("SPECSCOPE_LLAMA_SERVER")
    if named:
        return Path(named) if Path(named).is_file() else None
    built = tools_dir() / f"llama-server-{LLAMA_CPP_PYTHON_VERSION}" / "llama-server"
    if built.is_file():
        return built
    found = shutil.which("llama-server")
    return Path(found) if found else None


MISSING = ("no llama-server binary: run packaging/install.sh (it builds llama.cpp's server target into "
           "~/.cache/specscope-tools) or set SPECSCOPE_LLAMA_SERVER")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """`with LlamaServer(extra_args) as server:` a llama-server on server.url, stopped on exit."""

    kind = "llama-server"  # in its messages

    def __init__(self, model: Path, extra_args: tuple[str, ...] = (), *, log_dir: Path,
                 threads: int | None = None, context: int = 2048, start_timeout: float = 120.0,
                 parallel: int = 1) -> None:
        self.model, self.extra_args, self.log_dir = model, extra_args, log_dir
        self.parallel = parallel  # requests served at once (llama-server's slots, each `context` tokens)
        # SpecScope's own thread count (cores − 1): two OpenMP threads on a busy 2-core machine run 10× slower
        self.threads = threads or engine_threads()
        self.context, self.start_timeout = context, start_timeout
        self.port = free_port()
        self.process: subprocess.Popen | None = None
        self.log_path = log_dir / f"llama-server-{self.port}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        binary = find_llama_server()
        if binary is None:
            raise ServerError(MISSING)
        return [str(binary), "-m", str(self.model), "--host", "127.0.0.1", "--port", str(self.port),
                "-t", str(self.threads), "-c", str(self.context * self.parallel), "-np", str(self.parallel),
                "--no-webui",
                *self.extra_args]

    def __enter__(self) -> "LlamaServer":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        log = open(self.log_path, "wb")
        self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, env=self.environment())
        log.close()
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerError(f"{self.kind} exited ({self.process.returncode}):\n{self.log_tail()}")
            if self._healthy():
                return
            time.sleep(0.2)
        self.stop()
        raise ServerError(f"{self.kind} did not come up in {self.start_timeout:.0f} s:\n{self.log_tail()}")

    def environment(self) -> dict | None:
        """The server's environment (None: this process's)."""
        return None

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=2) as reply:
                return reply.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=20)

    def kill(self) -> None:
        """Stop it at once (SIGKILL), as a crash would."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=20)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def get(self, endpoint: str) -> str:
        with urllib.request.urlopen(self.url + endpoint, timeout=30) as reply:
            return reply.read().decode()


def complete_ids(server: LlamaServer, ids: list[int], n_new: int, timeout: float = 60,
                 ignore_eos: bool = True) -> dict:
    """llama-server's greedy `/completion` of prompt ids (temperature 0, no prompt cache; past end-of-sequence
    unless `ignore_eos` is False): its reply, with `tokens` and `timings` (drafted / accepted counts where it
    speculates)."""
    import json
    body = json.dumps({"prompt": ids, "n_predict": n_new, "temperature": 0, "return_tokens": True,
                       "cache_prompt": False, "ignore_eos": ignore_eos}).encode()
    request = urllib.request.Request(server.url + "/completion", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        return json.loads(reply.read())
