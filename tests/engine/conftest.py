"""Fixtures for the engine suite: a tiny Llama built here (no download), its tokenizer, a perturbed copy to
draft with, and the built-in default model (session-scoped: loaded once per run), on the device
SPECSCOPE_TEST_DEVICE names (engine_testkit.device_under_test: cpu when unset); and the `cuda` marker's skip."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import engine.drafters  # noqa: F401  (registers the methods the tests name)
from engine.core.errors import DefaultModelMissingError
from engine.models.load import load_model
from engine.runtime import local_engine
from engine_testkit import build_tiny_tokenizer, device_under_test, save_tiny_model


def pytest_collection_modifyitems(config, items):
    """Tests marked `cuda` (pyproject.toml) skip, saying why, where torch finds no CUDA device."""
    import torch
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason=f"needs a CUDA device; torch {torch.__version__} finds none here")
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def specscope_cache_dir() -> Path | None:
    """Converted models go where the app keeps them (packaging/install.sh converts the built-in model there
    once per machine), unless SPECSCOPE_TEST_CACHE_DIR names another directory."""
    folder = os.environ.get("SPECSCOPE_TEST_CACHE_DIR")
    if not folder:
        yield None
        return
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECSCOPE_CACHE_DIR", str(path))
        yield path


@pytest.fixture(scope="session")
def tiny_tokenizer():
    return build_tiny_tokenizer()


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory, tiny_tokenizer) -> Path:
    """A 4-layer random Llama (float32, fixed seed) and its tokenizer, saved as a Hugging Face folder."""
    return save_tiny_model(tmp_path_factory.mktemp("tiny-target"), tiny_tokenizer, seed=0)


@pytest.fixture(scope="session")
def tiny_draft_dir(tmp_path_factory, tiny_tokenizer) -> Path:
    """The target's weights plus a little noise: a second model with the same tokenizer that agrees with the
    target often, but not always (so drafts are partly accepted)."""
    return save_tiny_model(tmp_path_factory.mktemp("tiny-draft"), tiny_tokenizer, seed=0, noise=0.001)


@pytest.fixture(scope="session")
def tiny_model(tiny_dir):
    """On SPECSCOPE_TEST_DEVICE (default cpu)."""
    return load_model(str(tiny_dir), device=device_under_test(), dtype="float32")


@pytest.fixture
def tiny_engine(tiny_model):
    """A fresh engine (empty KV caches) on the shared tiny model."""
    return local_engine(tiny_model)


@pytest.fixture(scope="session")
def default_model(specscope_cache_dir):
    """The built-in model on the transformers backend (float32); tests/engine/test_llama_cpp*.py run it on
    llama.cpp."""
    try:
        return load_model("default", device=device_under_test(), dtype="float32", backend="transformers")
    except DefaultModelMissingError as exc:  # only when the package is absent; any other failure fails
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def default_engine(default_model):
    """One engine shared by the default-model tests: its caches carry over, as in the app."""
    return local_engine(default_model)

