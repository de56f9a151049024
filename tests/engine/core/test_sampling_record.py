"""One SamplingConfig, every way out and back, each made from its field descriptions (engine.core.config
.SAMPLING_FIELDS): its record (sampling_to_record / sampling_from_record, what the history keeps), its controls'
numbers (sampling_to_values / sampling_from_values, what QSettings keeps), its command-line options
(engine.cli.arguments) and its settings words. Every field is varied from its default and must come back; a
field added to SamplingConfig later has no varied value below and fails the first test until it is given one."""

from __future__ import annotations

import argparse
import json
from dataclasses import fields, replace

import pytest

from engine.cli.arguments import add_sampling_args, sampling_from_args
from engine.core.config import (SAMPLING_FIELDS, SamplingConfig, sampling_from_record, sampling_from_values,
                                sampling_to_record, sampling_to_values, sampling_words)
from engine.core.errors import ConfigError

VARIED = {"temperature": 0.7, "top_p": 0.9, "top_k": 40, "seed": 7}  # a value other than the default, per field


def test_every_field_is_described_once_and_has_a_varied_value():
    names = [f.name for f in fields(SamplingConfig)]
    assert [f.name for f in SAMPLING_FIELDS] == names == list(VARIED)
    assert all(f.default == getattr(SamplingConfig(), f.name) for f in SAMPLING_FIELDS)


def sampling_cases():
    yield pytest.param(SamplingConfig(), id="defaults")
    for name, value in VARIED.items():
        yield pytest.param(SamplingConfig(**{name: value}), id=name)
    yield pytest.param(SamplingConfig(**VARIED), id="all")


def parse(argv, *, unset=False) -> argparse.Namespace:
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_sampling_args(parser, unset=unset)
    return parser.parse_args(argv)


def as_argv(sampling: SamplingConfig) -> list[str]:
    return [text for f in SAMPLING_FIELDS if getattr(sampling, f.name) is not None
            for text in (f.cli_flag, str(getattr(sampling, f.name)))]


@pytest.mark.parametrize("sampling", sampling_cases())
def test_a_sampling_comes_back_from_its_record_its_values_and_its_options(sampling):
    record = json.loads(json.dumps(sampling_to_record(sampling)))  # JSON-ready
    assert sampling_from_record(record) == sampling
    values = sampling_to_values(sampling)
    assert None not in values.values()  # QSettings can keep every one
    assert sampling_from_values(values) == sampling
    assert sampling_from_args(parse(as_argv(sampling))) == sampling


def test_the_record_keeps_the_fields_in_the_order_exports_show_them():
    assert list(sampling_to_record(SamplingConfig(seed=3))) == ["temperature", "top_p", "top_k", "seed"]
    assert sampling_to_record(SamplingConfig(seed=3)) == {"temperature": 0.0, "top_p": 1.0, "top_k": 0, "seed": 3}


def test_an_older_record_reads_with_defaults_and_ignores_other_keys():
    assert sampling_from_record({}) == SamplingConfig()
    assert sampling_from_record({"temperature": 1, "seed": None, "min_p": 0.1}) == SamplingConfig(temperature=1.0)
    assert sampling_from_values({"seed": -1, "top_k": 5}) == SamplingConfig(top_k=5)


def test_a_spin_box_float_is_kept_as_the_number_it_shows():
    assert sampling_from_values({"temperature": 0.7000000000000001}).temperature == 0.7


@pytest.mark.parametrize("record, message", [
    ({"temperature": -1.0}, "temperature must be ≥ 0 (0 is greedy) and finite, got -1.0"),
    ({"temperature": 0.001}, "temperature must be 0 (greedy) or from 0.01 to 5, got 0.001"),
    ({"top_p": 0.0}, "top-p must be in (0, 1], got 0.0"),
    ({"top_p": 1.5}, "top-p must be in (0, 1], got 1.5"),
    ({"top_k": -1}, "top-k (0 turns it off) must be a whole number from 0 to 100,000, got -1"),
    ({"seed": 2**31}, "seed must be a whole number from 0 to 2,147,483,647, got 2147483648"),
    ({"seed": -2}, "seed must be a whole number from 0 to 2,147,483,647, got -2"),
])
def test_a_bad_value_is_refused_alike_from_the_config_the_record_and_the_options(record, message):
    for make in (lambda: SamplingConfig(**record), lambda: sampling_from_record(record),
                 lambda: sampling_from_args(parse(as_argv(SamplingConfig()) + [
                     f"--{name.replace('_', '-')}={value}" for name, value in record.items()]))):
        with pytest.raises(ConfigError) as refused:
            make()
        assert str(refused.value) == message


def test_options_default_to_the_cli_defaults_or_to_unset_which_keeps_the_base():
    assert vars(parse([])) == {"temperature": 0.0, "top_p": 1.0, "top_k": 0, "seed": None}
    assert sampling_from_args(parse([])) == SamplingConfig()
    assert set(vars(parse([], unset=True)).values()) == {None}
    base = SamplingConfig(**VARIED)
    assert sampling_from_args(parse([], unset=True), base) == base
    assert sampling_from_args(parse(["--seed", "3"], unset=True), base) == replace(base, seed=3)


def test_a_non_number_option_is_argparses_error():
    with pytest.raises(argparse.ArgumentError, match="expected a whole number"):
        parse(["--top-k", "1.5"])
    with pytest.raises(argparse.ArgumentError, match="expected a finite number"):
        parse(["--temperature", "nan"])


def test_the_words_say_the_temperature_and_a_seed_that_is_set():
    assert sampling_words(SamplingConfig()) == "temperature 0.0"
    assert sampling_words(SamplingConfig(**VARIED)) == "temperature 0.7 · seed 7"
