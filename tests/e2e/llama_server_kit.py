"""A real llama-server for the tests (engine.measure.llama_server starts it), and the tests' own helpers: the
skip reason, a closed port, the oracle's prompts, torch on the engine's thread count."""

from __future__ import annotations

from engine.host import engine_threads
from engine.measure.llama_server import (LLAMA_CPP_PYTHON_VERSION, MISSING, LlamaServer, complete_ids,  # noqa: F401
                                         find_llama_server, free_port, tools_dir)

SKIP_REASON = MISSING


def closed_port() -> int:
    """A port nothing listens on (bound, then released)."""
    return free_port()


def oracle_prompts() -> list[list[int]]:
    """Four prompts of 6–19 random ids of the tiny fixtures' vocabulary (past its special tokens)."""
    import random
    rng = random.Random(7)
    return [[rng.randrange(3, 390) for _ in range(rng.randrange(6, 20))] for _ in range(4)]


def torch_on_engine_threads():
    """A context for torch on the engine's thread count, as the app and the CLI set it (engine.runtime): a second
    torch thread beside llama.cpp's on 2 cores turns every softmax into a scheduler wait."""
    import contextlib

    import torch

    @contextlib.contextmanager
    def threads():
        before = torch.get_num_threads()
        torch.set_num_threads(engine_threads())
        try:
            yield
        finally:
            torch.set_num_threads(before)
    return threads()
