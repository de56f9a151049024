"""`specscope gui --demo`: a tour of the visualiser with no model, replaying a recorded event stream.

assets/demo_stream.jsonl holds real greedy generations of the built-in model (one per setting: plain
decoding, prompt lookup at k = 1…8, early exit), recorded with
`python -m gui.demo_engine --record assets/demo_stream.jsonl`: a header line, then each generation's events
as `engine.core.events.event_to_dict` writes them (the `specscope generate --json` lines). `DemoEngine` answers
`generate()` like the real engine, with the recorded generation of the setting asked for (its SPEC label),
at its recorded pace: its rounds, its probabilities and its timings are the model's own. What it cannot
replay it refuses, in words: a setting it has no recording of. It ignores the prompt (the header says which
one was recorded) and the sampling settings (the recordings are greedy).

May touch: engine events, stats and config (read), gui.resources (the asset), gui.persistence.recorder (stats from a
dict); and, only to record, engine.runtime (loads the real model). No Qt.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator

from engine.core.config import SamplingConfig, SpecConfig, parse_spec
from engine.core.errors import ConfigError
from engine.core.events import (GenerationFinished, GenerationStarted, RoundDetail, RoundsRevised, RoundVerified,
                                TokenStatus, event_to_dict)
from engine.core.stats import StatsAccumulator
from gui.persistence.recorder import stats_from_dict

RECORDING = "demo_stream.jsonl"
RECORDED_SPECS = ("none", *(f"prompt-lookup:k={k}" for k in range(1, 9)), "early-exit:k=4", "early-exit:k=4,layers=26")
RECORDED_PROMPT = ("Here is a list of the days of the week: Monday, Tuesday, Wednesday, Thursday, Friday, Saturday, "
                   "Sunday.\nWrite the list again, one day per line with its number, then write a short poem about "
                   "each day.")


@dataclass(frozen=True, slots=True)
class DemoTarget:
    """What the window reads of a loaded model (gui.worker.model_info)."""

    label: str
    device: str
    dtype: str
    n_layers: int | None
    context_length: int | None
    backend: str = "transformers"  # the backend the recording ran on
    source: None = None  # no model file: a replay runs where it was recorded (engine.backends.LoadedModel.source)

    @property
    def dtype_label(self) -> str:
        return self.dtype


@dataclass(frozen=True, slots=True)
class Recording:
    started: GenerationStarted
    rounds: tuple[RoundVerified, ...]
    finished: GenerationFinished


def _round_from_dict(data: dict) -> RoundVerified:
    """A recorded round; a field the recording predates (rollback_seconds, detail) takes its default."""
    fields = {name: data[name] for name in RoundVerified.__slots__ if name in data}
    fields["target_status"] = TokenStatus(fields["target_status"])
    for name, value in fields.items():
        if isinstance(value, list):
            fields[name] = tuple(value)
    fields["detail"] = RoundDetail.from_dict(data.get("detail"))
    return RoundVerified(**fields)


def _event_from_dict(data: dict):
    kind = data["type"]
    if kind == "round":
        return _round_from_dict(data)
    if kind == "revised":  # a server's reply re-told as its own steps (engine.core.events.RoundsRevised)
        return RoundsRevised(tuple(_round_from_dict(r) for r in data["rounds"]), str(data.get("note", "")))
    if kind == "started":
        fields = {name: data[name] for name in GenerationStarted.__slots__ if name in data}
        fields["warnings"] = tuple(fields.get("warnings", ()))
        return GenerationStarted(**fields)
    if kind == "finished":
        return GenerationFinished(stop_reason=data["stop_reason"], text=data["text"],
                                  output_ids=tuple(data["output_ids"]), stats=stats_from_dict(data["stats"]),
                                  error=data.get("error"), backend=data.get("backend", ""),
                                  device=data.get("device", ""))
    raise ValueError(f"unknown event type {kind!r}")


def load_recording(path: str | Path) -> tuple[dict, dict[str, Recording]]:
    """The header and the recorded generations by SPEC label (raises ConfigError for a missing or broken
    file)."""
    try:
        lines = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
        header, events = lines[0], [_event_from_dict(line) for line in lines[1:]]
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise ConfigError(f"the demo recording {path} cannot be read ({exc})") from exc
    recordings: dict[str, Recording] = {}
    started, rounds = None, []
    for event in events:
        if isinstance(event, GenerationStarted):
            started, rounds = event, []
        elif isinstance(event, RoundVerified):
            rounds.append(event)
        elif isinstance(event, RoundsRevised):  # the replay shows the reply as it was revised
            rounds = list(event.rounds)
        elif started is not None:
            recordings.setdefault(started.spec_label, Recording(started, tuple(rounds), event))
    return header, recordings


class DemoEngine:
    """Replays recorded generations through the engine's `generate()` signature. `pace`: 1 is the recorded
    speed, 2 twice as fast."""

    def __init__(self, path: str | Path | None = None, pace: float = 1.0) -> None:
        if path is None:
            from gui.resources import asset_path

            path = asset_path(RECORDING)
        header, self.recordings = load_recording(path)
        self.pace = pace
        self.prompt = str(header.get("prompt", ""))
        self.target = DemoTarget(label=f"{header.get('model', 'model')} (recorded)",
                                 device=str(header.get("device", "cpu")), dtype=str(header.get("dtype", "")),
                                 n_layers=header.get("n_layers"), context_length=header.get("context_length"),
                                 backend=str(header.get("backend", "transformers")))
        self.on_status = None  # the worker's status line; a replay has no slow step to report

    def validate(self, spec: SpecConfig) -> None:
        if spec.label() not in self.recordings:
            raise ConfigError(f"the demo replays recordings of {', '.join(self.recordings)} only; "
                              f"{spec.label()} needs a real model (start without --demo)")

    def release(self) -> None:
        """The real engine frees its KV caches here; a replay holds none."""

    def generate(self, conversation, *, spec: SpecConfig | None = None, sampling: SamplingConfig = SamplingConfig(),
                 max_new_tokens: int = 256, stop_strings=(), cancel: threading.Event | None = None,
                 system: str | None = None, record: bool = False
                 ) -> Iterator[GenerationStarted | RoundVerified | GenerationFinished]:
        spec = SpecConfig() if spec is None else spec
        self.validate(spec)
        recording = self.recordings[spec.label()]
        yield replace(recording.started, model=self.target.label, max_new_tokens=max_new_tokens)
        accumulator = StatsAccumulator(recording.started.k)
        ids: list[int] = []
        pieces: list[str] = []
        stop_reason = recording.finished.stop_reason
        start = time.perf_counter()
        for event in recording.rounds:
            wait = event.elapsed_seconds / self.pace - (time.perf_counter() - start)
            if cancel is not None and (cancel.wait(wait) if wait > 0 else cancel.is_set()):
                stop_reason = "cancelled"
                break
            if wait > 0 and cancel is None:
                time.sleep(wait)
            budget = max_new_tokens - len(ids)
            spent = len(event.committed_ids) >= budget
            if spent:
                event, stop_reason = _cut(event, budget, len(ids)), "max-new-tokens"
            event = replace(event, elapsed_seconds=event.elapsed_seconds / self.pace)
            accumulator.add_round(event)
            ids += event.committed_ids
            pieces += event.committed_pieces
            yield event
            if spent:
                break
        yield GenerationFinished(stop_reason=stop_reason, text="".join(pieces), output_ids=tuple(ids),
                                 stats=accumulator.snapshot())


def demo_loader(name, progress=None, **_options) -> DemoEngine:
    """--demo's loader: whatever model is asked for, the recorded replay answers."""
    return DemoEngine()


def recorded_prompt() -> str:
    """The prompt the --demo recording answers (its replies are the same whatever is typed)."""
    return DemoEngine().prompt


def _cut(event: RoundVerified, budget: int, n_before: int) -> RoundVerified:
    """The round as the engine sends it when the token budget ends inside it."""
    return replace(event, committed_ids=event.committed_ids[:budget], committed_pieces=event.committed_pieces[:budget],
                   n_committed_total=n_before + min(budget, len(event.committed_ids)))


def compact(value, digits: int = 5):
    """Floats rounded to `digits` decimals, recursively: probabilities and seconds keep what a display shows,
    and the recording stays small."""
    if isinstance(value, float):
        return round(value, digits)
    if isinstance(value, list):
        return [compact(v, digits) for v in value]
    if isinstance(value, dict):
        return {k: compact(v, digits) for k, v in value.items()}
    return value


def record(path: str | Path, model: str = "default", specs=RECORDED_SPECS, prompt: str = RECORDED_PROMPT,
           max_new_tokens: int = 120) -> None:
    """Run the real model once per spec (greedy, on transformers: early exit runs there) and write the demo
    recording, each round's tree recorded (the round views have real alternatives to show)."""
    from engine.runtime import load_engine

    engine = load_engine(model, backend="transformers")
    target = engine.target
    header = {"type": "recording", "prompt": prompt, "model": target.label,
              "device": str(target.device), "dtype": str(target.dtype).replace("torch.", ""),
              "n_layers": target.n_layers, "context_length": target.context_length,
              "recorded": time.strftime("%Y-%m-%d")}
    lines = [json.dumps(header, ensure_ascii=False)]
    for text in specs:
        for event in engine.generate([{"role": "user", "content": prompt}], spec=parse_spec(text),
                                     max_new_tokens=max_new_tokens, record=True):
            lines.append(json.dumps(compact(event_to_dict(event)), ensure_ascii=False))
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gui.demo_engine", description="Record the --demo stream.",
                                     allow_abbrev=False)
    parser.add_argument("--record", required=True, metavar="JSONL", help="where to write the recording")
    parser.add_argument("--model", default="default")
    parser.add_argument("--max-new-tokens", type=int, default=120)
    args = parser.parse_args(argv)
    record(args.record, args.model, max_new_tokens=args.max_new_tokens)
    print(f"recorded {len(RECORDED_SPECS)} generations to {args.record}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
