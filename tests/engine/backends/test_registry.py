"""The backend registry (engine.backends): its names are the config's, what each backend serves, the one KV
cache formula, the test that tells a local backend from a server, and `resolve_backend`, the one place "auto"
is decided by the model and the method."""

from __future__ import annotations

from pathlib import Path

import pytest

import engine.drafters  # noqa: F401 (registers the methods resolve_backend reads)
from engine import backends
from engine.backends import (BACKENDS, REGISTRY, BackendChoice, backend_named, is_local_backend, kv_cache_bytes,
                             resolve_backend)
from engine.backends.source import ModelSource
from engine.core import config
from engine.core.errors import ConfigError, ModelLoadError
from engine.core.methods import MethodSpec, registered

GGUF = ModelSource("gguf", Path("/models"), "tiny.gguf", "tiny")
FOLDER = ModelSource("folder", Path("/models/tiny"), None, "tiny")


def only(name: str, **fields) -> MethodSpec:
    """A toy method served by `name`'s backend only."""
    return MethodSpec(name=f"toy-on-{name}", label="toy", description="a toy method", build=lambda *a: None,
                      backends=(name,), **fields)


@pytest.fixture
def llama_installed(monkeypatch):
    """Both backends' libraries present, whatever this machine has."""
    monkeypatch.setattr(backends.Backend, "available", lambda self: True)


def test_the_registry_names_are_the_configs_backends():
    assert tuple(b.name for b in REGISTRY) == BACKENDS == config.BACKENDS
    assert backend_named("llama.cpp").module == "engine.backends.llama_cpp_entry"
    with pytest.raises(ModelLoadError, match="unknown backend 'onnx'; use auto or transformers, llama.cpp"):
        backend_named("onnx")


def test_what_each_backend_serves_and_how():
    transformers, llama = backend_named("transformers"), backend_named("llama.cpp")
    assert transformers.serves(GGUF) and transformers.serves(FOLDER)
    assert not transformers.runs_as_stored(GGUF) and transformers.runs_as_stored(FOLDER)  # a GGUF is converted
    assert llama.serves(GGUF) and llama.runs_as_stored(GGUF) and not llama.serves(FOLDER)
    assert llama.device_label("CPU") == "llama.cpp · CPU" and transformers.device_label("cuda:0") == "cuda:0"


def test_one_kv_cache_formula():
    # 10 tokens × 2 layers × 4 KV heads × (8 + 8) dims × 2 bytes
    assert kv_cache_bytes(10, 2, 4, 8, 8, 2) == 10 * 2 * 4 * 16 * 2
    assert backend_named("llama.cpp").kv_bytes_per_value == 2  # F16 keys and values
    assert backend_named("transformers").kv_bytes_per_value is None  # the compute dtype's


def test_a_server_is_not_a_local_backend():
    assert all(is_local_backend(name) for name in BACKENDS)
    assert not is_local_backend("remote") and not is_local_backend(None) and not is_local_backend("auto")


def test_auto_by_the_model_alone(llama_installed, monkeypatch):
    assert resolve_backend(GGUF) == BackendChoice("llama.cpp")  # natively quantized, no conversion
    assert resolve_backend(FOLDER, "none") == BackendChoice("transformers")
    assert resolve_backend(GGUF, None, None) == BackendChoice("llama.cpp")  # None is auto
    monkeypatch.setattr(backends.Backend, "available", lambda self: self.name != "llama.cpp")
    assert resolve_backend(GGUF) == BackendChoice("transformers")  # without llama-cpp-python: converted


def test_a_method_only_transformers_serves_moves_a_gguf_there_with_a_note(llama_installed):
    with registered(only("transformers", why_not="it reads torch modules")):
        choice = resolve_backend(GGUF, "toy-on-transformers")
        assert choice.name == "transformers"
        assert "runs on transformers only (it reads torch modules)" in choice.note
        assert "converted" in choice.note and "not llama.cpp" in choice.note
        assert resolve_backend(FOLDER, "toy-on-transformers") == BackendChoice("transformers")  # no move: no note
        with pytest.raises(ConfigError, match="needs the transformers backend, not llama.cpp .it reads torch"):
            resolve_backend(GGUF, "toy-on-transformers", "llama.cpp")


def test_a_method_no_backend_of_the_model_serves_is_refused_with_the_reason(llama_installed):
    with registered(only("llama.cpp", why_not="a toy reason")):
        assert resolve_backend(GGUF, "toy-on-llama.cpp") == BackendChoice("llama.cpp")
        with pytest.raises(ConfigError, match="needs the llama.cpp backend, which can't run tiny .a toy reason"):
            resolve_backend(FOLDER, "toy-on-llama.cpp")
    with pytest.raises(ConfigError, match="unknown method"):
        resolve_backend(GGUF, "no-such-method")


def test_an_explicit_backend_is_kept():
    assert resolve_backend(GGUF, "none", "transformers") == BackendChoice("transformers")
    assert resolve_backend(FOLDER, None, "llama.cpp") == BackendChoice("llama.cpp")  # its load says why not


def test_mtp_under_auto_runs_a_gguf_on_llama_cpp_and_a_folder_on_transformers(llama_installed):
    """A GGUF's MTP layers draft on llama.cpp (transformers would load it dequantized, none of them usable);
    a Hugging Face folder's on transformers (MtpModel). An explicit backend is the user's."""
    assert resolve_backend(GGUF, "mtp") == BackendChoice("llama.cpp")
    assert resolve_backend(FOLDER, "mtp") == BackendChoice("transformers")
    assert resolve_backend(GGUF, "mtp", "transformers") == BackendChoice("transformers")  # check_mtp says why not
