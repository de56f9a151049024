"""A server's reply as engine.remote streams it, for the GUI tests: eight plain rounds (one per token, drafter
"server", no times of their own), then the RoundsRevised that tells them as the server's four steps, then
GenerationFinished with the revised rounds' stats.

    step 0  prefill, plain                      “Hello”
    step 1  drafted 3, kept 3, + bonus          “,” “ world” “!” + “ How”
    step 2  drafted 3, kept 0, + substitution   ▯ ▯ ▯ (not named) + “ are”
    step 3  drafted 3, kept 2, cut by a stop    “ you” “?”

Drafted 9, accepted 5, 4 target passes, 8 tokens. `RevisingEngine` yields the same stream from `generate()` (a
FakeEngine otherwise: `pause_after` holds it before the revision until `resume` is set), or another (`recorded_vllm`:
a real vLLM reply as engine.remote reads it).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

from engine.core.events import GenerationFinished, GenerationStarted, RoundsRevised, RoundVerified, TokenStatus
from engine.core.methods import plain_method
from engine.core.stats import StatsAccumulator
from fakes import FakeEngine, FakeModel

PIECES = ("Hello", ",", " world", "!", " How", " are", " you", "?")
IDS = tuple(range(100, 100 + len(PIECES)))
ARRIVED = (0.05, 0.08, 0.08, 0.08, 0.08, 0.11, 0.14, 0.14)  # each token's chunk (a step's tokens come in one)
NOTE = "vLLM told its steps at the end of the reply: 3 drafts, 9 drafted tokens, 5 accepted"
DRAFTED, ACCEPTED, STEPS = 9, 5, 4
SPEC_LABEL = "server (vllm)"
VLLM_STREAM = Path(__file__).resolve().parents[1] / "fixtures" / "vllm_ngram_stream.json"  # engine.remote tests too


def _round(index: int, first: int, n_committed: int, draft: int = 0, kept: int = 0,
           status: TokenStatus = TokenStatus.PLAIN) -> RoundVerified:
    """A server's round committing tokens first … first + n_committed − 1: `draft` drafted, the first `kept` of them
    named (the tokens it kept), the rest unknown (id -1, no text)."""
    ids, pieces = IDS[first:first + n_committed], PIECES[first:first + n_committed]
    reached = n_committed > kept  # the step got to the target's own token (no stop cut it first)
    return RoundVerified(
        index=index, drafter="server", draft_ids=ids[:kept] + (-1,) * (draft - kept),
        draft_pieces=pieces[:kept] + ("",) * (draft - kept), n_accepted=kept,
        target_id=ids[kept] if reached else -1, target_status=status, target_piece=pieces[kept] if reached else "",
        p_target=(), p_draft=(), p_target_of_target_id=None, committed_ids=ids, committed_pieces=pieces,
        draft_seconds=0.0, verify_seconds=0.0, elapsed_seconds=ARRIVED[first + n_committed - 1],
        n_committed_total=first + n_committed)


def plain_rounds() -> tuple[RoundVerified, ...]:
    """What streams first: one plain round per token."""
    return tuple(_round(i, i, 1) for i in range(len(PIECES)))


def revised_rounds() -> tuple[RoundVerified, ...]:
    """The server's four steps (the module docstring)."""
    return (_round(0, 0, 1), _round(1, 1, 4, 3, 3, TokenStatus.BONUS), _round(2, 5, 1, 3, 0, TokenStatus.SUBSTITUTED),
            _round(3, 6, 2, 3, 2, TokenStatus.SUBSTITUTED))


def revision() -> RoundsRevised:
    return RoundsRevised(revised_rounds(), NOTE)


def started(max_new_tokens: int = 64) -> GenerationStarted:
    return GenerationStarted(spec_label=SPEC_LABEL, method=plain_method().name, k=0, model="fake on vllm",
                             draft=None, device="server", dtype="server", greedy=True, prompt_tokens=0,
                             reused_prefix_tokens=0, max_new_tokens=max_new_tokens, backend="remote")


def finished() -> GenerationFinished:
    stats = StatsAccumulator(0)
    for event in revised_rounds():
        stats.add_round(event)
    stats.set_elapsed(0.15)
    return GenerationFinished(stop_reason="stop-string", text="".join(PIECES), output_ids=IDS,
                              stats=stats.snapshot(), backend="remote", device="server")


def events() -> list:
    """The whole stream: started, the plain rounds, the revision, finished."""
    return [started(), *plain_rounds(), revision(), finished()]


def recorded_vllm() -> list:
    """A real vLLM reply (n-gram, k = 3: tests/fixtures/vllm_ngram_stream.json) as engine.remote's reader turns its
    chunks into plain rounds and then revises them: “The” “ cat” plain, “ sat on the” kept + “ mat”, 3 unnamed
    drafts turned down + “.”, and a last step a stop cut at its end of sequence (no text)."""
    from engine.remote.reply import StreamedReply

    reply = StreamedReply(started=0.0)
    rounds = [event for chunk in json.loads(VLLM_STREAM.read_text()) for event in reply.take(chunk)]
    revised = reply.revise("vllm")
    return [started(), *rounds, revised, GenerationFinished(stop_reason="eos", text=reply.text,
                                                            output_ids=tuple(reply.ids), stats=reply.stats.snapshot())]


class RevisingEngine(FakeEngine):
    """A FakeEngine whose every reply is this module's stream (whatever the setting asked); `pause_after` (any
    number) holds it after the plain rounds, before the revision, until `resume` is set."""

    def __init__(self, stream=events, **kwargs) -> None:
        super().__init__(target=FakeModel(name="fake on vllm", device="server", dtype="server", backend="remote"),
                         **kwargs)
        self.stream = stream

    def generate(self, conversation, *, cancel: threading.Event | None = None, **kwargs):
        for event in self.stream():
            if isinstance(event, RoundsRevised) and self.pause_after is not None:
                while not self.resume.wait(0.005):
                    if cancel is not None and cancel.is_set():
                        break
            yield event


def fold(session, events) -> None:
    """A reply's events into `session` (revised_events' stream, or any other)."""
    for event in events:
        if isinstance(event, GenerationStarted):
            session.start(event)
        elif isinstance(event, RoundVerified):
            session.apply_round(event)
        elif isinstance(event, RoundsRevised):
            session.revise(event)
        else:
            session.finish(event)
