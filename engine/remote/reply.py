"""One streamed chat reply as it arrives from a server (engine.remote.engine reads it chunk by chunk): its tokens as
one-token plain rounds (each with its id, text and probability where the server names them: llama-server's `id`,
vLLM's `token_id:N` and bytes), its finish reason, usage and the server's figures in the last chunk, and, where vLLM
reported its steps one by one, the reply re-told as those steps (engine.remote.steps: RoundsRevised).

Pure parsing of the chunks' dicts: no network, no Qt.
"""

from __future__ import annotations

import codecs
import dataclasses
import math
import time
from dataclasses import dataclass

from engine.core.events import RoundsRevised, RoundVerified, TokenStatus
from engine.core.stats import StatsAccumulator
from engine.remote.steps import SERVER_DRAFTER, UNKNOWN_ID, place_steps, placement_note, server_rounds

TOKEN_ID_PREFIX = "token_id:"  # vLLM's logprobs entry under return_tokens_as_token_ids


@dataclass
class StreamedReply:
    """One streamed reply as it arrives: its tokens, text, finish reason and the server's last figures."""

    started: float
    text: str = ""
    ids: list = dataclasses.field(default_factory=list)
    n_tokens: int = 0
    finish_reason: str | None = None
    error: str | None = None
    timings: dict | None = None
    usage_tokens: int | None = None
    request_metrics: dict | None = None  # vLLM's per-request speculative decoding metrics (the last chunk's)
    rounds: list = dataclasses.field(default_factory=list)  # the one-token plain rounds as they streamed
    chunk_sizes: list = dataclasses.field(default_factory=list)  # tokens per chunk that brought any
    revised: bool = False  # the rounds were re-told as the server's own steps (RoundsRevised)
    stats: StatsAccumulator = dataclasses.field(default_factory=lambda: StatsAccumulator(0))
    # token bytes (vLLM's logprobs) to text: a character may span tokens
    decoder: codecs.IncrementalDecoder = dataclasses.field(
        default_factory=lambda: codecs.getincrementaldecoder("utf-8")(errors="replace"))

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def take(self, chunk: dict) -> list[RoundVerified]:
        """The rounds of one streamed chunk (one per token where the server names its tokens)."""
        if "error" in chunk:
            error = chunk["error"]
            message = error.get("message") if isinstance(error, dict) else error
            self.error = f"the server reported an error mid-reply: {message}"
            return []
        if isinstance(chunk.get("timings"), dict):
            self.timings = chunk["timings"]
        usage = chunk.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            self.usage_tokens = usage["completion_tokens"]
        spec = (chunk.get("metrics") or {}).get("speculative_decoding") if isinstance(chunk.get("metrics"), dict) \
            else None
        if isinstance(spec, dict):
            self.request_metrics = spec
        choices = chunk.get("choices") or []
        choice = choices[0] if choices and isinstance(choices[0], dict) else {}
        if choice.get("finish_reason"):
            self.finish_reason = str(choice["finish_reason"])
        delta = choice.get("delta") or {}
        content = delta.get("content") if isinstance(delta, dict) else None
        logprobs = choice.get("logprobs")
        named = isinstance(logprobs, dict) and bool(logprobs.get("content"))
        if not content and not (named and isinstance(content, str)):  # an empty piece that names its token: EOS
            return []
        rounds = [self._round(piece, token_id, p) for piece, token_id, p in _pieces(content, logprobs, self.decoder)]
        self.chunk_sizes.append(len(rounds))
        return rounds

    def _round(self, piece: str, token_id: int, p_target: float | None) -> RoundVerified:
        event = RoundVerified(
            index=self.n_tokens, drafter=SERVER_DRAFTER, draft_ids=(), draft_pieces=(), n_accepted=0,
            target_id=token_id, target_status=TokenStatus.PLAIN, target_piece=piece, p_target=(), p_draft=(),
            p_target_of_target_id=p_target, committed_ids=(token_id,), committed_pieces=(piece,),
            draft_seconds=0.0, verify_seconds=0.0, elapsed_seconds=self.elapsed(),
            n_committed_total=self.n_tokens + 1)
        self.n_tokens += 1
        self.text += piece
        self.ids.append(token_id)
        self.stats.add_round(event)
        self.rounds.append(event)
        return event

    def revise(self, server: str) -> RoundsRevised | None:
        """The reply re-told as the server's own steps where it reported them step by step (vLLM's detailed
        per-request metrics) and every token was named; the stats follow the revised rounds. None otherwise."""
        metrics = self.request_metrics
        if self.error or not isinstance(metrics, dict) or not self.rounds or \
                any(r.target_id == UNKNOWN_ID for r in self.rounds):
            return None
        accepted, drafted = metrics.get("per_step_accepted"), metrics.get("per_step_drafted")
        if not isinstance(accepted, list) or not isinstance(drafted, list) or \
                not all(isinstance(v, int) for v in accepted + drafted):
            return None
        placement = place_steps(self.chunk_sizes, accepted, drafted)
        note = placement_note(server, placement, len(accepted))
        if placement is None:
            return RoundsRevised(tuple(self.rounds), note)
        rounds = server_rounds(self.rounds, placement)
        k = metrics.get("num_spec_tokens")
        self.stats = StatsAccumulator(k if isinstance(k, int) and k > 0 else max(drafted, default=0))
        for event in rounds:
            self.stats.add_round(event)
        self.revised = True
        return RoundsRevised(rounds, note)

    def stop_reason(self) -> str:
        if self.error:
            return "server-error"
        return {"stop": "eos", "length": "max-new-tokens", "cancelled": "cancelled"}.get(
            self.finish_reason or "", self.finish_reason or "eos")


def _pieces(content: str, logprobs, decoder=None) -> list[tuple[str, int, float | None]]:
    """(text, id, probability) per token of a chunk: from the logprobs where their text adds up to the chunk's
    (llama-server: `id` and `token`; vLLM with return_tokens_as_token_ids: `token` "token_id:N" and `bytes`, decoded
    by the reply's `decoder`), else the whole chunk as one piece of unknown id and probability (None: not given)."""
    entries = logprobs.get("content") if isinstance(logprobs, dict) else None
    if isinstance(entries, list) and entries and all(isinstance(e, dict) for e in entries):
        pieces = _in_content([_entry(e, decoder) for e in entries], content)
        if pieces is not None and all(isinstance(p[1], int) for p in pieces):
            return [(text, token_id, math.exp(lp) if isinstance(lp, (int, float)) else None)
                    for text, token_id, lp in pieces]
    return [(content, UNKNOWN_ID, None)]


def _in_content(pieces: list, content: str) -> list | None:
    """The pieces as the chunk's text has them: a special token the server left out of the text (vLLM's end of
    sequence) is an empty piece; None where the pieces don't spell the text."""
    out, at = [], 0
    for text, token_id, lp in pieces:
        if content.startswith(text, at):
            out.append((text, token_id, lp))
            at += len(text)
        else:
            out.append(("", token_id, lp))
    return out if at == len(content) else None


def _entry(entry: dict, decoder) -> tuple[str, int | None, object]:
    """One logprobs entry as (text, id, log-probability)."""
    token = str(entry.get("token", ""))
    if token.startswith(TOKEN_ID_PREFIX) and token[len(TOKEN_ID_PREFIX):].isdigit():
        raw = entry.get("bytes")
        ok = decoder is not None and isinstance(raw, list) and all(isinstance(b, int) and 0 <= b < 256 for b in raw)
        text = decoder.decode(bytes(raw)) if ok else token
        return text, int(token[len(TOKEN_ID_PREFIX):]), entry.get("logprob")
    return token, entry.get("id"), entry.get("logprob")


def request_counts(metrics: dict | None) -> tuple[int, int, int, tuple[int, ...]] | None:
    """vLLM's per-request speculative decoding metrics (`metrics.speculative_decoding` of a response, with
    --per-request-spec-decode-metrics) as (verify steps, drafted tokens, accepted tokens, accepted at each draft
    position); None where they are absent or unreadable. The per-position counts come from the per-step arrays
    (`detailed`), else from the acceptance histogram (a step that kept j drafts kept positions 1…j)."""
    if not isinstance(metrics, dict):
        return None
    try:
        steps, drafted = int(metrics["num_spec_steps"]), int(metrics["num_draft_tokens"])
        accepted = int(metrics["num_accepted_draft_tokens"])
        per_step = metrics.get("per_step_accepted")
        histogram = [(j, int(n)) for j, n in enumerate(metrics.get("acceptance_histogram") or ())]
        kept = [int(a) for a in per_step] if per_step else [j for j, n in histogram for _ in range(n)]
    except (KeyError, TypeError, ValueError):
        return None
    positions = tuple(sum(1 for a in kept if a > i) for i in range(max(kept, default=0)))
    return steps, drafted, accepted, positions
