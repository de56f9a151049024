"""A benchmark, not a test (run by hand; prints figures): the host syncs a speculative round makes on the
transformers backend, per round and per phase (draft, verify forward, verification decision, rollback, events),
for plain decoding, early exit, a draft model and eagle on a tiny random Llama built in the process, on the eager
runner and on --compile's static cache: uncompiled ("static", every pass eager), and with its compiled widths
standing in for CUDA graphs ("graph": their passes uncounted, see GraphForward), without waiting minutes a width
for torch.compile on a CPU.

A host sync is a call that, on a GPU, waits for the queued kernels before Python goes on: a tensor read on the
host (`.item()`, `.tolist()`, `int()`/`float()`/`bool()` of a tensor, `.numpy()`, `.cpu()`, `.to("cpu")`,
Python indexing with a tensor), an op whose output size depends on values (`torch.nonzero`, masked indexing,
`torch.unique`, …) and a tensor built from a Python list on the device (a copy from pageable memory). On a CPU
every tensor is on the host already, so `SyncCounter` counts the calls themselves: they are the syncs a CUDA
device would make. `--sites` says where each comes from.

    python -m benchmarks.host_syncs [--rounds 16] [--k 3] [--sampled] [--sites] [--device cuda [--cuda]]
                                    [--save FILE] [--before FILE]

`--save` writes the counts as JSON; `--before FILE` (a JSON saved from another checkout) prints before → after.
With `--device cuda --cuda`, torch.cuda.set_sync_debug_mode("warn") also warns at each real sync.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path

import torch

PHASES = ("draft", "verify forward", "decision", "rollback", "events")
PROMPT = "the lazy dog. the lazy dog. the lazy"
_TORCH_DIR = str(Path(torch.__file__).parent)
_THIS_FILE = str(Path(__file__).resolve())


def _to_the_host(tensor, *args, **kwargs) -> bool:
    """`.to("cpu")` as written: a torch.device (`.to(x.device)`) is where the code runs, the host only here."""
    return any(isinstance(a, str) and a.split(":")[0] == "cpu" for a in (*args, kwargs.get("device")))


def _from_host_data(*args, **kwargs) -> bool:
    """torch.tensor(data, device=…) with some data: a copy from the host's pageable memory, on a GPU."""
    data = args[0] if args else kwargs.get("data")
    return kwargs.get("device") is not None and not (isinstance(data, (list, tuple)) and not data)


def _bool_index(index) -> bool:
    """Whether a subscript holds a boolean tensor (masked indexing: its output size needs the mask's count)."""
    parts = index if isinstance(index, tuple) else (index,)
    return any(isinstance(part, torch.Tensor) and part.dtype == torch.bool for part in parts)


class SyncCounter:
    """Counts host syncs by phase while `counting()` is on (see the module's docstring for what counts). The
    phase is the innermost `phase(name)` entered, `events` outside any; a call made inside another counted one
    (torch's own `__format__` calling `item()`) counts once."""

    def __init__(self) -> None:
        self.counts: Counter = Counter()  # phase → syncs
        self.sites: Counter = Counter()  # (phase, kind, where) → syncs
        self._phases: list[str] = []
        self._local = threading.local()

    @property
    def current(self) -> str:
        return self._phases[-1] if self._phases else "events"

    @contextlib.contextmanager
    def phase(self, name: str):
        self._phases.append(name)
        try:
            yield
        finally:
            self._phases.pop()

    def in_phase(self, name: str, function):
        """`function`, run in phase `name`."""
        def wrapped(*args, **kwargs):
            with self.phase(name):
                return function(*args, **kwargs)
        return wrapped

    def total(self) -> int:
        return sum(self.counts.values())

    def reset(self) -> None:
        self.counts.clear()
        self.sites.clear()

    @contextlib.contextmanager
    def paused(self):
        """Nothing counts inside (what a CUDA graph replays)."""
        before, self._local.inside = getattr(self._local, "inside", False), True
        try:
            yield
        finally:
            self._local.inside = before

    def _count(self, kind: str) -> None:
        self.counts[self.current] += 1
        self.sites[(self.current, kind, _site())] += 1

    def _wrap(self, function, kind: str, when=None):
        counter = self

        def wrapped(*args, **kwargs):
            local = counter._local
            if getattr(local, "inside", False) or (when is not None and not when(*args, **kwargs)):
                return function(*args, **kwargs)
            local.inside = True
            try:
                counter._count(kind)
                return function(*args, **kwargs)
            finally:
                local.inside = False
        return wrapped

    @contextlib.contextmanager
    def counting(self):
        """Count while inside: torch's reading methods and value-sized ops wrapped, put back on the way out."""
        masked = lambda self, index, *rest: _bool_index(index)  # noqa: E731
        patches = [(torch.Tensor, name, name, None) for name in
                   ("item", "tolist", "numpy", "cpu", "__bool__", "__int__", "__float__", "__index__",
                    "__array__", "__contains__", "nonzero", "unique")]
        patches += [(torch.Tensor, "to", 'to("cpu")', _to_the_host),
                    (torch.Tensor, "__getitem__", "x[mask]", masked),
                    (torch.Tensor, "__setitem__", "x[mask] =", masked)]
        patches += [(torch, name, f"torch.{name}", None) for name in
                    ("nonzero", "argwhere", "masked_select", "unique", "equal", "allclose", "is_nonzero")]
        patches += [(torch, "tensor", "torch.tensor(list, device)", _from_host_data),
                    (torch, "as_tensor", "torch.as_tensor(list, device)", _from_host_data),
                    (torch.cuda, "synchronize", "torch.cuda.synchronize", None)]
        saved = [(owner, name, owner.__dict__.get(name)) for owner, name, _, _ in patches]  # None: inherited
        try:
            for owner, name, kind, when in patches:
                setattr(owner, name, self._wrap(getattr(owner, name), kind, when))
            yield self
        finally:
            for owner, name, own in saved:
                if own is None:
                    delattr(owner, name)
                else:
                    setattr(owner, name, own)


def _site() -> str:
    """file:line of the innermost caller outside torch and this module."""
    frame = sys._getframe(3)
    while frame is not None and (frame.f_code.co_filename.startswith(_TORCH_DIR)
                                 or frame.f_code.co_filename == _THIS_FILE):
        frame = frame.f_back
    if frame is None:
        return "?"
    path = Path(frame.f_code.co_filename)
    parts = path.parts
    for root in ("engine", "transformers", "benchmarks", "tests"):
        if root in parts:
            path = Path(*parts[len(parts) - 1 - parts[::-1].index(root):])
            break
    return f"{path}:{frame.f_lineno} ({frame.f_code.co_name})"


def watch_engine(engine, counter: SyncCounter) -> None:
    """Put a round's steps in their phases: the drafter's proposal, the target's pass, the rest of the verifying
    step (the decision), the target's rollback and sync, and everything else of the round (commit, stats: events).
    Patches this engine's steps and its target runner only (the innermost phase counts)."""
    runner = engine.runner
    runner.forward = counter.in_phase("verify forward", runner.forward)
    runner.rollback = counter.in_phase("rollback", runner.rollback)
    runner.sync = counter.in_phase("rollback", runner.sync)
    engine._verify = counter.in_phase("decision", engine._verify)
    engine._propose = counter.in_phase("draft", engine._propose)


def count_rounds(engine, prompt_ids: list[int], spec, sampling, rounds: int, counter: SyncCounter
                 ) -> tuple[dict[str, float], Counter, list[int]]:
    """The syncs per round by phase over `rounds` rounds after the prefill (round 0), the sites over all of
    them, and the output ids. The generation is a warm-up first (one run, not counted)."""
    from engine.core.events import RoundVerified
    list(engine.generate_ids(prompt_ids, spec=spec, sampling=sampling, max_new_tokens=rounds))
    engine.release()
    totals: Counter = Counter()
    sites: Counter = Counter()
    counted, output = 0, []
    with counter.counting():
        counter.reset()
        for event in engine.generate_ids(prompt_ids, spec=spec, sampling=sampling, max_new_tokens=rounds * 8):
            if isinstance(event, RoundVerified):
                output.extend(event.committed_ids)
                if event.index > 0 and counted < rounds:
                    totals.update(counter.counts)
                    sites.update(counter.sites)
                    counted += 1
            counter.reset()
            if counted >= rounds:
                break
    return {phase: totals[phase] / max(counted, 1) for phase in PHASES}, sites, output


def tiny_models(folder: Path, device: str):
    """A tiny random Llama target, a noisy copy to draft with, and a random eagle head for it (untrained: its
    drafts are rejected often, which is what a rollback needs)."""
    from engine.drafters.eagle_head import EagleHead, HeadCard, save_head, target_fingerprint
    from engine.models.load import load_model
    from tests.engine.engine_testkit import build_tiny_tokenizer, save_tiny_model
    tokenizer = build_tiny_tokenizer()
    target = load_model(str(save_tiny_model(folder / "target", tokenizer, seed=0)), device=device, dtype="float32")
    draft_dir = save_tiny_model(folder / "draft", tokenizer, seed=0, noise=0.001)
    torch.manual_seed(0)
    head = EagleHead(target.model, torch.arange(target.vocab_size)).float()
    card = HeadCard(target.label, target_fingerprint(target.model), target.model.config.hidden_size,
                    target.vocab_size, {})
    head_dir = save_head(folder / "head", head, card)
    return target, draft_dir, head_dir


class GraphForward:
    """Stands in for --compile's CompiledForward (compiling takes minutes a width on a CPU): each pass of a compiled
    width runs the model's own forward uncounted, because a forward compiled whole (fullgraph) and replayed as a
    CUDA graph can make no host sync; what the runner does around it still counts."""

    def __init__(self, model, counter: SyncCounter) -> None:
        self.model, self.counter, self.seconds, self.failed = model, counter, {}, ""

    def __call__(self, input_ids: torch.Tensor, cache) -> torch.Tensor:
        self.seconds[input_ids.shape[1]] = 0.0
        with self.counter.paused():
            return self.model(input_ids=input_ids, cache=cache, use_cache=True).logits[0]


RUNNERS = {"eager": "the eager runner (DynamicCache)",
           "static": "--compile's StaticRunner uncompiled: every pass eager on the static cache",
           "graph": "--compile's StaticRunner, its compiled widths (1…k+1 for the target) as one graph each"}


def twin(loaded, runner_name: str, counter: SyncCounter):
    """The loaded model with the runners `runner_name` names (RUNNERS)."""
    from engine.backends.transformers_static import StaticRunner
    if runner_name == "eager":
        return loaded
    compiled = GraphForward(loaded.model, counter) if runner_name == "graph" else None
    return dataclasses.replace(loaded, runner_factory=lambda: StaticRunner(loaded.model, compiled,
                                                                           loaded.context_length, lambda _: None))


def settings(k: int, draft_dir: Path, head_dir: Path):
    from engine.core.config import SpecConfig
    return {"plain": SpecConfig(), f"early-exit k={k} layers=1": SpecConfig("early-exit", k=k, params={"layers": 1}),
            f"draft-model k={k}": SpecConfig("draft-model", k=k, draft=str(draft_dir)),
            f"eagle k={k}": SpecConfig("eagle", k=k, draft=str(head_dir))}


def measure(rounds: int, k: int, sampled: bool, device: str = "cpu") -> tuple[dict, Counter]:
    """{runner: {setting: {phase: syncs per round}}} and the sites of every count."""
    from engine.core.config import SamplingConfig
    from engine.models.load import load_model
    from engine.runtime import local_engine
    sampling = SamplingConfig(temperature=0.8, seed=1) if sampled else SamplingConfig()
    results, sites = {}, Counter()
    with tempfile.TemporaryDirectory() as tmp:
        target, draft_dir, head_dir = tiny_models(Path(tmp), device)
        for runner_name in RUNNERS:
            for name, spec in settings(k, draft_dir, head_dir).items():
                counter = SyncCounter()
                engine = local_engine(twin(target, runner_name, counter), draft_loader=lambda name, **options:
                                      twin(load_model(name, **options), runner_name, counter))
                engine.validate(spec)
                watch_engine(engine, counter)
                ids = engine.prompt_ids(PROMPT)
                per_round, where, _ = count_rounds(engine, ids, spec, sampling, rounds, counter)
                results.setdefault(runner_name, {})[name] = per_round
                sites.update({(runner_name, name, *key): n for key, n in where.items()})
                engine.release()
    return results, sites


def table(results: dict, before: dict | None) -> str:
    """Syncs per round by phase, one line per runner and setting; `before → after` where `before` is given."""
    def cell(now: float, was: float | None) -> str:
        text = f"{now:g}"
        return text if was is None else (f"{was:g} → {now:g}" if was != now else text)
    header = f"{'runner':<7} {'setting':<24}" + "".join(f" {phase:>16}" for phase in PHASES) + f" {'total':>16}"
    lines = [header, "-" * len(header)]
    for runner_name, rows in results.items():
        for name, per_round in rows.items():
            was = (before or {}).get(runner_name, {}).get(name)
            cells = [cell(per_round[p], None if was is None else was.get(p, 0.0)) for p in PHASES]
            cells.append(cell(sum(per_round.values()), None if was is None else sum(was.values())))
            lines.append(f"{runner_name:<7} {name:<24}" + "".join(f" {c:>16}" for c in cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=16, help="rounds counted after the prefill")
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--sampled", action="store_true", help="temperature 0.8 instead of greedy")
    parser.add_argument("--sites", action="store_true", help="where each sync comes from")
    parser.add_argument("--save", type=Path, help="write the counts here (JSON)")
    parser.add_argument("--before", type=Path, help="counts saved by --save from another checkout: before → after")
    parser.add_argument("--device", default="cpu", help="where the tiny models run (cpu, cuda)")
    parser.add_argument("--cuda", action="store_true",
                        help="also torch.cuda.set_sync_debug_mode('warn'): a warning at each real sync (--device cuda)")
    args = parser.parse_args(argv)
    from engine.runtime import quiet_libraries
    quiet_libraries()
    if args.cuda:
        if torch.cuda.is_available():
            torch.cuda.set_sync_debug_mode("warn")
        else:
            print("note: torch finds no CUDA device; set_sync_debug_mode has nothing to watch")
    results, sites = measure(args.rounds, args.k, args.sampled, args.device)
    before = json.loads(args.before.read_text()) if args.before else None
    print(f"host syncs per round on {args.device} (mean of {args.rounds} rounds after the prefill, "
          f"{'sampled' if args.sampled else 'greedy'})" + (f", before ({args.before}) → after" if before else ""))
    print(table(results, before))
    print("\n".join(f"  {name}: {words}" for name, words in RUNNERS.items()))
    print("  on a CPU the core reads the verdict and p_draft in host memory (numpy: one count each); on a GPU each "
          "is a tensor of the drafted ids built on the device and a .tolist() (two): --device cuda counts those")
    if args.sites:
        print("\nwhere (runner, setting, phase, kind, site: calls over all counted rounds)")
        for (runner_name, name, phase, kind, where), n in sorted(sites.items()):
            print(f"  {runner_name:<6} {name:<24} {phase:<15} {kind:<28} {where}: {n}")
    if args.save:
        args.save.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
