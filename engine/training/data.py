"""The training data of `specscope drafter train`: the prompts, and the target's own replies to them.

Prompts: the presets, the Spec-Bench questions minus every tenth (held out, never trained on), --prompts files
and, with --from-history, the user's own chat messages (read-only, straight from the history database).
Replies: greedy and sampled (temperature 0.8), then more sampled rounds with new seeds while the time budget
lasts. They are written by the target itself on transformers, many prompts per batch (left-padded, grouped by
length), which writes several times more tokens a second than one sequence at a time (README has the figures
measured on our CPU; on a GPU batching is what makes it fast at all). Every reply is appended to
OUT/replies.jsonl as its batch ends, so a cancelled or crashed run resumes where it stopped.
Touches the out folder and the history database (read-only). No Qt.
"""

from __future__ import annotations

import json
import random
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from engine.core.errors import ConfigError
from engine.host import history_path
from engine.measure.prompts import Prompt, load_prompts

REPLIES_FILE = "replies.jsonl"
HELD_OUT_EVERY = 10  # every 10th Spec-Bench question is held out (never trained on)
REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLED_TEMPERATURE = 0.8


@dataclass(frozen=True)
class Job:
    """One reply to write: the prompt, its mode ("greedy", "sampled", "sampled-2", …) and whether it is held out."""

    prompt: Prompt
    mode: str
    held_out: bool


# ---------------------------------------------------------------- prompts

def history_prompts(db_path: Path | None = None) -> list[Prompt]:
    """The user's own messages from the chat history (read-only, straight from SQLite: the engine never imports
    gui). The database is engine.host.history_path(), the GUI's chat history, unless `db_path` is given."""
    if db_path is None:
        db_path = history_path()
    if not db_path.is_file():
        raise ConfigError(f"--from-history: no chat history at {db_path} yet")
    try:
        with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True) as conn:
            rows = conn.execute("SELECT id, content FROM messages WHERE role = 'user' ORDER BY id").fetchall()
    except sqlite3.Error as exc:
        raise ConfigError(f"--from-history: {db_path} could not be read ({exc})") from None
    return [Prompt(f"history-{i}", "history", text) for i, text in rows if isinstance(text, str) and text.strip()]


def training_prompts(prompt_files: tuple[str, ...] = (), from_history: bool = False, builtin: bool = True,
                     held_out_prompts: int = 16) -> tuple[list[Prompt], list[Prompt]]:
    """(training prompts, held-out prompts): the presets, Spec-Bench (every HELD_OUT_EVERY-th question held
    out), --prompts files and the history; held-out ones are never trained on."""
    train, held_out = [], []
    presets = REPO_ROOT / "assets" / "presets.json"
    if presets.is_file() and builtin:
        train += load_prompts(presets)
    spec_bench = REPO_ROOT.parent / "shared" / "benchmarks" / "spec_bench_questions.jsonl"
    if spec_bench.is_file() and builtin:
        for number, prompt in enumerate(load_prompts(spec_bench)):
            (held_out if number % HELD_OUT_EVERY == 0 else train).append(prompt)
    for path in prompt_files:
        train += load_prompts(path)
    if from_history:
        train += history_prompts()
    if not train:
        raise ConfigError("no training prompts: give --prompts FILE (presets, Spec-Bench or {\"prompt\": …} lines)")
    if not held_out:  # no Spec-Bench file here: hold out a tenth of what there is
        held_out, train = train[::HELD_OUT_EVERY], [p for i, p in enumerate(train) if i % HELD_OUT_EVERY]
    random.Random(0).shuffle(train)
    return train, held_out[:held_out_prompts]


def reply_jobs(train: list[Prompt], held_out: list[Prompt], rounds: int = 4) -> list[Job]:
    """The replies in the order they are written: two held-out prompts first, then each training prompt greedy
    and sampled with a held-out one after every eight (so that a short run has both), then `rounds` − 2 more
    sampled replies of every training prompt with new seeds (for a budget that outlasts the prompts)."""
    jobs = [Job(p, m, False) for p in train for m in ("greedy", "sampled")]
    pending = [Job(p, "greedy", True) for p in held_out]
    ordered = pending[:2]
    for number, job in enumerate(jobs):
        ordered.append(job)
        if number % 8 == 7 and len(pending) > 2 + (number // 8):
            ordered.append(pending[2 + number // 8])
    ordered += pending[2 + len(jobs) // 8:]
    for extra in range(2, rounds):
        ordered += [Job(p, f"sampled-{extra}", False) for p in train]
    return ordered


# ---------------------------------------------------------------- replies

def read_replies(out: Path) -> list[dict]:
    """The replies written so far (a line cut by a crash is dropped)."""
    path = out / REPLIES_FILE
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


class _Deadline:
    """A transformers stopping criterion: every row stops once `stop()` is true (the budget or cancel)."""

    def __init__(self, stop: Callable[[], bool]) -> None:
        self.stop = stop

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        return torch.full((input_ids.shape[0],), self.stop(), dtype=torch.bool, device=input_ids.device)


@torch.inference_mode()
def generate_batch(model, prompts: list[list[int]], mode: str, *, max_new_tokens: int, eos_ids, seed: int,
                   stop: Callable[[], bool]) -> list[list[int]]:
    """The target's replies to several prompts at once (left-padded): greedy, or sampled at temperature 0.8 with
    `seed`; each reply ends at its first end-of-sequence id (kept) or after `max_new_tokens`."""
    from transformers import GenerationConfig, StoppingCriteriaList
    eos = sorted(int(i) for i in eos_ids)
    pad = eos[0] if eos else 0
    width = max(len(p) for p in prompts)
    device = next(model.parameters()).device
    input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
    sampled = mode != "greedy"
    config = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=sampled, pad_token_id=pad,
                              eos_token_id=eos or None, **({"temperature": SAMPLED_TEMPERATURE, "top_k": 0,
                                                            "top_p": 1.0} if sampled else {}))
    torch.manual_seed(seed)
    out = model.generate(input_ids=input_ids, attention_mask=mask, generation_config=config,
                         stopping_criteria=StoppingCriteriaList([_Deadline(stop)]))
    replies = []
    for row in out[:, width:].tolist():
        cut = next((i + 1 for i, token in enumerate(row) if token in eos_ids), len(row))
        replies.append(row[:cut])
    return replies


def _batches(jobs: list[tuple[Job, list[int]]], size: int) -> list[list[tuple[Job, list[int]]]]:
    """Jobs in groups of `size` with one mode each, taken in order four groups' worth at a time and sorted by
    prompt length within that stretch (little padding, and the order of what is written first is kept)."""
    out = []
    for start in range(0, len(jobs), 4 * size):
        stretch = jobs[start:start + 4 * size]
        for mode in dict.fromkeys(job.mode for job, _ in stretch):
            same = sorted((j for j in stretch if j[0].mode == mode), key=lambda j: len(j[1]))
            out += [same[i:i + size] for i in range(0, len(same), size)]
    return out


def pending_jobs(engine, jobs: list[Job], done: set, max_new_tokens: int, limit: int) -> list[tuple[Job, list[int]]]:
    """The jobs not written yet with their prompt ids (each prompt tokenized once, however many replies it
    gets); prompts too long to leave room for a reply are skipped."""
    out, tokenized = [], {}
    for job in jobs:
        if (job.prompt.id, job.mode) in done:
            continue
        if job.prompt.text not in tokenized:
            tokenized[job.prompt.text] = engine.prompt_ids([{"role": "user", "content": job.prompt.text}])
        ids = tokenized[job.prompt.text]
        if len(ids) + max_new_tokens <= limit:
            out.append((job, ids))
    return out


def write_replies(target, jobs: list[Job], out: Path, *, max_new_tokens: int, batch: int, seed: int,
                  until: float, say: Callable[[float, str], None], cancel: threading.Event) -> list[dict]:
    """Append the target's replies to OUT/replies.jsonl until `until` (monotonic time), cancel, or every job is
    written; resumable (what is in the file is not written again). `say(fraction, message)` hears progress."""
    from engine.runtime import local_engine
    records = read_replies(out)
    engine, started, before = local_engine(target), time.monotonic(), len(records)
    limit = min(target.context_length, 1024)
    todo = pending_jobs(engine, jobs, {(r["prompt"], r["mode"]) for r in records}, max_new_tokens, limit)

    def stop() -> bool:
        return cancel.is_set() or time.monotonic() >= until
    with open(out / REPLIES_FILE, "a", encoding="utf-8") as file:
        for number, group in enumerate(_batches(todo, batch)):
            if stop():
                break
            replies = generate_batch(target.model, [ids for _, ids in group], group[0][0].mode,
                                     max_new_tokens=max_new_tokens, eos_ids=target.eos_ids,
                                     seed=seed + len(records) + number, stop=stop)
            for (job, ids), reply in zip(group, replies):
                if not reply:
                    continue
                record = {"prompt": job.prompt.id, "mode": job.mode, "held_out": job.held_out,
                          "ids": ids + reply, "prompt_length": len(ids)}
                file.write(json.dumps(record) + "\n")
                records.append(record)
            file.flush()
            tokens = sum(len(r["ids"]) - r["prompt_length"] for r in records)
            rate = sum(len(r["ids"]) - r["prompt_length"] for r in records[before:]) / max(
                1e-9, time.monotonic() - started)
            say(min(1.0, (time.monotonic() - started) / max(1e-9, until - started)),
                f"{len(records)} replies ({tokens} tokens, {rate:.0f} tok/s) written by {target.label}")
    return records
