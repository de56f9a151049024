"""The method registry's parameters (engine.core.methods): two methods declaring a parameter of one name must
declare it alike (the command line has one option per name), and a parameter of another method is named with
its owner and what the asked method takes."""

from __future__ import annotations

import dataclasses

import pytest

from engine.core.methods import (MethodSpec, ParamSpec, all_params, foreign_param_words, method_names, method_spec,
                                 param_owners, registered)


def toy(name: str, *params: ParamSpec) -> MethodSpec:
    return MethodSpec(name=name, label=name, description="a test's own method", build=lambda *a: None,
                      params=params)


LAYERS = method_spec("early-exit").param("layers")


@pytest.mark.parametrize("change, differs", [
    ({"type": float}, "type"),
    ({"max": 12}, "range"),
    ({"min": 0}, "range"),
    ({"flag": "--exit-layer"}, "option"),
])
def test_a_parameter_declared_unlike_another_methods_is_refused_at_registration(change, differs):
    clashing = toy("toy-clash", dataclasses.replace(LAYERS, **change))
    with pytest.raises(ValueError, match=rf"toy-clash's parameter layers .* differs in its {differs} from method "
                                         r"early-exit's"):
        with registered(clashing):
            pass
    assert "toy-clash" not in method_names()
    assert [p for p in all_params() if p.name == "layers"] == [LAYERS]


def test_a_parameter_declared_alike_is_shared():
    alike = dataclasses.replace(LAYERS, help="toy-alike: another help text and default are fine", default=3)
    with registered(toy("toy-alike", alike)):
        assert [m.name for m in param_owners("layers")] == ["early-exit", "toy-alike"]
        assert [p for p in all_params() if p.name == "layers"] == [LAYERS]
        assert foreign_param_words(method_spec("prompt-lookup"), "layers").startswith(
            "--layers is a parameter of early-exit, toy-alike;")


def test_another_methods_parameter_is_named_with_its_owner_and_what_the_method_takes():
    assert foreign_param_words(method_spec("prompt-lookup"), "layers") == \
        "--layers is early-exit's parameter; prompt-lookup takes --ngram-max, --ngram-min"
    assert foreign_param_words(method_spec("none"), "n_match") == \
        "--spec-ngram-mod-n-match is ngram-mod's parameter; none takes no parameter of its own"
    # a registered combination takes its parts' parameters but owns none of them
    assert [m.name for m in param_owners("ngram_max")] == ["prompt-lookup"]
