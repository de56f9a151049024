"""bench --compare-llama-server's bookkeeping (engine.measure.bench_server), without a server: which configs have
llama-server's equal, how its replies are tallied and put beside ours, and what is refused before the run."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from engine.core.config import parse_spec
from engine.core.errors import ConfigError
from engine.measure.bench_server import ServerTally, add_server_rows, check_compare_server, server_args


def test_plain_decoding_and_the_pools_have_llama_servers_equal_and_other_methods_none():
    assert server_args(parse_spec("none"), None) == ()
    assert server_args(parse_spec("prompt-lookup:k=3"), None) is None
    assert server_args(parse_spec("suffix"), None) is None
    args = server_args(parse_spec("ngram-mod:k=64"), None)
    assert args[:2] == ("--spec-type", "ngram-mod") and "--spec-ngram-mod-n-max" in args
    assert server_args(parse_spec("ngram-map:k=8,size_n=3,size_m=8,four_values=1"), None)[:2] == \
        ("--spec-type", "ngram-map-k4v")
    with pytest.raises(ConfigError, match="k ≥ n_max"):
        server_args(parse_spec("ngram-mod:k=4"), None)
    with pytest.raises(ConfigError, match="k ≥ size_m"):
        server_args(parse_spec("ngram-map:k=4"), None)


def test_replies_are_tallied_per_category_and_put_beside_ours():
    tally = ServerTally()
    reply = {"tokens": [1, 2, 3], "timings": {"draft_n": 6, "draft_n_accepted": 4, "predicted_n": 3,
                                               "predicted_ms": 60.0}}
    tally.add("code", reply, (1, 2, 3))
    tally.add("qa", {"tokens": [1, 9], "timings": {"predicted_n": 2, "predicted_ms": 40.0}}, (1, 2))
    assert tally.row("code") == {"llama_server_drafted": 6, "llama_server_accepted": 4,
                                 "llama_server_acceptance": 4 / 6, "llama_server_identical": 1,
                                 "llama_server_tok_per_s": 50.0}
    overall = tally.row("all")
    assert overall["llama_server_identical"] == 1 and overall["llama_server_tok_per_s"] == 50.0
    assert tally.row("qa")["llama_server_acceptance"] is None  # it drafted nothing there
    assert tally.row("math") == {}
    summary = {"ngram-mod:k=64": {"all": {"prompts": 2}, "code": {"prompts": 1}}}
    add_server_rows(summary, {"ngram-mod:k=64": tally})
    assert summary["ngram-mod:k=64"]["code"]["llama_server_drafted"] == 6


def test_only_a_greedy_gguf_on_llama_cpp_is_compared():
    transformers = SimpleNamespace(target=SimpleNamespace(backend="transformers", label="tiny"))
    with pytest.raises(ConfigError, match="--backend llama.cpp"):
        check_compare_server(transformers, 0.0)
    llama = SimpleNamespace(target=SimpleNamespace(backend="llama.cpp", label="tiny"))
    with pytest.raises(ConfigError, match="greedy"):
        check_compare_server(llama, 0.7)
