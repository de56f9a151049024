"""Where models run when a GPU may be there (issue 22, items 4, 5 and 8), checked on this CPU machine: llama.cpp
decides its layers' device by its own build (not torch's) and refuses a GPU a CPU build lacks, naming the
rebuild; a CPU build beside a CUDA GPU warns once; a llama.cpp draft loads where its target's layers run;
cuda:N is checked against the devices there are; the memory estimate of a GGUF on llama.cpp asks about the
device its layers go to and counts a CUDA context not made yet."""

from __future__ import annotations

import dataclasses
import importlib.util

import pytest
import torch

from engine.backends import device as device_module
from engine.backends.device import resolve_device
from engine.core.errors import DeviceError
from engine.models import memory
from engine.models.catalog import describe_path

needs_llama = pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                                 reason="llama-cpp-python is not installed")


@pytest.fixture
def pretend_cuda(monkeypatch):
    """torch says it has two CUDA devices (no context made yet); nothing here ever runs on them."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: "NVIDIA Test GPU")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=0: (9, 0))


@pytest.fixture(scope="module")
def tiny_gguf_path(tmp_path_factory):
    from tests.fixtures.tiny_gguf import build
    return build("llama", tmp_path_factory.mktemp("placement") / "tiny.gguf")[0]


def test_cuda_index_is_checked_against_the_device_count(pretend_cuda):
    assert resolve_device("cuda:1") == torch.device("cuda:1")
    with pytest.raises(DeviceError, match=r"cuda:2 was asked for, but this machine has 2 CUDA devices \(cuda:0, cuda:1\)"):
        resolve_device("cuda:2")
    with pytest.raises(DeviceError, match="unknown device 'cuda:x'"):
        resolve_device("cuda:x")
    assert device_module.cuda_devices() == ["cuda:0", "cuda:1"]


def test_the_gui_offers_each_of_several_cuda_devices(pretend_cuda):
    from gui.sessions.models import device_choices, device_label
    assert device_choices() == ("auto", "cpu", "cuda", "cuda:0", "cuda:1", "mps")
    assert device_label("cuda:1") == "CUDA GPU 1 (cuda:1)"


@needs_llama
def test_llama_cpp_places_layers_by_its_own_build():
    from engine.backends.llama_cpp import layers_device, placement
    assert placement("cpu", []) == (0, None) and placement("auto", []) == (None, None)
    assert placement("cuda", ["CUDA (NVIDIA A)"]) == (-1, None)
    assert placement("cuda:1", ["CUDA (NVIDIA A)", "CUDA (NVIDIA B)"]) == (-1, 1)
    with pytest.raises(DeviceError, match=r"this llama-cpp-python is a CPU build .*-DGGML_CUDA=on .*"
                                          r"--force-reinstall --no-cache-dir llama-cpp-python==0.3.36"):
        placement("cuda", [])
    with pytest.raises(DeviceError, match="-DGGML_METAL=on"):
        placement("mps", [])
    with pytest.raises(DeviceError, match=r"cuda:1 was asked for, but llama.cpp finds 1 GPU here \(0: CUDA"):
        placement("cuda:1", ["CUDA (NVIDIA A)"])
    # a draft follows its target's layers: the CPU where none were offloaded, else where the target went
    assert layers_device(0, "auto") == "cpu" and layers_device(-1, "auto") == "auto"
    assert layers_device(-1, "cuda:1") == "cuda:1"


@needs_llama
def test_cuda_on_a_cpu_build_is_an_error_naming_it(tiny_gguf_path):
    from engine.backends.llama_cpp import accelerators, library
    from engine.models.load import load_model
    if accelerators(library()):
        pytest.skip("this llama-cpp-python offloads to a GPU")
    with pytest.raises(DeviceError, match="CPU build"):
        load_model(str(tiny_gguf_path), device="cuda", backend="llama.cpp")
    model = load_model(str(tiny_gguf_path), device="auto", backend="llama.cpp")
    assert model.placement == "cpu" and model.device_label == "llama.cpp · CPU"


@needs_llama
def test_a_cpu_build_beside_a_cuda_gpu_warns_once(monkeypatch, pretend_cuda):
    from engine.backends import llama_cpp, llama_cpp_placement
    monkeypatch.setattr(llama_cpp_placement, "_warned_cpu_build", False)
    heard = []
    llama_cpp.warn_cpu_build([], "cpu", heard.append)  # the CPU was asked for: nothing to say
    assert heard == []
    llama_cpp.warn_cpu_build([], "auto", heard.append)
    llama_cpp.warn_cpu_build([], "auto", heard.append)
    assert len(heard) == 1 and "CPU build" in heard[0] and "NVIDIA Test GPU" in heard[0]
    assert "-DGGML_CUDA=on" in heard[0]
    llama_cpp.warn_cpu_build(["CUDA (NVIDIA Test GPU)"], "auto", heard.append)
    assert len(heard) == 1


@needs_llama
def test_a_llama_cpp_draft_loads_where_its_targets_layers_run(tiny_gguf_path, tmp_path):
    """The target's `device` is where its logits are (the CPU, for llama.cpp, even when every layer is on the
    GPU); the draft must go where the layers went."""
    import shutil

    from engine.models.load import load_model
    from engine.runtime import DraftProvider
    target = load_model(str(tiny_gguf_path), device="cpu", backend="llama.cpp")
    offloaded = dataclasses.replace(target, placement="cuda:1")  # as a target on a CUDA build's second GPU
    draft_file = tmp_path / "draft.gguf"
    shutil.copy(tiny_gguf_path, draft_file)
    asked = []

    def loader(name, **options):
        asked.append(options["device"])
        return load_model(name, device="cpu", backend=options["backend"])

    DraftProvider(offloaded, draft_loader=loader).draft_model(str(draft_file))
    assert asked == ["cuda:1"]


@needs_llama
def test_a_gguf_estimate_on_a_cpu_build_asks_about_ram_even_where_torch_sees_cuda(tiny_gguf_path, monkeypatch,
                                                                                 pretend_cuda):
    from engine.backends.llama_cpp import accelerators, library
    if accelerators(library()):
        pytest.skip("this llama-cpp-python offloads to a GPU")
    monkeypatch.setattr(memory, "free_memory", lambda device: 123 * 2**30 if device == "cpu" else 1)
    entry = describe_path(tiny_gguf_path, with_tokenizer=False)
    estimate = memory.estimate_memory_on(entry, "llama.cpp", "auto")
    assert estimate.device == "cpu" and estimate.free_bytes == 123 * 2**30
    assert estimate.overhead_bytes < memory.CUDA_CONTEXT_BYTES  # no CUDA context is made for it


def test_a_cuda_estimate_counts_the_context_not_made_yet(monkeypatch, pretend_cuda, tiny_gguf_path):
    monkeypatch.setattr(memory, "free_memory", lambda device: 80 * 2**30)
    entry = describe_path(tiny_gguf_path, with_tokenizer=False)
    made = memory.estimate_memory(entry, "cuda:1", "bf16")
    assert made.overhead_bytes >= memory.CUDA_CONTEXT_BYTES + memory.RUNTIME_OVERHEAD_BYTES
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)  # a context exists: free memory shows it
    assert memory.estimate_memory(entry, "cuda:1", "bf16").overhead_bytes == \
        made.overhead_bytes - memory.CUDA_CONTEXT_BYTES
