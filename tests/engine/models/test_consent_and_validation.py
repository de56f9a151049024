"""Consent is SpecScope's alone (no model code runs, no pickle loads, without a yes; drafts get the same two
questions) and the one place of number checks (engine.core.validation): refuse at the edge of each type, never
clamp; corrupt weight files named with what to do."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import pytest

from engine.core.config import SamplingConfig, SpecConfig
from engine.models.consent import PICKLE, REMOTE_CODE, ConsentAnswers, ConsentNeeded, require
from engine.core.errors import ConfigError, ModelLoadError
from engine.models.load import load_model, load_tokenizer_only
from engine.runtime import local_engine
from engine.core.validation import (MAX_SEED, check_output_path, check_seed, check_temperature, decode_argument,
                               parse_float, parse_int, write_text_atomic)


@pytest.fixture(scope="module")
def planted(tmp_path_factory, tiny_dir) -> tuple[Path, Path]:
    """A copy of the tiny model whose config names its own code (auto_map, custom model_type) and a planted
    module that writes a marker file if it is ever imported."""
    root = tmp_path_factory.mktemp("planted")
    folder, marker = root / "model", root / "MARKER"
    shutil.copytree(tiny_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="specscope_planted", auto_map={"AutoConfig": "planted.Config",
                                                            "AutoModelForCausalLM": "planted.Model",
                                                            "AutoTokenizer": ["planted.Tokenizer", None]})
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "planted.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n")
    return folder, marker


@pytest.fixture(scope="module")
def pickle_dir(tmp_path_factory, tiny_dir) -> Path:
    import torch
    from safetensors.torch import load_file
    folder = tmp_path_factory.mktemp("pickle") / "model"
    shutil.copytree(tiny_dir, folder)
    torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    return folder


def test_a_run_that_cannot_ask_names_the_flag(planted, pickle_dir):
    folder, marker = planted
    with pytest.raises(ConsentNeeded) as remote:
        require([str(folder)])
    assert remote.value.kind == REMOTE_CODE and "--trust-remote-code" in remote.value.unattended()
    with pytest.raises(ConsentNeeded) as pickled:
        require(["default", str(pickle_dir)], trust_remote_code=True)
    assert pickled.value.kind == PICKLE and "--allow-pickle" in pickled.value.unattended()
    require([str(pickle_dir)], allow_pickle=True)
    assert not marker.exists()


def test_transformers_is_never_left_to_ask(planted):
    folder, marker = planted
    with pytest.raises(ModelLoadError, match="--trust-remote-code"):
        load_model(str(folder), device="cpu")  # trust_remote_code=False, passed explicitly
    try:
        load_tokenizer_only(str(folder))
    except ModelLoadError:
        pass
    assert not marker.exists()


def test_pickle_weights_load_only_when_allowed(pickle_dir):
    with pytest.raises(ConsentNeeded, match="pickle"):
        load_model(str(pickle_dir), device="cpu")
    assert load_model(str(pickle_dir), device="cpu", allow_pickle=True).n_layers == 4


def test_a_draft_gets_the_targets_two_questions(tiny_model, planted, pickle_dir):
    answers = [ConsentAnswers()]
    engine = local_engine(tiny_model, consent=lambda: answers[-1])  # the answers as they stand when asked
    with pytest.raises(ConsentNeeded) as asked:
        engine.validate(SpecConfig("draft-model", draft=str(pickle_dir)))
    assert asked.value.kind == PICKLE and asked.value.model == str(pickle_dir)
    with pytest.raises(ConsentNeeded, match="own Python code"):
        engine.validate(SpecConfig("draft-model", draft=str(planted[0])))
    answers.append(ConsentAnswers(pickle_allowed=frozenset({str(pickle_dir)})))
    engine.validate(SpecConfig("draft-model", draft=str(pickle_dir)))
    assert not planted[1].exists()


@pytest.mark.parametrize("damage", ["truncated", "header", "empty", "garbage"])
def test_corrupt_safetensors_are_named(tmp_path, tiny_dir, damage):
    folder = tmp_path / "model"
    shutil.copytree(tiny_dir, folder)
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes({"truncated": data[:len(data) * 9 // 10], "header": data[:100], "empty": b"",
                         "garbage": os.urandom(2048)}[damage])
    with pytest.raises(ModelLoadError, match=r"model\.safetensors is not a readable safetensors file.*again"):
        load_model(str(folder), device="cpu")


@pytest.mark.parametrize("seed", [-1, MAX_SEED + 1, 2**64, 2**80, 1.5, True])
def test_seeds_beyond_the_range_are_refused(seed):
    with pytest.raises(ConfigError, match="seed must be a whole number from 0 to 2,147,483,647"):
        SamplingConfig(seed=seed)
    assert SamplingConfig(seed=MAX_SEED).seed == check_seed(MAX_SEED)


@pytest.mark.parametrize("temperature", [1e-50, 1e-45, 0.001, 5.01, math.inf, math.nan, -0.0001])
def test_temperatures_that_would_round_or_overflow_are_refused(temperature):
    with pytest.raises(ConfigError, match="temperature"):
        check_temperature(temperature)
    assert check_temperature(0) == 0 and check_temperature(0.01) == 0.01


@pytest.mark.parametrize("text", ["1e3", "0x10", "", "9" * 31, "1.5", "٣", "abc"])
def test_whole_numbers_only(text):
    import argparse
    with pytest.raises(argparse.ArgumentTypeError):
        parse_int(text)
    assert parse_int(" -7 ") == -7


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "1e309", "x"])
def test_finite_numbers_only(text):
    import argparse
    with pytest.raises(argparse.ArgumentTypeError):
        parse_float(text)


def test_output_paths_are_checked_before_the_work(tmp_path):
    (tmp_path / "file").write_text("x")
    for path, fragment in ((tmp_path, "is a folder"), (tmp_path / "no" / "x.json", "does not exist"),
                           (tmp_path / "file" / "x.json", "not a folder"), ("/proc/x.json", "cannot write")):
        with pytest.raises(ConfigError, match=fragment):
            check_output_path(path, "--json")
    assert check_output_path(tmp_path / "ok.json", "--json") == tmp_path / "ok.json"
    assert os.listdir(tmp_path) == ["file"]  # the probe left nothing


def test_atomic_writes_leave_nothing_half_written(tmp_path):
    target = tmp_path / "out.json"
    write_text_atomic(target, "whole")
    assert target.read_text() == "whole" and os.listdir(tmp_path) == ["out.json"]


def test_argv_bytes_become_replacement_characters():
    assert decode_argument("caf\udce9") == ("caf\ufffd", True)
    assert decode_argument("café") == ("café", False)
