"""Equality as a claim with evidence: where a greedy speculative output first differs from plain decoding,
tell a numerics near-tie from a real error.

Plain decoding computes the logits at output position i in a one-token pass; speculation computes them in
the verification pass of the round that committed position i (the fed token and its draft, in one batch).
In float32 on a CPU both give the same logits; in bf16, fp16 or a K-quant GGUF a batch rounds differently,
and when the target's top two tokens are nearly tied the argmax can flip. `diagnose` recomputes the logits
at i both ways, on a fresh runner of the target, over the same prefix, and reports the argmax and top-2
margin of each pass and how far the passes disagree (max |Δlogit| over the vocabulary):

    near-tie   plain decoding's token and speculation's are both within the passes' discrepancy of the top
               logit in each pass: which one wins is a rounding difference, not a speculation error;
    mismatch   anything else (e.g. both passes prefer plain's token by more than they disagree, yet
               speculation committed another): a real error, with everything needed to report it.

The quick check (one prefill of the shared prefix, then the two passes) settles most cases. The runs'
caches were built in other batches than that prefill, so before anything is called a mismatch the runs'
own passes are replayed exactly (plain decoding token by token, speculation round by round) and judged
again. Only greedy runs are compared token for token: sampling's check is statistical.

Works on every backend through the Runner contract (engine.backends); touches the target's weights only
through a fresh runner, released at the end. No Qt.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

import torch

from engine.backends import LoadedModel
from engine.core.events import RoundVerified

NEAR_TIE, MISMATCH = "near-tie", "mismatch"
SAMPLING_NOTE = ("sampled outputs are not compared token for token (each run draws its own tokens); "
                 "speculative sampling's check is statistical")


@dataclass(frozen=True, slots=True)
class PassResult:
    """The target's logits at the diverging position, computed one way."""

    argmax: int
    top2_margin: float  # top-1 minus top-2 logit
    plain_logit: float | None  # logit of plain decoding's token there
    spec_logit: float | None  # logit of speculation's token there


@dataclass(frozen=True, slots=True)
class Divergence:
    """The first position where a greedy speculative output differs from plain decoding, diagnosed."""

    position: int  # 0-based index into the output
    kind: str  # NEAR_TIE | MISMATCH
    plain_token: int | None  # None where plain decoding's output ended there
    spec_token: int | None
    plain_text: str
    spec_text: str
    top2_margin: float  # how far apart the two tokens are (logits), in the pass where they are furthest
    pass_discrepancy: float  # max |Δlogit| over the vocabulary between the one-token and the batched pass
    one_token: PassResult | None
    batched: PassResult | None
    round_index: int | None  # the speculative round that committed the position
    batch_ids: tuple[int, ...]  # that round's verification batch: the fed token(s) and the draft
    row: int  # the batch row whose logits decided the position
    replayed: bool  # the runs' own pass structure was replayed (the quick check was not conclusive)
    model: str
    backend: str
    dtype: str
    seconds: float

    @property
    def is_near_tie(self) -> bool:
        return self.kind == NEAR_TIE

    def as_dict(self) -> dict:
        """The JSON object every equality claim carries (bench, scripted compare, exports)."""
        return {"position": self.position, "kind": self.kind, "top2_margin": self.top2_margin,
                "pass_discrepancy": self.pass_discrepancy, "plain_token": self.plain_token,
                "spec_token": self.spec_token, "plain_text": self.plain_text, "spec_text": self.spec_text,
                "round_index": self.round_index, "replayed": self.replayed, "model": self.model,
                "backend": self.backend, "dtype": self.dtype}

    def short(self) -> str:
        """The table cell: near-tie at token N (margin, discrepancy, the two tokens) or MISMATCH."""
        tokens = f"{self.plain_text!r} vs {self.spec_text!r}"
        if self.is_near_tie:
            return (f"≈ near-tie at token {self.position} (margin {self.top2_margin:.3g}, "
                    f"discrepancy {self.pass_discrepancy:.3g}, {tokens})")
        return f"✗ MISMATCH at token {self.position} ({tokens})"

    def explanation(self) -> str:
        """One sentence for a near-tie; for a mismatch, everything needed to report it."""
        if self.is_near_tie:
            return (f"At token {self.position} the target's two best tokens, {self.plain_text!r} and "
                    f"{self.spec_text!r}, are {self.top2_margin:.3g} logits apart, within twice the "
                    f"{self.pass_discrepancy:.3g} by which a one-token pass and a batched pass of the same "
                    f"model disagree in {self.dtype} (each token's logit moves by up to that much): a "
                    f"rounding difference, not a speculation error.")
        return (f"MISMATCH at token {self.position}: plain decoding chose {self.plain_token} "
                f"({self.plain_text!r}), speculation committed {self.spec_token} ({self.spec_text!r}); "
                f"{_pass_words(self)}. This is not a rounding near-tie: please report it with this "
                f"line ({self.model}, {self.backend}, {self.dtype}, round {self.round_index}, verification "
                f"batch {list(self.batch_ids)}, row {self.row}).")


def _pass_words(d: Divergence) -> str:
    parts = []
    for name, result in (("one-token pass", d.one_token), ("batched pass", d.batched)):
        if result is not None:
            parts.append(f"the {name} picks {result.argmax} (top-2 margin {result.top2_margin:.3g})")
    parts.append(f"the passes differ by at most {d.pass_discrepancy:.3g} logits")
    return ", ".join(parts)


# ------------------------------------------------------------------ locating the round

def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first token where the two outputs differ (or where one ends), None if identical."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


@dataclass(frozen=True, slots=True)
class _Batch:
    round_index: int
    start: int  # output position the batch's row 0 predicts
    batch_ids: list[int]  # what the round fed: the pending token(s) and the draft
    row: int  # the row that predicted the diverging position


def locate(rounds: Sequence[RoundVerified], prompt_ids: Sequence[int], output_ids: Sequence[int],
           position: int) -> _Batch | None:
    """The round whose commit covers output `position`, and its verification batch rebuilt from the events:
    round 0 fed the prompt (nothing drafted), a later round the last committed token and its draft."""
    for event in rounds:
        start = event.n_committed_total - len(event.committed_ids)
        if start <= position < event.n_committed_total:
            fed = list(prompt_ids) if start == 0 else [output_ids[start - 1]]
            return _Batch(event.index, start, fed + list(event.draft_ids), len(fed) - 1 + position - start)
    return None


# ------------------------------------------------------------------ the two passes

def _pass(logits: torch.Tensor, plain_token: int | None, spec_token: int | None) -> PassResult:
    values = torch.topk(logits, 2).values.tolist()

    def logit(token):
        return float(logits[token]) if token is not None and 0 <= token < logits.shape[-1] else None

    # argmax as greedy decoding takes it: on an exact tie (common in bf16) the lowest id, which topk need not give
    return PassResult(int(logits.argmax()), values[0] - values[1], logit(plain_token), logit(spec_token))


@torch.inference_mode()
def quick_logits(runner, prompt_ids: list[int], output_ids: list[int], batch: _Batch, position: int
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits at `position` over one shared prefix (fed in one pass): the round's batch fed whole, as
    verification did, and the same ids with the last one fed alone, as plain decoding did."""
    context = prompt_ids + output_ids
    n_fed = len(prompt_ids) if batch.start == 0 else 1
    prefix_length = len(prompt_ids) + batch.start - 1 if batch.start else 0  # what the cache held before
    runner.reset()
    if prefix_length:
        runner.forward(context[:prefix_length], 1)
    n_rows = len(batch.batch_ids) - n_fed + 1  # verification asks for the fed token's row and the draft's
    batched = runner.forward(batch.batch_ids, n_rows)[batch.row - n_fed + 1].clone()
    runner.rollback(prefix_length)
    rest = context[prefix_length: len(prompt_ids) + position]
    if len(rest) > 1:
        runner.forward(rest[:-1], 1)
    one_token = runner.forward(rest[-1:], 1)[0].clone()
    return one_token, batched


@torch.inference_mode()
def replayed_logits(runner, prompt_ids: list[int], plain_ids: list[int], rounds: Sequence[RoundVerified],
                    batch: _Batch, position: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits at `position` as the runs computed them: plain decoding's prefill and one-token steps, and
    speculation's rounds replayed pass by pass (each batch fed, the rejected part rolled back)."""
    runner.reset()
    one_token = runner.forward(prompt_ids, 1)[0]
    for token in plain_ids[:position]:
        one_token = runner.forward([token], 1)[0]
    one_token = one_token.clone()
    runner.reset()
    context = list(prompt_ids)
    for event in rounds:
        fed = list(prompt_ids) if event.index == 0 else [context[-1]]
        rows = runner.forward(fed + list(event.draft_ids), len(event.draft_ids) + 1)
        if event.index == batch.round_index:
            return one_token, rows[batch.row - len(fed) + 1].clone()
        runner.rollback(len(runner.ids) - (len(event.draft_ids) - event.n_accepted))
        context.extend(event.committed_ids)
    raise ValueError(f"no round {batch.round_index} among the events")


# ------------------------------------------------------------------ classification

def classify(one_token: torch.Tensor, batched: torch.Tensor, plain_token: int | None, spec_token: int | None
             ) -> tuple[str, float, float, PassResult, PassResult]:
    """(kind, top-2 margin, pass discrepancy, one-token result, batched result).

    A near-tie: the two passes can order plain decoding's and speculation's tokens either way. Each logit
    moves by at most the discrepancy D between the passes, so the gap between two tokens moves by at most 2D:
    both tokens within 2D of the top logit in each pass, and at most 2D apart in each (ties included: in bf16
    two logits are often exactly equal, and argmax then takes the lower id), make which of them wins a matter
    of rounding. The margin reported is how far apart the two tokens are, in the pass where they are furthest
    (≤ 2D for a near-tie). Everything else, a missing token included, is a mismatch."""
    one, bat = _pass(one_token, plain_token, spec_token), _pass(batched, plain_token, spec_token)
    discrepancy = float((one_token - batched).abs().max())
    if plain_token == spec_token or None in (one.plain_logit, one.spec_logit, bat.plain_logit, bat.spec_logit):
        return MISMATCH, float("inf"), discrepancy, one, bat
    margin = max(abs(one.plain_logit - one.spec_logit), abs(bat.plain_logit - bat.spec_logit))
    tolerance = 2 * discrepancy
    close = all(float(logits.max()) - logit <= tolerance
                for logits, result in ((one_token, one), (batched, bat))
                for logit in (result.plain_logit, result.spec_logit))
    return (NEAR_TIE if close and margin <= tolerance else MISMATCH), margin, discrepancy, one, bat


def diagnose(target: LoadedModel, prompt_ids: Sequence[int], plain_ids: Sequence[int], spec_ids: Sequence[int],
             rounds: Sequence[RoundVerified]) -> Divergence | None:
    """None when the greedy outputs are identical; else the first differing position, diagnosed on a fresh
    runner of `target` (released before returning). `rounds`: the speculative run's round events."""
    position = first_difference(tuple(plain_ids), tuple(spec_ids))
    if position is None:
        return None
    started = time.perf_counter()
    prompt_ids, plain_ids, spec_ids = list(prompt_ids), list(plain_ids), list(spec_ids)
    plain_token = plain_ids[position] if position < len(plain_ids) else None
    spec_token = spec_ids[position] if position < len(spec_ids) else None
    batch = locate(rounds, prompt_ids, spec_ids, position) if spec_token is not None else None
    kind, margin, discrepancy, one, bat, replayed = MISMATCH, float("inf"), 0.0, None, None, False
    if batch is not None and plain_token is not None:
        runner = target.new_runner()
        try:
            one_token, batched = quick_logits(runner, prompt_ids, spec_ids, batch, position)
            kind, margin, discrepancy, one, bat = classify(one_token, batched, plain_token, spec_token)
            if kind == MISMATCH:
                # the shared prefix is not the runs' own cache (theirs was built in other batches): replay
                # their passes exactly before calling it an error
                replayed = True
                one_token, batched = replayed_logits(runner, prompt_ids, plain_ids, rounds, batch, position)
                kind, margin, discrepancy, one, bat = classify(one_token, batched, plain_token, spec_token)
        finally:
            runner.release()
    return Divergence(
        position=position, kind=kind, plain_token=plain_token, spec_token=spec_token,
        plain_text=_text(target, plain_token), spec_text=_text(target, spec_token), top2_margin=margin,
        pass_discrepancy=discrepancy, one_token=one, batched=bat,
        round_index=batch.round_index if batch else None, batch_ids=tuple(batch.batch_ids) if batch else (),
        row=batch.row if batch else -1, replayed=replayed, model=target.label, backend=target.backend,
        dtype=target.dtype_label, seconds=time.perf_counter() - started)


def _text(target: LoadedModel, token: int | None) -> str:
    if token is None:
        return "(end of output)"
    return target.tokenizer.decode([token], skip_special_tokens=False)


__all__ = ["first_difference", "Divergence", "PassResult", "NEAR_TIE", "MISMATCH", "SAMPLING_NOTE", "diagnose", "classify",
           "locate", "quick_logits", "replayed_logits"]
