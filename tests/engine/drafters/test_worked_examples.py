"""The worked examples in the lookup drafters' docstrings (ids in, ids out: prompt-lookup, ngram-map, ngram-mod,
suffix and its tree, the tree shapes) run as doctests, so an example that no longer tells what the code does fails here."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ("prompt_lookup", "ngram_map", "ngram_mod", "suffix_tree", "suffix", "tree_shapes")


@pytest.mark.parametrize("name", MODULES)
def test_the_worked_examples_hold(name):
    module = importlib.import_module(f"engine.drafters.{name}")
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 2 and result.failed == 0, result
