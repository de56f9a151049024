"""`specscope drafter train`: an EAGLE head for a target, self-distilled on the target's own replies.

1. Data (engine/training/data.py): the target's greedy and sampled replies to prompts (the presets, Spec-Bench
   questions minus a held-out tenth, --prompts files, the user's chats with --from-history), written by the
   target itself, many prompts per batch, appended to OUT/replies.jsonl as they come.
2. Features: the transformers target's last hidden states, logsumexp and argmax at every position of every
   reply, from teacher-forced passes (OUT/features.safetensors).
3. Training (engine/training/step.py) until the time budget is spent, with held-out acceptance by draft
   position measured as it goes; OUT/checkpoint.* is written at every evaluation and on cancel, and the same
   command resumes from it. The head and its card (engine/drafters/eagle_head.py) are written at the end.

`train(options, report, cancel)` is the one entry point (the CLI and a GUI dialog drive it); `report` hears
TrainProgress values. Touches the out folder, the history database (read-only) and loads models through
engine.models.load. No Qt.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import torch

from engine.drafters.eagle_head import (EagleHead, HeadCard, decoder_parts, default_head_dir, readout_weight, save_head,
                               target_fingerprint)
from engine.training.step import Batch, acceptance_by_position, loss_and_hits
from engine.training.data import reply_jobs, training_prompts, write_replies
from engine.core.errors import ConfigError

FEATURES_FILE = "features.safetensors"
CHECKPOINT_FILE = "checkpoint.safetensors"
STATE_FILE = "checkpoint.json"


@dataclass(frozen=True)
class TrainOptions:
    model: str = "default"
    out: Path | None = None  # default: the target's head folder (where `eagle` looks)
    minutes: float = 20.0  # the whole run, data generation included
    prompt_files: tuple[str, ...] = ()
    from_history: bool = False
    builtin_prompts: bool = True  # the presets and the Spec-Bench questions (when the file is there)
    held_out_prompts: int = 16
    draft_vocab: int = 8192  # the most frequent target tokens the head drafts from (≤ the vocabulary)
    steps_unrolled: int = 3  # draft steps trained as drafted (training-time test)
    first_position_share: float = 0.6  # this share of the training time trains the first draft position only
    regression: float = 0.1  # weight of EAGLE-1's feature regression
    max_new_tokens: int = 192
    window: int = 256
    batch: int = 6
    learning_rate: float = 1e-3
    data_share: float = 0.45  # at most this share of the budget writes replies
    reply_batch: int = 16  # prompts the target answers at once while writing the replies
    seed: int = 0
    device: str = "auto"
    dtype: str | None = None  # None: engine.models.sources' default for the device (bf16 where the CPU has it)


@dataclass(frozen=True)
class TrainProgress:
    """One line of news: the phase, how far it is (0…1 of the budget), and the training figures so far."""

    phase: str  # "replies", "features", "training", "done", "cancelled"
    fraction: float
    message: str
    step: int = 0
    loss: float | None = None
    acceptance: tuple[float, ...] = ()  # held-out greedy acceptance at draft positions 1…3 (engine.core.stats' definition)
    out: str = ""  # the head folder, once the target is loaded


Report = Callable[[TrainProgress], None]


# ---------------------------------------------------------------- 2. features

@torch.inference_mode()
def _features_of(model, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Teacher-forced pass: last (post-norm) hidden states (n, H), logsumexp (n,) and argmax (n,) of the logits."""
    base = getattr(model, getattr(model, "base_model_prefix", "model"))
    device = next(model.parameters()).device
    hidden = base(input_ids=torch.tensor([ids], device=device)).last_hidden_state[0]
    logits = model.get_output_embeddings()(hidden).float()
    return hidden.cpu(), torch.logsumexp(logits, -1).cpu(), logits.argmax(-1).cpu()


def extract_features(target, records: list[dict], out: Path, report: Report,
                     cancel: threading.Event) -> dict[str, torch.Tensor]:
    """Every record's features (reused from OUT/features.safetensors when it covers the same records)."""
    from safetensors.torch import load_file, save_file
    path = out / FEATURES_FILE
    if path.is_file():
        data = load_file(str(path))
        if int(data["n_records"]) == len(records):
            return data
    parts: dict[str, list[torch.Tensor]] = {k: [] for k in ("features", "lse", "top", "ids", "sequence", "scored",
                                                            "held_out")}
    for number, record in enumerate(records):
        if cancel.is_set():
            raise KeyboardInterrupt
        features, lse, top = _features_of(target.model, record["ids"])
        n = len(record["ids"])
        parts["features"].append(features)
        parts["lse"].append(lse)
        parts["top"].append(top)
        parts["ids"].append(torch.tensor(record["ids"]))
        parts["sequence"].append(torch.full((n,), number))
        parts["scored"].append(torch.arange(n) >= record["prompt_length"] - 1)
        parts["held_out"].append(torch.full((n,), bool(record["held_out"])))
        report(TrainProgress("features", (number + 1) / len(records),
                             f"features of reply {number + 1}/{len(records)}"))
    data = {key: torch.cat(values) for key, values in parts.items()}
    data["n_records"] = torch.tensor(len(records))
    save_file(data, str(path))
    return data


# ---------------------------------------------------------------- where and how the head trains

@dataclass(frozen=True)
class Placement:
    """Where the head trains and in what precision: on the target's device (beside the embedding and the output
    head it reads), its own weights float32 (the optimizer's master copy), its forward under autocast in the
    target's dtype (bf16, or fp16 with a GradScaler against gradients that underflow). `compute` float32: no
    autocast, and the features and readout are cast to float32 (a float32 target, or where the device has no
    autocast or GradScaler for the target's dtype)."""

    device: torch.device
    compute: torch.dtype

    @property
    def scaled(self) -> bool:
        return self.compute == torch.float16

    def autocast(self):
        if self.compute == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.compute)

    def scaler(self) -> torch.amp.GradScaler:
        return torch.amp.GradScaler(self.device.type, enabled=self.scaled)

    def features_dtype(self) -> torch.dtype | None:
        """What the features are cast to on the device (None: left in the target's dtype, autocast reads them)."""
        return torch.float32 if self.compute == torch.float32 else None

    def readout(self, output_head: torch.nn.Module, draft_vocab: torch.Tensor) -> torch.Tensor:
        weight = readout_weight(output_head, draft_vocab)
        return weight.float() if self.compute == torch.float32 else weight

    def words(self) -> str:
        mixed = {torch.bfloat16: ", bf16 autocast", torch.float16: ", fp16 autocast with a GradScaler"}
        return f"{self.device} (float32 weights{mixed.get(self.compute, '')})"


def _mixed_precision_works(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether torch has autocast for `dtype` on this device type (and a GradScaler, for fp16)."""
    try:
        if not getattr(torch.amp, "is_autocast_available", lambda _type: True)(device.type):
            return False
        with torch.autocast(device.type, dtype=dtype):
            pass
        return dtype != torch.float16 or torch.amp.GradScaler(device.type).is_enabled()
    except (RuntimeError, ValueError, TypeError, AttributeError):
        return False


def placement(target) -> Placement:
    """The head's Placement for `target`: the device of its embedding and output head (ConfigError when they
    lie on different devices: the head reads both), in the target's dtype where the device has mixed
    precision for it."""
    _, _, embed, output_head = decoder_parts(target.model)
    devices = {embed.weight.device, output_head.weight.device}
    if len(devices) > 1:
        raise ConfigError(f"the EAGLE head reads {target.label}'s token embedding (on {embed.weight.device}) and "
                          f"its output head (on {output_head.weight.device}) and must sit beside both: load the "
                          "target on one device (--device cuda, mps or cpu)")
    device, dtype = output_head.weight.device, output_head.weight.dtype
    if dtype in (torch.bfloat16, torch.float16) and _mixed_precision_works(device, dtype):
        return Placement(device, dtype)
    return Placement(device, torch.float32)


def _probe(target, place: Placement) -> None:
    """One training step of a throwaway head on four positions of random features, as the real steps run
    (autocast, GradScaler, backward, optimizer step); raises what they would raise."""
    _, _, embed, output_head = decoder_parts(target.model)
    vocab = torch.arange(min(16, int(output_head.weight.shape[0])))
    head = EagleHead(target.model, vocab).float().to(place.device)
    hidden, n = int(head.config.hidden_size), 4
    zeros = torch.zeros(1, n, dtype=torch.long)
    batch = Batch(torch.randn(1, n, hidden, dtype=output_head.weight.dtype), torch.zeros(1, n), zeros, zeros,
                  zeros, torch.ones(1, n, dtype=torch.bool)).to(place.device, place.features_dtype())
    optimizer, scaler = torch.optim.SGD(head.parameters(), lr=0.0), place.scaler()
    with place.autocast():
        loss, _hits, _counted = loss_and_hits(head, embed, place.readout(output_head, vocab), batch, 2, 0.1)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    float(loss.detach())  # waits for the device: a failure queued on it is raised here


def checked_placement(target, report: Report) -> Placement:
    """placement(target), tried with one throwaway training step before any reply is written (so that a head
    that can't be placed, or a precision the device can't train in, fails in seconds, not after the replies
    and features took their share of the budget). Mixed precision that fails falls back to float32; ConfigError
    when nothing trains there."""
    place = placement(target)
    if place.device.type == "meta":
        raise ConfigError(f"{target.label}'s output head has no weights in memory (device meta: offloaded); the "
                          "EAGLE head trains beside it: load the target wholly on one device")
    tried = [place] + ([Placement(place.device, torch.float32)] if place.compute != torch.float32 else [])
    for number, candidate in enumerate(tried):
        try:
            _probe(target, candidate)
        except (RuntimeError, NotImplementedError, ValueError) as exc:
            reason = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
            if number + 1 < len(tried):
                report(TrainProgress("loading", 0.0, f"{candidate.words()} fails here ({reason}): float32"))
                continue
            raise ConfigError(f"the EAGLE head can't train beside {target.label} on {candidate.words()}: "
                              f"{reason}") from None
        return candidate
    raise AssertionError("unreachable")


# ---------------------------------------------------------------- 3. training

def choose_draft_vocab(data: dict[str, torch.Tensor], size: int, vocab_size: int) -> torch.Tensor:
    """The `size` ids the target writes or predicts most often in the training data (EAGLE-3's draft
    vocabulary), sorted; the whole vocabulary when `size` ≥ it."""
    if size >= vocab_size:
        return torch.arange(vocab_size)
    train = ~data["held_out"]
    counts = torch.bincount(torch.cat([data["top"][train], data["ids"][train]]), minlength=vocab_size)
    return torch.sort(torch.topk(counts[:vocab_size], size).indices).values


def _stream(data: dict[str, torch.Tensor], held_out: bool) -> dict[str, torch.Tensor]:
    keep = data["held_out"] == held_out
    return {key: data[key][keep] for key in ("features", "lse", "top", "ids", "sequence", "scored")}


def _batch(stream: dict[str, torch.Tensor], starts: list[int], window: int, place: Placement | None = None) -> Batch:
    """Windows of the stream (kept on the CPU) stacked into a Batch, moved to `place`'s device (None: left)."""
    def cut(key):
        return torch.stack([stream[key][s:s + window] for s in starts])
    batch = Batch(cut("features"), cut("lse"), cut("top"), cut("ids"), cut("sequence"), cut("scored"))
    return batch if place is None else batch.to(place.device, place.features_dtype())


def random_batch(stream: dict[str, torch.Tensor], options: TrainOptions, rng: random.Random,
                 place: Placement | None = None) -> Batch:
    window = min(options.window, len(stream["ids"]))
    return _batch(stream, [rng.randrange(len(stream["ids"]) - window + 1) for _ in range(options.batch)], window,
                  place)


def held_out_acceptance(head, embed, readout, stream, options: TrainOptions, steps: int,
                        place: Placement | None = None) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Greedy acceptance at draft positions 1…steps on the held-out replies, the head unrolled as it drafts:
    (engine.core.stats' per-position acceptance: accepted at a position / drafts, what the stats panel shows when the
    head drafts k ≥ steps; the conditional one: accepted at a position / drafts that reached it)."""
    n, window = len(stream["ids"]), options.window
    totals = [[0, 0] for _ in range(steps)]
    place = place or Placement(readout.device, readout.dtype if readout.dtype in (torch.bfloat16, torch.float16)
                               else torch.float32)
    with torch.no_grad(), place.autocast():
        for start in range(0, max(1, n - 1), window):
            batch = _batch(stream, [start], min(window, n - start), place)
            _loss, hits, counted = loss_and_hits(head, embed, readout, batch, steps)
            for total, (accepted, drafted) in zip(totals, acceptance_by_position(hits, counted)):
                total[0] += accepted
                total[1] += drafted
    drafts = totals[0][1]
    return (tuple(a / drafts if drafts else 0.0 for a, _ in totals),
            tuple(a / d if d else 0.0 for a, d in totals))


def save_checkpoint(out: Path, head: EagleHead, optimizer: torch.optim.Optimizer, state: dict) -> None:
    """The head, the optimizer's moments and the loop's state, so that the same command resumes (no pickle);
    the tensors are written from the CPU, whatever device the head trains on."""
    from safetensors.torch import save_file
    tensors = {f"head.{k}": v.cpu() for k, v in head.trainable_state().items()}
    names = {id(p): n for n, p in head.named_parameters()}
    for group in optimizer.param_groups:
        for param in group["params"]:
            for key, value in optimizer.state.get(param, {}).items():
                tensors[f"adam.{names[id(param)]}.{key}"] = torch.as_tensor(value).detach().cpu().clone().contiguous()
    save_file(tensors, str(out / (CHECKPOINT_FILE + ".partial")))
    os.replace(out / (CHECKPOINT_FILE + ".partial"), out / CHECKPOINT_FILE)
    (out / STATE_FILE).write_text(json.dumps(state, indent=2), encoding="utf-8")


def load_checkpoint(out: Path, head: EagleHead, optimizer: torch.optim.Optimizer) -> dict | None:
    """Restore a checkpoint written by save_checkpoint for the same target and draft vocabulary, else None.
    Read on the CPU and placed as the optimizer keeps its state: the moments on their parameter's device and in
    its dtype, `step` a float32 on the CPU (AdamW's own place for it, neither capturable nor fused)."""
    from safetensors.torch import load_file
    if not (out / CHECKPOINT_FILE).is_file() or not (out / STATE_FILE).is_file():
        return None
    tensors = load_file(str(out / CHECKPOINT_FILE), device="cpu")
    state = json.loads((out / STATE_FILE).read_text(encoding="utf-8"))
    head_state = {k[5:]: v for k, v in tensors.items() if k.startswith("head.")}
    if not torch.equal(head_state.get("draft_vocab", torch.zeros(0)), head.draft_vocab.cpu()):
        return None
    head.load_state_dict(head_state, strict=False)  # copied into the head's parameters, wherever they are
    for name, param in head.named_parameters():
        moments = {key: tensors[f"adam.{name}.{key}"] for key in ("step", "exp_avg", "exp_avg_sq")
                   if f"adam.{name}.{key}" in tensors}
        if moments:
            optimizer.state[param] = {key: value.float() if key == "step" else value.to(param.device, param.dtype)
                                      for key, value in moments.items()}
    return state


@dataclass
class _Loop:
    """The training loop's state, written with every checkpoint."""

    step: int = 0
    tokens_seen: int = 0
    seconds: float = 0.0
    loss: float | None = None
    acceptance: tuple[float, ...] = ()  # held-out, engine.core.stats' definition (accepted at a position / drafts)
    conditional: tuple[float, ...] = ()  # held-out, accepted at a position / drafts that reached it
    history: list = field(default_factory=list)  # [step, seconds, loss, acceptance…] at each evaluation
    scaler: dict = field(default_factory=dict)  # the fp16 GradScaler's state (its scale), {} without one


def _learning_rate(options: TrainOptions, loop: _Loop, remaining: float) -> float:
    """Linear warm-up over 30 steps, then down linearly to a tenth as the budget runs out."""
    warm = min(1.0, (loop.step + 1) / 30)
    fading = max(0.1, remaining / max(1e-9, remaining + loop.seconds))
    return options.learning_rate * warm * fading


def train_head(target, head: EagleHead, data: dict[str, torch.Tensor], options: TrainOptions, out: Path,
               budget: tuple[float, float], report: Report, cancel: threading.Event,
               place: Placement | None = None) -> _Loop:
    """Train until the end of `budget` (monotonic start, end) or cancel; evaluate and checkpoint every ~40 s.
    Resumes from OUT's checkpoint. The head is moved (in place, float32) to `place`'s device (None:
    placement(target)); the data stays on the CPU and each batch is moved there."""
    begun, until = budget
    place = place or placement(target)
    head.float().to(place.device)
    _, _, embed, output_head = decoder_parts(target.model)
    readout = place.readout(output_head, head.draft_vocab)
    optimizer = torch.optim.AdamW(head.parameters(), lr=options.learning_rate, weight_decay=0.0)
    saved = load_checkpoint(out, head, optimizer)
    loop = _Loop(**{**saved, "acceptance": tuple(saved.get("acceptance", ())),
                    "conditional": tuple(saved.get("conditional", ()))}) if saved else _Loop()
    scaler = place.scaler()
    if loop.scaler and scaler.is_enabled():
        scaler.load_state_dict(loop.scaler)
    train, held_out = _stream(data, False), _stream(data, True)
    started, base = time.monotonic(), loop.seconds
    try:
        _steps(head, embed, readout, (optimizer, scaler), (train, held_out), options, out, loop, (begun, until),
               report, cancel, place)
    except KeyboardInterrupt:  # Ctrl+C: keep where it got to, so the same command resumes from here
        loop.seconds, loop.scaler = base + time.monotonic() - started, scaler.state_dict()
        save_checkpoint(out, head, optimizer, loop.__dict__)
        raise
    loop.seconds, loop.scaler = base + time.monotonic() - started, scaler.state_dict()
    save_checkpoint(out, head, optimizer, loop.__dict__)
    return loop


def _unroll(options: TrainOptions, fraction: float) -> int:
    """Draft steps unrolled at this point of the training time: the first position alone (a third of the cost,
    so three times the steps where acceptance is decided first), then all of them."""
    return 1 if fraction < options.first_position_share else options.steps_unrolled


def _steps(head, embed, readout, optimizers, streams, options: TrainOptions, out: Path, loop: _Loop,
           budget: tuple[float, float], report: Report, cancel: threading.Event, place: Placement) -> None:
    """Optimizer steps until the budget's end or cancel; an evaluation and a checkpoint every ~40 s. An fp16
    step's loss is scaled (`scaler`, disabled otherwise); a step whose gradients overflow is skipped by it.
    At least one step and its evaluation run even where writing the replies overran the budget (a busy machine),
    so the head always has held-out figures."""
    (optimizer, scaler), (train, held_out), (begun, until) = optimizers, streams, budget
    rng, started, last_eval, base = random.Random(options.seed + loop.step), time.monotonic(), 0.0, loop.seconds
    steps_eval = max(3, options.steps_unrolled)
    first = loop.step
    while not cancel.is_set() and (time.monotonic() < until or loop.step == first):
        for group in optimizer.param_groups:
            group["lr"] = _learning_rate(options, loop, until - time.monotonic())
        batch = random_batch(train, options, rng, place)
        unroll = _unroll(options, (time.monotonic() - started) / max(1e-9, until - started))
        with place.autocast():
            loss, _hits, _counted = loss_and_hits(head, embed, readout, batch, unroll, options.regression)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        loop.step, loop.tokens_seen = loop.step + 1, loop.tokens_seen + batch.ids.numel()
        loop.loss = float(loss.detach()) if loop.loss is None else 0.9 * loop.loss + 0.1 * float(loss.detach())
        now = time.monotonic()
        if now - last_eval > 40 or now >= until:
            loop.seconds = base + now - started
            loop.acceptance, loop.conditional = held_out_acceptance(head, embed, readout, held_out, options,
                                                                    steps_eval, place)
            loop.history.append([loop.step, round(loop.seconds, 1), round(loop.loss, 4), *loop.acceptance])
            loop.scaler = scaler.state_dict()
            save_checkpoint(out, head, optimizer, loop.__dict__)
            last_eval = time.monotonic()
        fraction = min(1.0, (now - begun) / max(1e-9, until - begun))
        report(TrainProgress("training", fraction, f"step {loop.step}", loop.step, loop.loss, loop.acceptance))


# ---------------------------------------------------------------- the run

def load_target(options: TrainOptions, report: Report):
    """The target on transformers (it writes the replies, batched, and gives the features)."""
    from engine.models.load import load_model
    say = lambda message: report(TrainProgress("loading", 0.0, message))  # noqa: E731
    return load_model(options.model, backend="transformers", device=options.device, dtype=options.dtype,
                      progress=say)


def head_card(target, data: dict[str, torch.Tensor], records: list[dict], loop: _Loop, head: EagleHead,
              options: TrainOptions) -> HeadCard:
    held = [r for r in records if r["held_out"]]
    info = {"data": {"replies": len(records) - len(held), "held_out_replies": len(held),
                     "tokens": int((~data["held_out"]).sum()), "held_out_tokens": int(data["held_out"].sum()),
                     "sources": ["assets/presets.json", "spec_bench_questions.jsonl (9/10)",
                                 *options.prompt_files] + (["history"] if options.from_history else [])},
            "steps": loop.step, "tokens_seen": loop.tokens_seen, "training_seconds": round(loop.seconds, 1),
            "loss": loop.loss, "held_out_acceptance": list(loop.acceptance),
            "held_out_conditional_acceptance": list(loop.conditional),
            "mean_accepted_length_k3": round(1 + sum(loop.acceptance[:3]), 3), "history": loop.history,
            "options": {"draft_vocab": options.draft_vocab, "steps_unrolled": options.steps_unrolled,
                        "regression": options.regression, "window": options.window, "batch": options.batch,
                        "learning_rate": options.learning_rate}}
    return HeadCard(target.label, target_fingerprint(target.model), int(head.config.hidden_size),
                    int(head.draft_vocab.numel()), info)


def _replies(target, options: TrainOptions, out: Path, until: float, report: Report,
             cancel: threading.Event) -> list[dict]:
    """Write (or resume writing) the target's replies until `until`; every record in OUT/replies.jsonl."""
    train_prompts, held_out = training_prompts(options.prompt_files, options.from_history, options.builtin_prompts,
                                               options.held_out_prompts)
    return write_replies(target, reply_jobs(train_prompts, held_out), out, max_new_tokens=options.max_new_tokens,
                         batch=options.reply_batch, seed=options.seed, until=until, cancel=cancel,
                         say=lambda fraction, message: report(TrainProgress("replies", fraction, message)))


def _on_budget(report: Report, budget: tuple[float, float], out: Path) -> Report:
    """`report` with the out folder named and, for replies and features, the fraction of the whole budget spent
    (so that a progress bar never jumps back between phases)."""
    begun, until = budget

    def say(progress: TrainProgress) -> None:
        if progress.phase in ("replies", "features"):
            progress = replace(progress, fraction=min(1.0, (time.monotonic() - begun) / max(1e-9, until - begun)))
        report(replace(progress, out=str(out)))
    return say


def train(options: TrainOptions, report: Report, cancel: threading.Event | None = None) -> tuple[Path, HeadCard]:
    """The whole run (see the module docstring): the head folder and its card. KeyboardInterrupt or `cancel`
    keeps what was done (replies, features, the checkpoint); the same call resumes."""
    cancel = cancel or threading.Event()
    begun = time.monotonic()
    until = begun + options.minutes * 60
    torch.manual_seed(options.seed)
    target = load_target(options, report)
    out = Path(options.out) if options.out else default_head_dir(target_fingerprint(target.model))
    out.mkdir(parents=True, exist_ok=True)
    report = _on_budget(report, (begun, until), out)
    place = checked_placement(target, report)  # before the replies and features spend their share
    report(TrainProgress("loading", 0.0, f"the head trains on {place.words()}"))
    records = _replies(target, options, out, begun + options.minutes * 60 * options.data_share, report, cancel)
    if cancel.is_set():
        raise KeyboardInterrupt  # what was written is kept; the same call resumes
    if not any(r["held_out"] for r in records) or all(r["held_out"] for r in records):
        raise ConfigError("too little time to write both training and held-out replies: give more --minutes")
    data = extract_features(target, records, out, report, cancel)
    vocab = choose_draft_vocab(data, options.draft_vocab, target.vocab_size)
    torch.manual_seed(options.seed)
    head = EagleHead(target.model, vocab).float()
    loop = train_head(target, head, data, options, out, (begun, until), report, cancel, place)
    card = head_card(target, data, records, loop, head, options)
    save_head(out, head.cpu(), card)  # float32, from the CPU: what engine.drafters.eagle_head.load_head reads
    report(TrainProgress("cancelled" if cancel.is_set() else "done", 1.0, f"head written to {out}", loop.step,
                         loop.loss, loop.acceptance))
    return out, card
