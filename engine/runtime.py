"""Getting an engine running: load_engine, the torch thread limit and quiet libraries. One copy, used by
`specscope generate`/`bench` (engine.cli.main, engine.measure.bench) and the GUI's worker thread (gui.worker). The
thread count itself lives in engine.host (a leaf the backends can import too).

Touches torch's thread settings, transformers' logging and os.environ (TOKENIZERS_PARALLELISM), and loads
models through engine.models.load; no Qt. Nothing happens at import time: torch and transformers are imported
by the functions that need them.
"""

from __future__ import annotations

import os
import sys
from typing import Callable

from engine.host import engine_threads, limit_torch_threads

Progress = Callable[[str], None]


def quiet_libraries() -> None:
    """No library progress bars or warnings on the terminal: the loader's own messages say what happens."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def terminal_progress() -> Progress:
    """Loading messages on stderr where someone watches (a terminal); silent when piped, so errors stay the
    only line there."""
    if sys.stderr.isatty():
        return lambda message: print(message, file=sys.stderr)
    return lambda message: None


def load_engine(name: str, progress: Progress | None = None, *, device: str = "auto", dtype: str | None = None,
                trust_remote_code: bool = False, allow_pickle: bool = False, backend: str | None = "auto"):
    """Load the target `name` (engine.models.load.load_model) on `backend` ("auto", "transformers", "llama.cpp";
    None is "auto") and wrap it in the speculative Engine, with the thread limit set and the libraries
    quiet. `progress` hears the loader's lines (the engine's own slow steps later on go to
    `engine.on_status`). `trust_remote_code` and `allow_pickle` only ever after the user agreed."""
    from engine.models.sources import is_server_url
    if is_server_url(name):  # a model on an inference server: nothing loads here (engine.remote.engine)
        from engine.remote.engine import load_remote
        return load_remote(name, progress)
    limit_torch_threads()
    quiet_libraries()
    from engine.models.load import load_model
    from engine.core.engine import Engine

    return Engine(load_model(name, device=device, dtype=dtype, progress=progress,
                             trust_remote_code=trust_remote_code, allow_pickle=allow_pickle,
                             backend=backend or "auto"))


__all__ = ["load_engine", "limit_torch_threads", "engine_threads", "quiet_libraries", "terminal_progress",
           "Progress"]
