"""The Engine: a loaded target between messages, generations as streams of events (one per round), and the
EngineLike protocol every engine honours (this one, a model on a server, a router over several).

A round: the drafter proposes (engine.core.drafting), the target verifies in one pass (engine.core.loop,
engine.core.verify: arXiv 2211.17192, 2302.01318), the cache is rolled back past what was rejected, and
the round is reported. The engine sees models only as Runners (`target.new_runner()`) and gets its drafters
from the DraftSource it is built with (engine.runtime assembles one from the method registry and the model
loader), so a backend or a method is added without touching it. Touches torch for verification only.
"""

from __future__ import annotations

import gc
import threading
import time
from dataclasses import replace
from typing import Callable, Iterator, Protocol

import torch

from engine.core.chat import Conversation, IncrementalDetokenizer, normalize_conversation, prompt_ids
from engine.core.config import SamplingConfig, SpecConfig
from engine.core.draft_length import DraftLengthPolicy
from engine.core.drafting import Drafter, Proposal
from engine.core.errors import ConfigError, PromptTooLongError, ServerError
from engine.core.events import Event, GenerationFinished, GenerationStarted
from engine.core.loop import Checked, Generation, Verdict, commit_round, room_left, verify_pass, verify_tree_pass
from engine.core.runner import Runner
from engine.core.sampling import make_generator
from engine.core.stats import StatsAccumulator, VerifyCost, describe_rollback

Status = Callable[[str], None]


class DraftSource(Protocol):
    """Where an Engine gets what a method needs: checks, drafters (built once per setting that keys them)
    and the target's measured verify-cost curve."""

    def validate(self, spec: SpecConfig) -> None:
        """ConfigError (or a loading error) for a setting this target can't run, before anything runs."""

    def drafter(self, spec: SpecConfig, target_runner) -> Drafter:
        """The drafter of `spec`, the same object while the setting's keys stay the same."""

    def verify_curve(self, k: int) -> VerifyCost | None:
        """The target's cost of verifying 1…k+1 tokens, where measured; None otherwise (never measures)."""

    def tree_curve(self, budget: int) -> VerifyCost | None:
        """The target's cost of a tree pass over 0…budget nodes (seconds[n − 1]: n − 1 nodes), where measured;
        None otherwise (never measures)."""

    def release(self) -> None:
        """Free the drafters' caches."""


class EngineLike(Protocol):
    """What the GUI, the CLI and the measurements drive: Engine, RemoteEngine and BackendRouter alike."""

    target: object  # the model's facts: label, backend, device, …

    def validate(self, spec: SpecConfig) -> None: ...

    def prompt_ids(self, conversation: Conversation, system: str | None = None) -> list[int]: ...

    def generate(self, conversation: Conversation, *, spec: SpecConfig = ..., sampling: SamplingConfig = ...,
                 max_new_tokens: int = ..., stop_strings: tuple[str, ...] = ...,
                 cancel: threading.Event | None = ..., system: str | None = ...,
                 record: bool = ...) -> Iterator[Event]: ...

    def release(self) -> None: ...


class Engine:
    """Holds a loaded target between messages and runs generations as event streams. `drafts` gives the
    drafters; `on_status` hears slow steps (loading a draft model) as one line of text each."""

    def __init__(self, target, drafts: DraftSource, on_status: Status | None = None) -> None:
        self.target = target
        self.runner: Runner = target.new_runner()
        self.eos_ids = target.eos_ids
        self.drafts = drafts
        self.on_status = on_status
        self._drafter: Drafter | None = None
        self._policy: DraftLengthPolicy | None = None  # adaptive draft length; learns across messages
        self._active: Iterator[Event] | None = None  # the generation in progress, if any
        self._solo_texts: dict[int, str] = {}  # the text of single ids, for every generation's detokenizer

    # ---- settings

    def validate(self, spec: SpecConfig) -> None:
        """Raise ConfigError/ModelLoadError/TokenizerMismatchError for a spec this target can't run."""
        if spec.speculative and not self.target.supports_rollback:
            raise ConfigError(self.target.rollback_refusal or
                              f"{self.target.label} keeps a recurrent state that cannot be rolled back past a "
                              "rejected draft; only plain decoding runs on it")
        self.drafts.validate(spec)

    def drafter(self, spec: SpecConfig) -> Drafter:
        drafter = self.drafts.drafter(spec, self.runner)
        if drafter is not self._drafter:
            self._drafter, self._policy = drafter, None
        if spec.adaptive and (self._policy is None or (self._policy.k, self._policy.budget) != (spec.k, spec.tree)):
            self._policy = DraftLengthPolicy(spec.k, self.verify_curve(spec.k),
                                             self.drafts.tree_curve(spec.tree) if spec.tree else None, spec.tree)
        return drafter

    def verify_curve(self, k: int) -> VerifyCost | None:
        return self.drafts.verify_curve(k) if k > 0 else None

    def release(self) -> None:
        """Free the KV caches (memory) kept between messages."""
        self.runner.release()
        self.drafts.release()

    # ---- generation

    def prompt_ids(self, conversation: Conversation, system: str | None = None) -> list[int]:
        return prompt_ids(self.target.tokenizer, normalize_conversation(conversation, system))

    def generate(self, conversation: Conversation, *, spec: SpecConfig | None = None,
                 sampling: SamplingConfig = SamplingConfig(), max_new_tokens: int = 256,
                 stop_strings: tuple[str, ...] = (), cancel: threading.Event | None = None,
                 system: str | None = None, record: bool = False) -> Iterator[Event]:
        """Chat: the conversation goes through the model's chat template; yields events. `record`: every round
        event carries its tree (RoundDetail: alternatives, entropy, draws), at a small cost per round."""
        ids = self.prompt_ids(conversation, system)
        return self.generate_ids(ids, spec=spec, sampling=sampling, max_new_tokens=max_new_tokens,
                                 stop_strings=stop_strings, cancel=cancel, record=record)

    def generate_ids(self, prompt: list[int], *, spec: SpecConfig | None = None,
                     sampling: SamplingConfig = SamplingConfig(), max_new_tokens: int = 256,
                     stop_strings: tuple[str, ...] = (), cancel: threading.Event | None = None,
                     record: bool = False) -> Iterator[Event]:
        """Raw ids in, events out. Checks everything before the first event, so errors come early."""
        spec = SpecConfig() if spec is None else spec
        if max_new_tokens < 1:
            raise ConfigError(f"max new tokens must be ≥ 1, got {max_new_tokens}")
        if not prompt:
            raise ConfigError("the prompt is empty: type a message first")
        context = self.target.context_length
        if len(prompt) + 1 > context:
            raise PromptTooLongError(f"the prompt has {len(prompt)} tokens but {self.target.label} holds "
                                     f"{context}; shorten it or start a new chat")
        # One generation at a time: one its caller abandoned is closed, so the caches are consistent.
        if self._active is not None:
            self._active.close()
        self.validate(spec)
        # a recurrent state keeps per-token snapshots for this (a KV cache: nothing to do); plain decoding cuts
        # nothing off its passes, so it keeps no checkpoint either
        self.runner.reserve_rollback(spec.k + 1 if spec.speculative else 1)
        drafter = self.drafter(spec)
        why_chains = self.runner.tree_refusal() if spec.tree else None  # asked once the drafter has set it up
        if why_chains:  # a tree asked of a target that verifies chains only (a recurrent state): said, and chains
            spec = replace(spec.with_tree(0), warnings=spec.warnings + (
                f"tree={spec.tree} is not used: {why_chains}; this reply drafts one chain a round",))
        self._active = self._loop(list(prompt), spec, sampling, max_new_tokens, tuple(stop_strings),
                                  cancel or threading.Event(), drafter, record)
        return self._active

    def _loop(self, prompt, spec, sampling, max_new_tokens, stop_strings, cancel, drafter, record=False):
        """The generation: a started event, one event per round until a stop, a finished event."""
        state = self._begin(prompt, spec, sampling, drafter)
        state.piece = state.detok.text_of if record else None
        before = self.runner.rollback_cost()  # a recurrent state's (a KV cache: None)
        where = {"backend": self.target.backend, "device": self.target.device_label or str(self.target.device)}
        yield GenerationStarted(
            spec_label=spec.label(), method=spec.method, k=spec.k, model=self.target.label, draft=spec.draft,
            dtype=self.target.dtype_label, greedy=sampling.greedy, prompt_tokens=len(prompt),
            reused_prefix_tokens=len(self.runner.ids), max_new_tokens=max_new_tokens,
            warnings=spec.warnings + _said(drafter.warning),
            rollback=describe_rollback(before) if spec.speculative else "", notes=_said(drafter.note), **where)
        # What the process holds already (chat histories, events, models' Python objects) is left out of Python's
        # collections during the rounds: a full collection of it (50–100 ms in a long session, measured in a bench
        # run) would otherwise land inside a round now and then and be counted as its time
        gc.freeze()
        try:
            while state.stop_reason is None:
                room = room_left(state, cancel, max_new_tokens, self.target.context_length)
                if room <= 0:
                    break
                verdict = self._draft_and_verify(state, spec, sampling, drafter, room)
                event = commit_round(state, verdict, drafter.name, room, max_new_tokens, stop_strings,
                                     self.eos_ids)
                state.stats.add_round(event)
                state.index += 1
                yield event
        except torch.OutOfMemoryError:
            self._out_of_memory(state)
        except ServerError as exc:  # a target on a server (engine.remote.verify) failed mid-reply: what came stays
            self.runner.reset()
            state.stop_reason, state.error = "server-error", f"{exc} (the reply so far is kept)"
        finally:
            gc.unfreeze()  # collectable again, between replies
        state.stats.set_elapsed(time.perf_counter() - state.started)
        if state.output:  # a drafter that learns from finished replies (suffix decoding); others do nothing
            drafter.learn(list(state.output))
        after = self.runner.rollback_cost() if before is not None else None
        if after is not None:
            state.stats.set_rollbacks(after["restores"] - before["restores"],
                                      1e-3 * ((after["mean_restore_ms"] or 0) * after["restores"]
                                              - (before["mean_restore_ms"] or 0) * before["restores"]),
                                      after["refills"] - before["refills"])
        yield GenerationFinished(stop_reason=state.stop_reason, text=state.text, output_ids=tuple(state.output),
                                 stats=state.stats.snapshot(), error=state.error, **where)

    def _begin(self, prompt: list[int], spec: SpecConfig, sampling: SamplingConfig,
               drafter: Drafter) -> Generation:
        generator = make_generator(self.target.device, sampling.seed)
        drafter.begin(sampling, generator)
        curve = self.verify_curve(spec.k) if spec.speculative else None
        return Generation(ids=list(prompt), feed=self.runner.sync(prompt),
                          detok=IncrementalDetokenizer(self.target.tokenizer, prompt, self._solo_texts),
                          stats=StatsAccumulator(spec.k, () if curve is None else curve.seconds),
                          generator=generator, started=time.perf_counter())

    def _draft_and_verify(self, state: Generation, spec: SpecConfig, sampling: SamplingConfig,
                          drafter: Drafter, room: int) -> Verdict:
        """Draft (no more than the room can take: the last token is the target's), then verify in one pass."""
        k = min(spec.k, room - 1) if state.index and spec.speculative else 0  # plain decoding asks no drafter
        policy = self._policy if spec.adaptive and state.index else None
        tree = spec.tree
        if policy is not None:
            tree = policy.best_budget(limit=tree) if tree else 0  # a tree's budget that pays, or 0: a chain
            # A costly drafter drafts no more than pays; a free one (a lookup) proposes k and is trimmed
            # below by the kind of guess it turned out to be.
            k = k if drafter.free_to_propose or tree else policy.best_length(limit=k)
        t_draft = time.perf_counter()
        proposal = self._propose(drafter, state.ids, k, tree).trimmed(k).ended(self.eos_ids) if k > 0 \
            else Proposal.empty()
        if policy is not None and proposal.ids and not proposal.is_tree:
            proposal = proposal.trimmed(policy.best_length(proposal.bucket, len(proposal.ids)))
        t_verify = time.perf_counter()
        # normally the last committed id; everything again if a rollback had to empty the cache
        feed = state.feed if state.index == 0 else self.runner.sync(state.ids)
        drafted = proposal
        checked, proposal = self._verify(feed, proposal, sampling, state.generator, state.piece)
        done = time.perf_counter()
        draft_seconds = t_verify - t_draft
        drafter.observe(checked.n_accepted)
        if not state.index and spec.speculative and room > 1 and checked.target_id not in self.eos_ids:
            # the drafter takes in the prompt now (a draft model's prefill, an MTP head's states): it counts in the
            # time to the first token, as in llama.cpp's server, not in the first decoding round
            self._prefill(drafter, state.ids + [checked.target_id])
            draft_seconds += time.perf_counter() - done
        if policy is not None:
            policy.learn(drafted, proposal.ids[:checked.n_accepted], draft_seconds, done - t_verify)
        return Verdict(proposal, checked.n_accepted, checked.target_id, checked.p_target, checked.p_draft,
                       checked.p_own, draft_seconds, done - t_verify, checked.rollback_seconds, checked.detail,
                       min(self.runner.network_seconds(), done - t_verify))

    def _verify(self, feed: list[int], proposal: Proposal, sampling: SamplingConfig, generator: torch.Generator,
                piece=None) -> tuple[Checked, Proposal]:
        """The target's pass over `feed` + the m drafted ids (logits (m+1, V); `proposal.p_draft` (m, V_draft) or
        None), accepted and rolled back (engine.core.loop.verify_pass); a tree's over all its nodes, the kept
        path first in the proposal returned (verify_tree_pass)."""
        if proposal.is_tree:
            return verify_tree_pass(self.runner, feed, proposal, sampling, generator, piece)
        return verify_pass(self.runner, feed, proposal, sampling, generator, piece), proposal

    def _out_of_memory(self, state: Generation) -> None:
        """The device ran out of memory mid-reply: free the caches, keep what was generated, say so."""
        self.release()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        state.stop_reason = "out-of-memory"
        state.error = (f"{self.target.device.type} ran out of memory after {len(state.output)} new tokens; the "
                       "reply so far is kept. Try a shorter conversation, a smaller k or a smaller model.")

    @staticmethod
    @torch.inference_mode()
    def _propose(drafter: Drafter, ids: list[int], k: int, tree: int = 0) -> Proposal:
        return drafter.propose_tree(ids, k, tree) if tree else drafter.propose(ids, k)

    @staticmethod
    @torch.inference_mode()
    def _prefill(drafter: Drafter, ids: list[int]) -> None:
        drafter.prefill(ids)


def _said(line: str | None) -> tuple[str, ...]:
    """A drafter's optional line as a tuple of lines (none where it has nothing to say)."""
    return (line,) if line else ()
