"""What an inference server says about its own speculation, read from the text it answers.

- Prometheus text (`/metrics`): llama-server (`--metrics`) and vLLM expose the same shape of counters,
  `<prefix>:spec_decode_num_drafts`, `…num_draft_tokens`, `…num_accepted_tokens` and
  `…num_accepted_tokens_per_pos{position="N"}` (N from 0), with the `_total` suffix Prometheus counters
  carry (llama.cpp writes it; vLLM's client library adds it). `counters_from_metrics` reads them and
  `SpecCounters.minus` takes the delta around one request.
- Per-request figures: llama-server's `timings.draft_n` / `timings.draft_n_accepted` in a response.
- Server settings: llama-server's `/props` (`speculative.types` and friends).

Pure parsing of strings and dicts: no network, no Qt. engine.remote.engine fetches the text; the figures derived
from these counts (acceptance rate, mean accepted length) are engine.core.stats.ServerStats'.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

PREFIXES = {"llama-server": "llamacpp", "vllm": "vllm", "sglang": "sglang"}
_SAMPLE = re.compile(r'^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)')
_LABEL = re.compile(r'(?P<key>[A-Za-z_][A-Za-z0-9_]*)\s*=\s*"(?P<value>(?:[^"\\]|\\.)*)"')


@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float

    def label(self, key: str) -> str | None:
        return dict(self.labels).get(key)


def parse_prometheus(text: str) -> list[Sample]:
    """The samples of a Prometheus text exposition (comments and malformed lines skipped)."""
    samples = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            continue
        try:
            value = float(match["value"])
        except ValueError:
            continue
        if math.isnan(value):
            continue
        labels = tuple((m["key"], m["value"]) for m in _LABEL.finditer(match["labels"] or ""))
        samples.append(Sample(match["name"], labels, value))
    return samples


@dataclass(frozen=True, slots=True)
class SpecCounters:
    """A server's cumulative speculative-decoding counters (or the delta of two readings)."""

    drafts: int  # verification steps that checked a draft
    draft_tokens: int
    accepted_tokens: int
    accepted_per_position: tuple[int, ...]  # accepted tokens at draft position 0, 1, …

    def minus(self, before: "SpecCounters") -> "SpecCounters":
        """What happened between `before` and this reading (a position new since `before` starts at 0)."""
        width = max(len(self.accepted_per_position), len(before.accepted_per_position))
        now = self.accepted_per_position + (0,) * (width - len(self.accepted_per_position))
        then = before.accepted_per_position + (0,) * (width - len(before.accepted_per_position))
        per_position = tuple(a - b for a, b in zip(now, then))
        while per_position and per_position[-1] == 0:
            per_position = per_position[:-1]
        return SpecCounters(self.drafts - before.drafts, self.draft_tokens - before.draft_tokens,
                            self.accepted_tokens - before.accepted_tokens, per_position)


def _total(samples: list[Sample], name: str) -> float | None:
    """The sum of a counter over its label sets (vLLM labels by model and engine), or None if absent.
    Both `name` and `name_total` are accepted."""
    values = [s.value for s in samples if s.name in (name, name + "_total")]
    return sum(values) if values else None


def counters_from_metrics(text: str, prefix: str) -> SpecCounters | None:
    """The spec-decode counters of a /metrics text for `prefix` (`llamacpp`, `vllm`), or None when the
    server exposes none (no speculation configured, or another server)."""
    samples = parse_prometheus(text)
    base = f"{prefix}:spec_decode_num_"
    drafts, draft_tokens, accepted = (_total(samples, base + what) for what in ("drafts", "draft_tokens",
                                                                                 "accepted_tokens"))
    if drafts is None and draft_tokens is None and accepted is None:
        return None
    per_position: dict[int, float] = {}
    for sample in samples:
        if sample.name not in (base + "accepted_tokens_per_pos", base + "accepted_tokens_per_pos_total"):
            continue
        position = sample.label("position")
        if position is not None and position.isdigit():
            per_position[int(position)] = per_position.get(int(position), 0.0) + sample.value
    width = max(per_position) + 1 if per_position else 0
    return SpecCounters(int(drafts or 0), int(draft_tokens or 0), int(accepted or 0),
                        tuple(int(per_position.get(i, 0)) for i in range(width)))


def metric_prefixes(text: str) -> set[str]:
    """The `prefix:` namespaces of a /metrics text's samples (what kind of server wrote it)."""
    return {s.name.split(":", 1)[0] for s in parse_prometheus(text) if ":" in s.name}


def counters_from_timings(timings: dict | None) -> tuple[int, int] | None:
    """(draft tokens, accepted) from a llama-server response's `timings` (present when it drafted)."""
    if not isinstance(timings, dict) or "draft_n" not in timings:
        return None
    try:
        return int(timings["draft_n"]), int(timings.get("draft_n_accepted", 0))
    except (TypeError, ValueError):
        return None


def speed_from_timings(timings: dict | None) -> tuple[float | None, float | None]:
    """(prompt seconds, decode tok/s) as the server timed them (llama-server `timings`), None where absent."""
    if not isinstance(timings, dict):
        return None, None
    prompt_ms, per_second = timings.get("prompt_ms"), timings.get("predicted_per_second")
    return (prompt_ms / 1000.0 if isinstance(prompt_ms, (int, float)) else None,
            float(per_second) if isinstance(per_second, (int, float)) else None)


_PROPS_KEYS = ("speculative.types", "speculative.n_max", "speculative.n_min", "speculative.p_min",
               "speculative.ngram_size_n", "speculative.ngram_size_m")


def spec_settings_from_props(props: dict | None, slots=None) -> tuple[tuple[str, str], ...]:
    """The speculation settings llama-server reports, as (name, value) pairs in words; () when it reports
    none. /props' default_generation_settings.params names the types, but this llama.cpp version writes
    `speculative.types = none` there even when the server was started with --spec-type; its /slots says
    per slot whether it speculates (`speculative`), so that answer wins over a "none" it contradicts."""
    settings = props.get("default_generation_settings") if isinstance(props, dict) else None
    params = settings.get("params") if isinstance(settings, dict) else None
    pairs = [(key, str(params[key])) for key in _PROPS_KEYS if key in params] if isinstance(params, dict) else []
    speculating = slots_speculate(slots)
    if speculating is None:
        return tuple(pairs)
    pairs = [(key, value) for key, value in pairs if not (key == "speculative.types" and value == "none"
                                                          and speculating)]
    return (("speculative", "on" if speculating else "off"), *pairs)


def slots_speculate(slots) -> bool | None:
    """Whether llama-server's /slots say a slot speculates; None when the answer is not a slot list."""
    if not isinstance(slots, list) or not slots or not all(isinstance(s, dict) for s in slots):
        return None
    flags = [s.get("speculative") for s in slots]
    return any(flags) if all(isinstance(f, bool) for f in flags) else None
