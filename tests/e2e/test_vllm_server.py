"""A real vLLM server started here (engine.measure.vllm_server: the venv packaging/install.sh makes) serving the
built-in model with n-gram speculation and per-request speculative decoding metrics: a reply streamed through
engine.remote.engine counts the server's tokens (its usage), not its chunks (a speculative step's tokens come in
one chunk), names each token's id, and its speculation figures are the request's own, which add up to the
server's /metrics counters for that request. One server start for the module (about 45 s on 2 cores); skipped,
saying why, where install.sh made no vLLM venv (SPECSCOPE_SKIP_VLLM=1)."""

from __future__ import annotations

import time

import pytest

from engine.core.config import SamplingConfig
from engine.core.errors import ConfigError

import engine.drafters  # noqa: F401  (the method registry: a reply's plain method)
from engine.core.events import GenerationFinished, GenerationStarted, RoundsRevised, RoundVerified
from engine.measure.vllm_server import (MISSING_VLLM, VllmServer, built_in_model_folder, find_vllm_python,
                                        ngram_config)
from engine.remote.client import ServerClient, metrics, parse_server_url
from engine.remote.engine import load_remote
from engine.remote.metrics import PREFIXES, counters_from_metrics

pytestmark = pytest.mark.skipif(find_vllm_python() is None, reason=MISSING_VLLM)

# a reply that repeats its prompt, so that n-gram drafting finds matches
REPEAT = ("Repeat this list exactly, twice: apple, banana, cherry, date, elderberry, fig, grape, "
          "apple, banana, cherry, date, elderberry, fig, grape.")


@pytest.fixture(scope="module")
def model_folder():
    return built_in_model_folder()


@pytest.fixture(scope="module")
def server(model_folder, tmp_path_factory):
    with VllmServer(model_folder, ngram_config(k=3), log_dir=tmp_path_factory.mktemp("vllm"),
                    name="smollm2") as running:
        yield running


def run(engine, prompt, **kwargs):
    """(started, the streamed rounds, the revised rounds or None, finished)."""
    events = list(engine.generate(prompt, **kwargs))
    assert isinstance(events[0], GenerationStarted) and isinstance(events[-1], GenerationFinished)
    revised = [e for e in events if isinstance(e, RoundsRevised)]
    assert len(revised) <= 1 and (not revised or events[-2] is revised[0])
    return (events[0], [e for e in events if isinstance(e, RoundVerified)], revised[0] if revised else None,
            events[-1])


def counters(server):
    """The server's speculation counters (/metrics) now."""
    return counters_from_metrics(metrics(ServerClient(parse_server_url(server.url))), PREFIXES["vllm"])


def test_a_speculating_vllm_reply_counts_tokens_and_the_requests_own_steps(server):
    engine = load_remote(server.url + "/v1")
    assert engine.server.kind == "vllm" and engine.target.model_id == "smollm2"
    before = counters(server)
    started, rounds, revised, finished = run(engine, [{"role": "user", "content": REPEAT}], max_new_tokens=48)
    deadline = time.monotonic() + 10  # the server's counters may be updated just after the stream's last chunk
    while (after := counters(server)).minus(before).drafts < finished.server.drafts and time.monotonic() < deadline:
        time.sleep(0.2)
    assert finished.error is None and finished.text == "".join(r.text for r in rounds) and finished.text.strip()
    # streamed: one round a token (each with its id, the end of sequence too), whatever the chunks
    assert all(len(r.committed_ids) == 1 and r.committed_ids[0] >= 0 for r in rounds)
    usage = finished.server.completion_tokens
    assert usage == len(rounds) == finished.stats.committed_tokens
    # then re-told as the server's own steps: the same tokens, and every step it reported is a round
    assert revised is not None and "coloured by vllm's own steps" in revised.note
    assert [i for r in revised.rounds for i in r.committed_ids] == [r.target_id for r in rounds]
    assert "".join(r.text for r in revised.rounds) == finished.text
    # the request's own speculation: what the server's counters gained for it, nobody else's requests in them
    server_stats = finished.server
    assert server_stats.source == "request" and server_stats.drafts > 0
    delta = after.minus(before)
    assert (server_stats.drafts, server_stats.draft_tokens, server_stats.accepted_tokens) == \
        (delta.drafts, delta.draft_tokens, delta.accepted_tokens)
    assert finished.stats.accepted_tokens == server_stats.accepted_tokens > 0
    drafting = [r for r in revised.rounds if r.draft_ids]
    assert (len(drafting), sum(len(r.draft_ids) for r in drafting), sum(r.n_accepted for r in drafting)) == \
        (delta.drafts, delta.draft_tokens, delta.accepted_tokens)
    assert (finished.stats.drafting_rounds, finished.stats.drafted_tokens) == (delta.drafts, delta.draft_tokens)
    assert any("per-request-spec-decode-metrics" in n for n in started.notes) and not started.warnings
    assert "tokens are coloured by its steps" in server_stats.note


def test_the_greedy_reply_is_repeatable_and_max_tokens_counts_tokens(server):
    engine = load_remote(server.url)
    one = run(engine, "Count from one to ten.", max_new_tokens=12)[-1]
    two = run(engine, "Count from one to ten.", max_new_tokens=12)[-1]
    assert one.output_ids == two.output_ids and one.stop_reason == "max-new-tokens"
    assert one.stats.committed_tokens == 12 == len(one.output_ids)


def test_a_local_prompt_lookup_draft_verified_by_the_server_gives_its_own_greedy_text(server):
    """Drafts made here, each round verified by vLLM (its prompt log-probabilities): the reply is the server's own
    greedy reply, token for token, with drafts accepted; the round's time has a network share."""
    from engine.core.config import parse_spec
    from engine.runtime import load_engine
    engine = load_engine(server.url)
    message = [{"role": "user", "content": REPEAT}]
    own = run(engine, message, max_new_tokens=40)[-1]
    started, rounds, revised, ours = run(engine, message, spec=parse_spec("prompt-lookup:k=4"), max_new_tokens=40)
    assert started.method == "prompt-lookup" and started.backend == "remote" and revised is None
    assert any("recomputes the whole context" in note for note in started.notes)
    assert ours.error is None and ours.text == own.text and ours.stop_reason == own.stop_reason
    assert list(ours.output_ids) == list(own.output_ids)[:len(ours.output_ids)]
    assert ours.stats.accepted_tokens > 0 and ours.stats.target_passes < len(ours.output_ids)
    assert all(0 < r.network_seconds <= r.verify_seconds for r in rounds)
    # a draft model here of the server model's tokenizer (the built-in GGUF on llama.cpp) drafts for it too
    drafted = run(engine, message, spec=parse_spec("draft-model:k=3,draft=default"), max_new_tokens=40)[-1]
    assert drafted.error is None and drafted.text == own.text and drafted.stats.accepted_tokens > 0
    with pytest.raises(ConfigError, match="top-k to 20 or less"):
        engine.generate(message, spec=parse_spec("prompt-lookup:k=4"), sampling=SamplingConfig(temperature=0.7))
    with pytest.raises(ConfigError, match="drafts from the target's own states, which are on the server"):
        engine.validate(parse_spec("early-exit:layers=4"))


def test_bench_concurrency_prints_a_row_per_number_of_streams(server, capsys):
    """`specscope bench --model URL --concurrency 1,4`: one row per N, each with the server's tokens and a positive
    aggregate tok/s, and the server's acceptance summed over the streams' own per-request figures."""
    from engine.cli.main import main
    code = main(["bench", "--model", server.url + "/v1", "--concurrency", "1,4", "--max-new-tokens", "16"])
    out, err = capsys.readouterr()
    assert code == 0, err[-2000:]
    rows = {}
    for line in out.splitlines():
        cells = [cell.strip() for cell in line.strip("│ ").split("│")]
        if len(cells) == 8 and cells[0].isdigit():
            rows[int(cells[0])] = cells
    assert sorted(rows) == [1, 4], out
    for n, cells in rows.items():
        assert 0 < int(cells[1]) <= 16 * n and float(cells[3]) > 0, cells  # tokens, aggregate tok/s
    assert "speculation figures from: request" in out
