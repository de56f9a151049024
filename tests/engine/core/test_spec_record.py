"""One SpecConfig, two ways out and back: its record (engine.core.config.spec_to_record / spec_from_record,
what the history and the GUI store) and its SPEC text (label / parse_spec). Every field of SpecConfig and
every parameter of every registered method is varied from its default and must come back; a field added to
SpecConfig later has no varied value below and fails the first test until it is given one and round-trips."""

from __future__ import annotations

import json
from dataclasses import fields

import pytest

from engine.core.config import SpecConfig, parse_spec, spec_from_record, spec_to_record
from engine.core.methods import ParamSpec, methods

# a value other than the default, per field, for a method (None: the field can't vary for this method)
VARIED = {
    "method": lambda m: m.name,
    "k": lambda m: 7,
    "draft": lambda m: "some-draft" if m.needs_draft or m.reads_head else None,
    "params": lambda m: tuple((p.name, other_value(p)) for p in m.params) or None,
    "adaptive": lambda m: True,
    "tree": lambda m: 8 if m.branches else None,
    "backend": lambda m: m.backends[-1],
}
NOT_IN_SPEC_TEXT = {"k", "adaptive"}  # plain decoding's SPEC says neither: it drafts nothing


def other_value(param: ParamSpec):
    """A value of `param` other than its default, within its range."""
    if param.type is bool:
        return not param.default
    if param.type is str:
        return f"{param.default or ''}x"
    low = param.min if param.min is not None else 0
    value = (low + 1) if param.default is None else param.default + 1
    if param.max is not None and value > param.max:  # a bounded parameter (a probability): halfway down instead
        value = ((param.default if param.default is not None else param.max) + low) / 2
    return param.type(value)


def varied_specs():
    for method in methods():
        for name, vary in VARIED.items():
            value = vary(method)
            if value is not None and name != "method":
                yield pytest.param(method, name, value, id=f"{method.name}-{name}")


def test_every_field_has_a_varied_value():
    assert set(VARIED) == {f.name for f in fields(SpecConfig)} - {"warnings"}


@pytest.mark.parametrize("method, name, value", varied_specs())
def test_a_varied_field_comes_back_from_the_record_and_the_spec_text(method, name, value):
    base = {"draft": "default"} if method.needs_draft else {}  # what the varied draft differs from
    spec = SpecConfig(method=method.name, **{**base, name: value})
    assert spec != SpecConfig(method=method.name, **base), f"{name}={value!r} is the default"
    record = json.loads(json.dumps(spec_to_record(spec)))  # JSON-ready
    assert spec_from_record(record) == spec
    if method.speculative or name not in NOT_IN_SPEC_TEXT:
        assert parse_spec(spec.label()) == spec


@pytest.mark.parametrize("method", methods(), ids=lambda m: m.name)
def test_every_parameter_at_once_and_each_alone(method):
    base = {"draft": "some-draft"} if method.needs_draft or method.reads_head else {}
    drafting = {"k": 3, "adaptive": True} if method.speculative else {}  # plain decoding's SPEC has neither
    together = SpecConfig(method=method.name, params={p.name: other_value(p) for p in method.params},
                          backend=method.backends[0], **drafting, **base)
    for spec in (together, *(SpecConfig(method=method.name, params={p.name: other_value(p)}, **base)
                             for p in method.params)):
        assert spec_from_record(spec_to_record(spec)) == spec
        assert parse_spec(spec.label()) == spec


def test_an_older_record_reads_with_defaults_and_drops_what_its_method_lacks():
    assert spec_from_record({}) == SpecConfig()
    old = {"method": "prompt-lookup", "k": 5, "draft": None, "layers": 3}
    assert spec_from_record(old) == SpecConfig("prompt-lookup", k=5)
