"""`specscope bench --compare-llama`: llama-cpp-python's own `Llama` (engine/measure/references.py)
on the same GGUF, prompt ids, threads, context and GPU layers as our llama.cpp backend, for plain decoding and
prompt lookup (its `LlamaPromptLookupDecoding`), and for plain decoding also a bare low-level loop
(references.BareLoop: what llama.cpp alone costs), pooled per config and category like our figures, reported as
ours ÷ theirs; and the measured verify-cost curve (engine/measure/verify_cost.py) the bench prints and uses for
the theoretical speed-up.

Touches llama.cpp through the references it makes (one `Llama` per config, one bare loop; closed at the end); no Qt.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from engine.core.config import SpecConfig
from engine.core.errors import ConfigError


def check_compare_llama(engine, specs: list[SpecConfig], temperature: float) -> None:
    """--compare-llama needs the target on llama.cpp and greedy decoding; configs it can't compare (a draft
    model, early exit) are left out of the comparison, not refused."""
    if engine.target.backend != "llama.cpp":
        raise ConfigError(f"--compare-llama compares our llama.cpp backend with llama-cpp-python's own; "
                          f"{engine.target.label} runs on {engine.target.backend} (use a .gguf model or "
                          "--backend llama.cpp)")
    if temperature:
        raise ConfigError("--compare-llama compares greedy decoding; drop --temperature")


@dataclass
class Tally:
    """One reference's figures: decode tokens and seconds (after each first token, as engine.core.stats counts
    ours) and how many of its outputs equal ours, per category and overall ('all')."""

    decode_tokens: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    decode_seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    identical: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def add(self, category: str, theirs, ours: tuple[int, ...]) -> None:
        for key in ("all", category):
            self.decode_tokens[key] += max(0, len(theirs.output_ids) - 1)
            self.decode_seconds[key] += theirs.elapsed_seconds - theirs.ttft_seconds
            self.identical[key] += int(theirs.output_ids == tuple(ours))

    def tok_per_s(self, key: str) -> float | None:
        seconds = self.decode_seconds.get(key, 0.0)
        return self.decode_tokens[key] / seconds if seconds > 0 else None


@dataclass
class LlamaComparison:
    """The references for one config: llama-cpp-python's `Llama`, and for plain decoding the bare loop too."""

    spec: SpecConfig
    reference: object = field(repr=False)
    bare: object | None = field(default=None, repr=False)
    theirs: Tally = field(default_factory=Tally)
    bare_tally: Tally = field(default_factory=Tally)

    def run(self, prompt, ids: list[int], ours: tuple[int, ...], max_new_tokens: int, eos_ids) -> None:
        self.theirs.add(prompt.category, self.reference.generate(ids, max_new_tokens, eos_ids), ours)
        if self.bare is not None:
            self.bare_tally.add(prompt.category, self.bare.generate(ids, max_new_tokens, eos_ids), ours)

    def warm_up(self, ids: list[int], max_new_tokens: int, eos_ids) -> None:
        """Each reference once, untimed (its first generation pays first-use costs)."""
        for reference in (self.reference, self.bare):
            if reference is not None:
                reference.generate(ids, max_new_tokens, eos_ids)

    def close(self) -> None:
        self.reference.close()
        if self.bare is not None:
            self.bare.close()


def make_comparisons(engine, specs: list[SpecConfig]) -> dict[str, LlamaComparison]:
    """One reference `Llama` per comparable config (and a bare loop beside plain decoding's), keyed by the
    config's label, with the threads, context and GPU layers of our loaded model (-1: all of them)."""
    from engine.measure.references import BareLoop, LlamaCppPython
    from engine.host import engine_threads
    target = engine.target
    same = dict(n_threads=engine_threads(), n_ctx=target.context_length, n_gpu_layers=target.native.n_gpu_layers)
    if getattr(target.native, "main_gpu", None) is not None:  # cuda:N: that GPU alone, as ours
        same["main_gpu"] = target.native.main_gpu
    out = {}
    for spec in specs:
        if spec.info.llama_reference is None:  # what llama-cpp-python's high-level API can't run
            continue
        reference = LlamaCppPython(target.source.file, **same, **spec.info.llama_reference(spec))
        bare = None if spec.speculative else BareLoop(target.source.file, **same)
        out[spec.label()] = LlamaComparison(spec, reference, bare)
    return out


def close_comparisons(comparisons: dict[str, LlamaComparison]) -> None:
    for comparison in comparisons.values():
        comparison.close()


def comparison_row(comparison: LlamaComparison | None, key: str, ours_tok_per_s: float) -> dict:
    """The figures a bench summary row gets from the comparison (empty without one)."""
    if comparison is None or key not in comparison.theirs.decode_tokens:
        return {}
    theirs = comparison.theirs.tok_per_s(key)
    row = {"llama_cpp_python_tok_per_s": theirs,
           "ours_over_llama_cpp_python": ours_tok_per_s / theirs if theirs else None,
           "llama_cpp_python_identical": comparison.theirs.identical[key]}
    if comparison.bare is not None:
        bare = comparison.bare_tally.tok_per_s(key)
        row.update(bare_loop_tok_per_s=bare, ours_over_bare_loop=ours_tok_per_s / bare if bare else None,
                   bare_loop_identical=comparison.bare_tally.identical[key])
    return row


def cost_curve_line(cost, backend: str) -> str:
    """"verify cost on this machine (llama.cpp): n=1 7.4 ms (1.00×) · n=2 …" for the bench's header."""
    cells = [f"n={n} {cost.cost(n) * 1000:.1f} ms ({cost.relative(n):.2f}×)" for n in range(1, cost.n_max + 1)]
    return f"verify cost on this machine ({backend}): " + " · ".join(cells)
