"""A model served elsewhere: `--model http(s)://HOST:PORT[/v1]` talks to an OpenAI-compatible server
(llama-server, vLLM, SGLang, or another) and runs a chat as the same stream of events as engine.core.engine.

`RemoteEngine.generate` has the local Engine's interface. Plain decoding is the server's own reply (with its own
speculation): GenerationStarted, one plain RoundVerified per streamed token (a server says which of its tokens were
drafted nowhere while it streams: the started event's warnings or notes say what this server exposes), where vLLM
reported its steps one RoundsRevised re-telling the reply as those steps (engine.remote.steps), and
GenerationFinished whose stats are measured here (tok/s, time to first token) with the server's own speculation
counts (the request's own metrics, else /metrics before and after the request, else the response's timings) in
`GenerationFinished.server` (engine.core.stats.ServerStats) and in the stats' drafted/accepted counts. A SpecScope
method drafts here and the server verifies each round (engine.remote.verify; the Engine that does it is built by
engine.runtime and handed in as `local_drafts`), where the server can.

A failure mid-reply (the stream cut, the server silent, an error event) ends the reply with
stop_reason "server-error" and the message in `error`, the partial reply kept. Touches the network through
engine.remote.client and the keyring through engine.models.secrets (the server's API key); no Qt.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterator

from engine.core.chat import Conversation, normalize_conversation
from engine.core.config import SamplingConfig, SpecConfig
from engine.core.errors import ConfigError, ServerError
from engine.core.events import Event, GenerationFinished, GenerationStarted
from engine.core.methods import plain_method
from engine.remote.client import (ServerAddress, ServerClient, ServerInfo, StreamCut, detect_server, metrics,
                                  parse_server_url)
from engine.remote.reply import StreamedReply, request_counts
from engine.remote.verify import sampling_refusal, verify_refusal
from engine.remote.metrics import (PREFIXES, SpecCounters, counters_from_metrics, counters_from_timings,
                                   spec_settings_from_props, speed_from_timings)
from engine.core.stats import GenerationStats, ServerStats

BACKEND = "remote"
KNOWN_EXTRAS = ("llama-server", "vllm", "sglang")  # servers that take top_k beside the OpenAI fields


@dataclass(frozen=True, slots=True)
class RemoteTarget:
    """The facts the window and the benchmark read of a target (engine.models.load.LoadedModel's names)."""

    name: str  # the address as given
    label: str  # "model-id on host:port (llama-server)"
    model_id: str
    server: ServerInfo
    address: ServerAddress
    backend: str = BACKEND
    dtype: str = "server"
    dtype_label: str = "on the server"
    n_layers: int = 0  # not known here
    context_length: int = 0  # 0: the server's own limit applies
    eos_ids: frozenset[int] = frozenset()

    @property
    def device(self) -> str:
        return self.address.origin

    @property
    def device_label(self) -> str:
        return f"{self.server.kind} at {self.address.url}"


def api_key_for(address: ServerAddress) -> str | None:
    """The API key saved for this server's address (engine.models.secrets), else None."""
    from engine.models import secrets
    return secrets.server_key(address.origin)


def load_remote(name: str, progress: Callable[[str], None] | None = None, *, api_key: str | None = None,
                read_timeout: float | None = None, on_status: Callable[[str], None] | None = None,
                local_drafts: Callable[["RemoteEngine"], object] | None = None) -> "RemoteEngine":
    """Connect to the server at `name` and pick its first model (a `#model-id` can't be given: a server
    serves what it was started with). ServerError with one sentence when it can't be used. `local_drafts` builds,
    on first use, the engine that drafts here and verifies on the server (engine.runtime: SpecScope's methods
    with this target)."""
    address = parse_server_url(name)
    key = api_key if api_key is not None else api_key_for(address)
    client = ServerClient(address, key, **({"read_timeout": read_timeout} if read_timeout else {}))
    if progress:
        progress(f"Connecting to {address.url}…")
    info = detect_server(client)
    model_id = info.models[0]
    where = f"{address.host}:{address.port}"
    target = RemoteTarget(name=name, label=f"{model_id} on {where} ({info.kind})", model_id=model_id,
                          server=info, address=address, context_length=info.context_length or 0)
    if progress:
        progress(f"{info.kind} at {address.url} serves {', '.join(info.models)}")
    return RemoteEngine(client, target, on_status=on_status, local_drafts=local_drafts)


def exposure_note(info: ServerInfo, counters_seen: bool, own: bool = False, coloured: bool = False) -> str:
    """What this server tells about its speculation, in words (shown where token colours would be); `own`: it
    gave this request's own figures (vLLM's per-request metrics), `coloured`: step by step, so every token got its
    status."""
    if own:
        return (f"{info.kind} reported this request's own speculation (steps, drafted and accepted tokens); "
                + ("tokens are coloured by its steps" if coloured else "tokens are shown plain"))
    if info.kind == "vllm" and counters_seen:
        return ("vllm says which of its tokens were drafted when a reply ends, where it runs with "
                "--per-request-spec-decode-metrics detailed: the reply streams plain, then is coloured by its steps; "
                "else tokens stay plain and acceptance comes from "
                + ("its /metrics counters" if info.metrics else "nowhere (no /metrics)"))
    if info.kind == "llama-server":
        where = "its /metrics counters and each response's timings" if info.metrics else \
            "each response's timings (start it with --metrics for per-position acceptance)"
    elif info.kind == "vllm":
        where = ("each response's own metrics where it runs with --per-request-spec-decode-metrics, else "
                 + ("its /metrics counters" if info.metrics else "nowhere (no /metrics)"))
    elif info.metrics:
        where = "its /metrics counters"
    else:
        where = "nothing about speculation (no /metrics)"
    seen = "" if counters_seen else "; it reports no speculative decoding"
    return (f"{info.kind} verifies its own drafts and says which tokens were drafted nowhere, so tokens are "
            f"shown plain; acceptance comes from {where}{seen}")


class RemoteEngine:
    """The local Engine's interface over a server (engine.core.engine.EngineLike): validate, generate,
    release, on_status, target. Plain: the server's own reply (and its own speculation); a SpecScope method:
    drafted here, verified on the server each round (engine.remote.verify), where the server can."""

    def __init__(self, client: ServerClient, target: RemoteTarget, on_status: Callable[[str], None] | None = None,
                 local_drafts: Callable[["RemoteEngine"], object] | None = None) -> None:
        self.client = client
        self.target = target
        self.on_status = on_status
        self.local_drafts = local_drafts
        self._drafting = None  # the Engine drafting here, built on first use

    def verify_refusal(self) -> str | None:
        """Why SpecScope's drafts can't be verified on this server (one line), or None where they can."""
        why = verify_refusal(self.server)
        if why is None and self.local_drafts is None:
            return "this engine was built without SpecScope's drafters (engine.runtime.load_engine builds it with them)"
        return why

    def drafting(self):
        """The engine that drafts here and verifies on the server (built once: its tokenizer asks the server)."""
        if self._drafting is None:
            self._drafting = self.local_drafts(self)
        return self._drafting

    @property
    def server(self) -> ServerInfo:
        return self.target.server

    def validate(self, spec: SpecConfig) -> None:
        """A SpecScope method drafts here and is verified on the server, where it can verify (vLLM); elsewhere the
        server speculates as it was started and a method is refused, saying why."""
        if not spec.speculative:
            return
        why = self.verify_refusal()
        if why:
            raise ConfigError(f"{spec.label()} drafts here for the server to verify, but {why} "
                              f"({self.spec_settings_words()})")
        self.drafting().validate(spec)

    def spec_settings_words(self) -> str:
        settings = spec_settings_from_props(self.server.props, self.server.slots)
        return ", ".join(f"{k} = {v}" for k, v in settings) or "settings not reported"

    def release(self) -> None:
        """Nothing is held here but the local drafter: the server keeps its own cache."""
        if self._drafting is not None:
            self._drafting.release()

    def prompt_ids(self, conversation: Conversation, system: str | None = None) -> list[int]:
        raise ConfigError("a server's prompt is tokenized on the server; SpecScope never sees its ids")

    def generate(self, conversation: Conversation, *, spec: SpecConfig | None = None,
                 sampling: SamplingConfig = SamplingConfig(), max_new_tokens: int = 256,
                 stop_strings: tuple[str, ...] = (), cancel: threading.Event | None = None,
                 system: str | None = None, record: bool = False) -> Iterator[Event]:
        """Chat on the server; yields events (see the module docstring). Errors before the request come early."""
        spec = SpecConfig() if spec is None else spec
        if max_new_tokens < 1:
            raise ConfigError(f"max new tokens must be ≥ 1, got {max_new_tokens}")
        why = self.verify_refusal() if spec.speculative else None
        if spec.speculative and why is None:  # drafted here, verified there
            refusal = sampling_refusal(sampling.temperature, sampling.top_k)
            if refusal:
                raise ConfigError(refusal)
            from engine.core.recording import TOP_N  # the alternatives a recorded round keeps per position
            engine = self.drafting()
            # the server's own alternatives where a round's tree is recorded (never the rows' thin-spread rest)
            engine.runner.top_n = max(1 if sampling.greedy else sampling.top_k, TOP_N if record else 1)
            events = engine.generate(conversation, spec=spec, sampling=sampling, max_new_tokens=max_new_tokens,
                                     stop_strings=stop_strings, cancel=cancel, system=system, record=record)
            return _noted(events, VERIFY_NOTE.format(server=self.server.kind))
        messages = normalize_conversation(conversation, system)
        warnings = list(spec.warnings)
        if spec.speculative:
            warnings.append(f"{spec.label()} is ignored: {why}; {self.target.label} speculates as its server was "
                            f"started ({self.spec_settings_words()})")
        payload = self.payload(messages, sampling, max_new_tokens, stop_strings)
        return self._run(payload, sampling, max_new_tokens, tuple(warnings), cancel or threading.Event())

    def payload(self, messages: list[dict], sampling: SamplingConfig, max_new_tokens: int,
                stop_strings: tuple[str, ...]) -> dict:
        """The chat completion request: the conversation, sampling settings, stops and the token budget."""
        body = {"model": self.target.model_id, "messages": messages, "stream": True,
                "max_tokens": max_new_tokens, "temperature": sampling.temperature, "top_p": sampling.top_p,
                "stream_options": {"include_usage": True}}
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        if stop_strings:
            body["stop"] = list(stop_strings)
        if sampling.top_k and self.server.kind in KNOWN_EXTRAS:
            body["top_k"] = sampling.top_k
        if self.server.kind == "llama-server":
            body["logprobs"] = True  # llama-server gives each token's id and log-probability with it
            body["timings_per_token"] = False
        elif self.server.kind == "vllm":
            # vLLM sends a speculative step's tokens in one chunk; its logprobs name each token (its id, its bytes)
            body["logprobs"] = True
            body["return_tokens_as_token_ids"] = True
        return body

    def _counters(self) -> SpecCounters | None:
        prefix = PREFIXES.get(self.server.kind)
        if not prefix or not self.server.metrics:
            return None
        text = metrics(self.client)
        return counters_from_metrics(text, prefix) if text else None

    def _run(self, payload: dict, sampling: SamplingConfig, max_new_tokens: int, warnings: tuple[str, ...],
             cancel: threading.Event) -> Iterator[Event]:
        before = self._counters()
        note = exposure_note(self.server, True)
        told = self.server.kind == "vllm"  # it may say at the end: information, not a problem
        yield GenerationStarted(
            spec_label=f"server ({self.server.kind})", method=plain_method().name, k=0, model=self.target.label, draft=None,
            device=self.target.device, dtype=self.target.dtype_label, greedy=sampling.greedy, prompt_tokens=0,
            reused_prefix_tokens=0, max_new_tokens=max_new_tokens, warnings=warnings + (() if told else (note,)),
            notes=(note,) if told else (), backend=self.target.backend)
        reply = StreamedReply(started=time.perf_counter())
        try:
            for chunk in self.client.stream("/v1/chat/completions", payload, cancel):
                for event in reply.take(chunk):
                    yield event
                if reply.error:
                    break
        except StreamCut as cut:
            reply.error = f"{cut.reason} after {reply.n_tokens} tokens (the partial reply is kept)"
        except ServerError as exc:
            reply.error = str(exc)
        if cancel.is_set() and reply.error is None:
            reply.finish_reason = "cancelled"
        revised = reply.revise(self.server.kind)
        if revised is not None:
            yield revised
        yield self._finished(reply, before)

    def _finished(self, reply: StreamedReply, before: SpecCounters | None) -> GenerationFinished:
        server = self._server_stats(reply, before)
        stats = reply.stats.snapshot()
        stats = dataclasses.replace(stats, elapsed_seconds=max(stats.elapsed_seconds, reply.elapsed()))
        if reply.revised:  # the server's own steps, each a round: every figure follows from them
            if reply.usage_tokens is not None:
                stats = dataclasses.replace(stats, committed_tokens=reply.usage_tokens)
        elif server.source:
            stats = with_server_counts(stats, server)
        elif reply.usage_tokens is not None:  # the server's count of its tokens, never our count of its chunks
            stats = dataclasses.replace(stats, committed_tokens=reply.usage_tokens)
        stop = reply.stop_reason()
        return GenerationFinished(stop_reason=stop, text=reply.text, output_ids=tuple(reply.ids), stats=stats,
                                  error=reply.error, server=server, backend=self.target.backend,
                                  device=self.target.device)

    def _server_stats(self, reply: StreamedReply, before: SpecCounters | None) -> ServerStats:
        after = self._counters() if before is not None else None
        own = request_counts(reply.request_metrics)
        timings = counters_from_timings(reply.timings)
        settings = spec_settings_from_props(self.server.props, self.server.slots)
        prompt_seconds, server_tok_per_s = speed_from_timings(reply.timings)
        common = dict(server=self.server.kind, url=self.target.address.url, completion_tokens=reply.usage_tokens,
                      settings=settings, request_draft_tokens=timings[0] if timings else None,
                      request_accepted_tokens=timings[1] if timings else None,
                      server_prompt_seconds=prompt_seconds, server_tok_per_s=server_tok_per_s)
        if own is not None:  # the request's own figures (vLLM's per-request metrics): nobody else's requests in them
            return ServerStats(source="request", drafts=own[0], draft_tokens=own[1], accepted_tokens=own[2],
                               accepted_per_position=own[3],
                               note=exposure_note(self.server, True, own=True, coloured=reply.revised),
                               **common)
        if after is not None:
            delta = after.minus(before)
            if delta.drafts or delta.draft_tokens or timings:
                return ServerStats(source="metrics", drafts=delta.drafts, draft_tokens=delta.draft_tokens,
                                   accepted_tokens=delta.accepted_tokens,
                                   accepted_per_position=delta.accepted_per_position,
                                   note=exposure_note(self.server, True), **common)
        if timings is not None:
            return ServerStats(source="timings", drafts=0, draft_tokens=timings[0], accepted_tokens=timings[1],
                               accepted_per_position=(), note=exposure_note(self.server, True), **common)
        return ServerStats(source="", drafts=0, draft_tokens=0, accepted_tokens=0, accepted_per_position=(),
                           note=exposure_note(self.server, False), **common)


VERIFY_NOTE = ("drafted here, verified by {server}: each round sends the context and the draft and reads the target's "
               "log-probabilities of them (prompt_logprobs); {server} recomputes the whole context for such a request "
               "(it skips its prefix cache), so a round costs more as the conversation grows")


def _noted(events: Iterator[Event], note: str) -> Iterator[Event]:
    """The events with `note` added to the started event's notes."""
    for event in events:
        yield dataclasses.replace(event, notes=event.notes + (note,)) if isinstance(event, GenerationStarted) \
            else event


def with_server_counts(stats: GenerationStats, server: ServerStats) -> GenerationStats:
    """Our measured stats with the server's speculation counts in them (so every view shows acceptance):
    target passes = tokens − accepted drafts, as in engine.core.stats; per-position acceptance is the server's
    (accepted at a position / drafts). Draft and verify times stay 0: the server does not report them."""
    committed = stats.committed_tokens if server.completion_tokens is None else server.completion_tokens
    return dataclasses.replace(
        stats, committed_tokens=committed, drafted_tokens=server.draft_tokens, accepted_tokens=server.accepted_tokens,
        drafting_rounds=server.drafts, target_passes=max(1, committed - server.accepted_tokens) if committed else 0,
        per_position_acceptance=server.per_position_acceptance, accept_length_histogram=())


def server_figures_words(server: ServerStats) -> list[str]:
    """The server's own figures for one reply, each saying where it came from (the CLI's stats line, the
    window's status): the counts and the server's definitions, or what it exposes when it said nothing."""
    if not server.source:
        return [f"{server.server}: no speculative decoding reported for this reply"] + server_speed_words(server)
    where = f"{server.server} " + {"metrics": "/metrics", "request": "this request's metrics"}.get(server.source,
                                                                                                 "timings")
    parts = [f"server ({where}): {server.accepted_tokens}/{server.draft_tokens} drafted tokens accepted"]
    if server.acceptance_rate is not None:
        parts.append(f"acceptance {server.acceptance_rate:.0%}")
    if server.mean_accepted_length is not None:
        parts.append(f"{server.drafts} drafts, {server.mean_accepted_length:.2f} tokens per verification")
    if server.per_position_acceptance:
        parts.append("per position " + " ".join(f"{p:.2f}" for p in server.per_position_acceptance))
    if server.settings:
        parts.append(", ".join(f"{k} = {v}" for k, v in server.settings))
    return parts + server_speed_words(server)


def server_speed_words(server: ServerStats) -> list[str]:
    """The server's own timing of the reply, beside ours (their gap is the network and the client)."""
    parts = []
    if server.server_tok_per_s is not None:
        parts.append(f"server's own timing: {server.server_tok_per_s:.1f} tok/s")
    if server.server_prompt_seconds is not None:
        parts.append(f"prompt {server.server_prompt_seconds:.2f} s on the server")
    return parts
