"""The method table (engine.models.availability): every registered method × the built-in GGUF, a tiny Hugging Face
folder and a tiny GGUF → the backend "auto" chooses (engine.backends.resolve_backend, by the model and the method,
with its note when the method moves the model) or the refusal with its reason (MethodSpec.why_unusable: no MTP
layers, no Gemma 4 model). `pytest -s` prints the table."""

from __future__ import annotations

import importlib.util

import pytest

import engine.drafters  # noqa: F401  (registers the methods)
from engine.backends import backend_named, resolve_backend
from engine.core.methods import method_spec, methods
from engine.models import catalog
from engine.models.availability import entry_choices, method_choice

LLAMA_CPP = importlib.util.find_spec("llama_cpp") is not None


@pytest.fixture(scope="module")
def models(tiny_dir, tmp_path_factory) -> dict[str, catalog.CatalogEntry]:
    from tests.fixtures.tiny_gguf import build
    gguf, = build("llama", tmp_path_factory.mktemp("tiny-gguf") / "tiny-llama.gguf")
    return {"built-in GGUF": catalog.describe_default(), "tiny HF folder": catalog.describe_path(tiny_dir),
            "tiny GGUF": catalog.describe_path(gguf)}


# the shipped methods on these three models (each a Llama without MTP layers, no Gemma 4), "auto" under each
GGUF_AUTO = {"none": "llama.cpp", "draft-model": "llama.cpp", "prompt-lookup": "llama.cpp",
             "early-exit": "transformers", "eagle": "transformers", "mtp": None, "assistant": None}
FOLDER_AUTO = {**{name: "transformers" for name in GGUF_AUTO}, "mtp": None, "assistant": None}


def table_text(table: dict) -> str:
    lines = ["| method | " + " | ".join(table) + " |", "|---" * (len(table) + 1) + "|"]
    for method in methods():
        cells = []
        for choices in table.values():
            choice = choices[method.name]
            cells.append(f"**{choice.backend}**" + (f" ({choice.note})" if choice.note else "") if choice.usable
                         else f"refused: {choice.refusal}")
        lines.append(f"| {method.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def test_every_method_on_every_model_gets_a_backend_or_a_reason(models):
    table = {label: {c.method: c for c in entry_choices(entry)} for label, entry in models.items()}
    print("\n" + table_text(table))
    for label, choices in table.items():
        source = catalog.entry_source(models[label])
        own = resolve_backend(source).name  # "auto" by the model alone
        assert list(choices) == [m.name for m in methods()]
        for name, choice in choices.items():
            spec = method_spec(name)
            if not choice.usable:
                assert choice.refusal, (label, name)
                continue
            assert choice.backend in spec.backends and backend_named(choice.backend).serves(source), (label, name)
            # the model's own backend where the method runs there; elsewhere only with a note saying why
            assert (choice.backend == own) == (not choice.note), (label, name, choice)
            assert choice.backend == own or own not in spec.backends, (label, name)


@pytest.mark.skipif(not LLAMA_CPP, reason="llama-cpp-python is not installed: every GGUF runs on transformers")
def test_the_shipped_methods_land_where_they_run(models):
    for label, expected in (("built-in GGUF", GGUF_AUTO), ("tiny HF folder", FOLDER_AUTO), ("tiny GGUF", GGUF_AUTO)):
        choices = {c.method: c for c in entry_choices(models[label])}
        assert {name: choices[name].backend for name in expected} == expected, label
    builtin = {c.method: c for c in entry_choices(models["built-in GGUF"])}
    assert builtin["mtp"].refusal == "SmolLM2-135M-Instruct (built-in) has no MTP layers (a llama model)"
    assert "is not a Gemma 4 model" in builtin["assistant"].refusal
    assert "runs on transformers (its GGUF converted once), not llama.cpp" in builtin["early-exit"].note


def test_a_chosen_backend_that_cant_serve_the_method_refuses_it_with_the_reason(models):
    entry = models["built-in GGUF"]
    source = catalog.entry_source(entry)
    choice = method_choice("early-exit", source, entry, requested="llama.cpp")
    assert not choice.usable and "needs the transformers backend, not llama.cpp" in choice.refusal
    assert method_choice("early-exit", source, entry, requested="transformers").backend == "transformers"


def test_a_method_the_loaded_backend_serves_stays_there(models):
    """`loaded`: under auto a method the model's backend now serves runs there (a GGUF loaded on transformers
    keeps prompt lookup there); a model without an entry is judged by its source alone."""
    entry = models["tiny GGUF"]
    source = catalog.entry_source(entry)
    assert method_choice("prompt-lookup", source, entry, loaded="transformers").backend == "transformers"
    assert not method_choice("mtp", source, entry).usable
    assert method_choice("mtp", source, None).usable  # no facts to refuse it by: the engine's check refuses it later
