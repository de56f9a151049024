"""`specscope drafter train`: the terminal front of engine/training/train.py (a rich progress bar on stderr, held-out
acceptance by draft position printed at every evaluation, Ctrl+C keeping a checkpoint that the same command
resumes). engine/cli/main.py registers the sub-command; touches the terminal and, through train_drafter, the out
folder. No Qt.
"""

from __future__ import annotations

import argparse
import shlex
import threading
from pathlib import Path

from engine.core.validation import check_train_minutes, parse_int


def add_drafter_args(sub, parser_class) -> None:
    """`drafter train` and its options."""
    drafter = sub.add_parser("drafter", help="train a drafter for your own model on this machine")
    dsub = drafter.add_subparsers(dest="drafter_command", required=True, parser_class=parser_class)
    train = dsub.add_parser("train", help="train an EAGLE head on the target's own replies (method eagle)")
    train.add_argument("--model", default="default", help="the target (default: the built-in model)")
    train.add_argument("--minutes", type=float, default=None,
                       help="the whole run, data generation included (default 20)")
    train.add_argument("--prompts", action="append", default=[], metavar="FILE",
                       help="more training prompts: presets, Spec-Bench or {\"prompt\": …} lines (repeatable)")
    train.add_argument("--from-history", action="store_true", help="also train on the prompts of your chats")
    train.add_argument("--out", default=None, metavar="DIR",
                       help="the head folder (default: the model's own, where --method eagle looks)")
    train.add_argument("--draft-vocab", type=parse_int, default=8192,
                       help="draft vocabulary: the most frequent tokens the head drafts from (default 8192)")
    train.add_argument("--device", default="auto", help="auto, cpu, cuda, mps")
    train.add_argument("--dtype", default=None,
                       help="the target's dtype: float32, bf16, fp16 (default: the device's, bf16 where the CPU "
                            "computes it); the head keeps float32 weights and trains under autocast in bf16 or "
                            "fp16 (with a GradScaler)")


def _options(args):
    from engine.drafters.eagle import TRAIN_MINUTES
    from engine.core.errors import ConfigError
    from engine.training.train import TrainOptions
    minutes = check_train_minutes(TRAIN_MINUTES if args.minutes is None else args.minutes, "--minutes")
    if not 16 <= args.draft_vocab <= 1_000_000:
        raise ConfigError(f"--draft-vocab must be from 16 to 1000000, got {args.draft_vocab}")
    return TrainOptions(model=args.model, out=Path(args.out).expanduser() if args.out else None, minutes=minutes,
                        prompt_files=tuple(args.prompts), from_history=args.from_history,
                        draft_vocab=args.draft_vocab, device=args.device, dtype=args.dtype)


def acceptance_words(acceptance) -> str:
    return "  ".join(f"pos {i}: {a:.0%}" for i, a in enumerate(acceptance, 1)) or "not measured yet"


def run(args: argparse.Namespace) -> int:
    """Train; 0 when the head is written, 130 on Ctrl+C (the checkpoint is kept: run the same command again)."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    from engine.training.train import train
    options, console, cancel = _options(args), Console(stderr=True), threading.Event()
    shown = {"acceptance": ()}
    bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                   TimeElapsedColumn(), console=console, transient=False)

    def report(progress) -> None:
        bar.update(task, completed=progress.fraction * 100, description=f"{progress.phase}: {progress.message}"[:70])
        if progress.acceptance and progress.acceptance != shown["acceptance"]:
            shown["acceptance"] = progress.acceptance
            console.print(f"step {progress.step}  loss {progress.loss:.3f}  held-out acceptance  "
                          f"{acceptance_words(progress.acceptance)}")
    with bar:
        task = bar.add_task("starting", total=100)
        try:
            out, card = train(options, report, cancel)
        except KeyboardInterrupt:
            cancel.set()
            console.print("interrupted: the replies, features and checkpoint are kept; run the same command to "
                          "resume")
            return 130
    print(f"head written to {out}: {card.info['steps']} steps on {card.info['data']['tokens']} tokens, held-out "
          f"acceptance {acceptance_words(card.info['held_out_acceptance'])}")
    print(f"use it: {shlex.join(['specscope', *use_command(options.model, out)])}")
    return 0


def use_command(model: str, head: Path, prompt: str = "Your prompt here") -> list[str]:
    """The `specscope` arguments that speculate with a trained head (what `drafter train` prints as the next
    step; "auto" runs the model where the head's method runs)."""
    import engine.drafters  # noqa: F401  (registers the methods)
    from engine.core.methods import head_method
    return ["generate", "--model", model, "--method", head_method(), "--draft", str(head), prompt]

