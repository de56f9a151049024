"""engine.backends.source (the file stamp, the GGUF magic check, a folder's weight files) and
engine.backends.device (the one device/dtype resolver)."""

from __future__ import annotations

import json

import pytest
import torch

from engine.backends.device import default_dtype, dtype_label, resolve_device, resolve_dtype
from engine.backends.source import check_gguf, converted_folder, file_stamp, gguf_problem, weight_files
from engine.core.errors import DeviceError, ModelLoadError


def test_the_file_stamp_changes_with_the_file(tmp_path):
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF" + b"\0" * 12)
    first = file_stamp(path)
    assert first == file_stamp(path) and len(first) == 16
    path.write_bytes(b"GGUF" + b"\0" * 13)
    assert file_stamp(path) != first
    assert converted_folder(path).name == f"m-{file_stamp(path)}"


def test_the_gguf_magic_check(tmp_path):
    good, bad = tmp_path / "good.gguf", tmp_path / "bad.gguf"
    good.write_bytes(b"GGUF\3\0\0\0")
    bad.write_bytes(b"PK\3\4")
    assert gguf_problem(good) is None
    check_gguf(good)
    assert "not a GGUF file" in gguf_problem(bad)
    with pytest.raises(ModelLoadError, match="not a GGUF file"):
        check_gguf(bad)
    assert gguf_problem(tmp_path / "missing.gguf").startswith("cannot read")


def test_weight_files_follow_the_index_and_count_one_set(tmp_path):
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    (sharded / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"a": "model-1.safetensors", "b": "model-2.safetensors"}}))
    (sharded / "model-1.safetensors").write_bytes(b"")
    present, missing, kind = weight_files(sharded)
    assert ([p.name for p in present], missing, kind) == (["model-1.safetensors"], ["model-2.safetensors"],
                                                           "safetensors")
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    for name in ("consolidated.safetensors", "model.safetensors", "pytorch_model.bin"):
        (mixed / name).write_bytes(b"")
    assert [p.name for p in weight_files(mixed)[0]] == ["model.safetensors"]
    pickles = tmp_path / "pickles"
    pickles.mkdir()
    (pickles / "pytorch_model.bin").write_bytes(b"")
    (pickles / "optimizer.pt").write_bytes(b"")  # not a model file
    assert ([p.name for p in weight_files(pickles)[0]], weight_files(pickles)[2]) == (["pytorch_model.bin"], "pickle")


def test_one_dtype_resolver_for_loading_and_estimates(monkeypatch):
    assert resolve_dtype("bf16", "cpu") is torch.bfloat16 and resolve_dtype("torch.float16", "cpu") is torch.float16
    monkeypatch.setattr("engine.host.native_bf16", lambda: False)  # a CPU without bf16 in hardware
    assert resolve_dtype(None, torch.device("cpu")) is torch.float32 and resolve_dtype("auto", "mps") is torch.float16
    monkeypatch.setattr("engine.host.native_bf16", lambda: True)  # AVX512-BF16 or AMX (engine.host)
    assert resolve_dtype(None, "cpu") is torch.bfloat16 and resolve_dtype("float32", "cpu") is torch.float32
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert default_dtype("cuda") is torch.float16  # no CUDA here to say it supports bf16
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    # bf16 only where the chosen GPU computes it natively (compute capability ≥ 8.0): torch's
    # is_bf16_supported() says yes for emulated bf16 too (T4 is 7.5), and asks about the current device
    capabilities = {0: (7, 5), 1: (9, 0)}  # a T4 as device 0, an H100 as device 1
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None: capabilities[index or 0])
    assert resolve_dtype(None, "cuda:1") is torch.bfloat16
    assert resolve_dtype(None, "cuda:0") is torch.float16 and resolve_dtype(None, "cuda") is torch.float16
    with pytest.raises(ModelLoadError, match="unknown dtype 'int3'"):
        resolve_dtype("int3", "cpu")
    assert dtype_label(torch.bfloat16) == "bfloat16" and dtype_label("Q4_1") == "Q4_1"


def test_a_device_this_machine_lacks_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr("engine.host.mps_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu") and resolve_device("CPU") == torch.device("cpu")
    with pytest.raises(DeviceError, match="no usable CUDA device"):
        resolve_device("cuda:0")
    with pytest.raises(DeviceError, match="MPS was asked for"):
        resolve_device("mps")
    with pytest.raises(DeviceError, match="unknown device 'tpu'"):
        resolve_device("tpu")
