"""Fixtures every test folder shares: how many threads torch runs on while a test measures nothing."""

from __future__ import annotations

import pytest


@pytest.fixture
def one_torch_thread():
    """Tiny passes on one torch thread: on a busy machine more threads only wait on each other."""
    import torch
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def engine_threads_for_torch():
    """torch on the engine's thread count, as engine.runtime sets it (torch's own threads beside llama.cpp's on a
    busy 2-core machine turn each small softmax into a scheduler wait)."""
    import torch

    from engine.host import engine_threads
    before = torch.get_num_threads()
    torch.set_num_threads(engine_threads())
    yield
    torch.set_num_threads(before)
