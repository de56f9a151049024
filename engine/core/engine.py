"""The speculative core: verify a draft, accept or reject it, roll the cache back, report the round.

The acceptance rule is the one of Leviathan et al. (arXiv 2211.17192) and Chen et al. (arXiv 2302.01318):
keep drafted token x with probability min(1, p_target(x) / p_draft(x)); at the first rejection draw the
correction from norm(max(0, p_target − p_draft)); when all k are kept, draw a bonus token from the target.
A drafter with no distribution counts as a one-hot p_draft. Greedy decoding is the temperature → 0 limit:
keep x while it is the target's argmax. Either way the output is distributed exactly as the target's own.

The loop sees models only as engine.backends Runners (`target.new_runner()`) and drafters as Drafters, so a
backend or a method is added without touching it; torch is used for the tensors of verification only.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch

from engine.core.chat import Conversation, IncrementalDetokenizer, find_stop, normalize_conversation, prompt_ids
from engine.core.compat import check_tokenizers
from engine.core.config import SamplingConfig, SpecConfig, check_backend, check_layers
from engine.core.draft_length import DraftLengthPolicy
from engine.drafters import Drafter, Proposal, check_drafter, make_drafter
from engine.core.errors import ConfigError, PromptTooLongError
from engine.core.events import Event, GenerationFinished, GenerationStarted, RoundVerified, target_status
from engine.models.consent import ConsentAnswers, safety_check
from engine.models.load import LoadedModel, load_model
from engine.models.sources import resolve_source
from engine.core.sampling import make_generator, probabilities, sample
from engine.core.stats import StatsAccumulator
from engine.host import engine_threads
from engine.measure.verify_cost import VerifyCost, cached_verify_cost


# ------------------------------------------------------------------ verification (pure functions)

def verify_greedy(target_logits: torch.Tensor, draft_ids: list[int]) -> tuple[int, int, list[float], float]:
    """Greedy verification of a draft against target logits for positions 0…m.

    Returns n_accepted, the target's own token (argmax at the first disagreement, or the bonus), the
    target's probability of each drafted token, and its probability of its own token.
    """
    m = len(draft_ids)
    probs = torch.softmax(target_logits, dim=-1)
    top_p, top_id = probs.max(dim=-1)
    p_drafted = _gather_drafted(probs, draft_ids)
    # one device → host transfer per round: ids are exact in float32 (< 2**24)
    values = torch.cat([top_id.float(), top_p, p_drafted]).tolist()
    argmax = [int(v) for v in values[: m + 1]]
    n_accepted = 0
    while n_accepted < m and draft_ids[n_accepted] == argmax[n_accepted]:
        n_accepted += 1
    return n_accepted, argmax[n_accepted], values[2 * m + 2:], values[m + 1 + n_accepted]


def rejection_sample(p_target: torch.Tensor, p_draft: torch.Tensor | None, draft_ids: list[int],
                     generator: torch.Generator) -> tuple[int, int, list[float], list[float], float]:
    """Speculative sampling (arXiv 2211.17192 Alg. 1; 2302.01318 Alg. 2).

    p_target: (m+1, V) target probabilities; p_draft: (m, V) the draft's, or None for a one-hot draft.
    Returns n_accepted, the target's token (correction or bonus), p_target and p_draft of each drafted
    token, and the target's probability of its own token.
    """
    m = len(draft_ids)
    device = p_target.device
    if p_draft is None:
        p_draft = torch.zeros((m, p_target.shape[-1]), device=device)
        in_vocab = [(i, x) for i, x in enumerate(draft_ids) if x < p_target.shape[-1]]
        if in_vocab:
            p_draft[[i for i, _ in in_vocab], [x for _, x in in_vocab]] = 1.0
    pt_x = _gather_drafted(p_target[:m], draft_ids)
    pd_x = _gather_drafted(p_draft, draft_ids, outside=1.0)
    accept = torch.rand(m, generator=generator, device=device) * pd_x < pt_x  # u < p_target/p_draft
    # Residual distributions for every position, plus the bonus row: draw all m+1 at once and keep the
    # one at the first rejection, so the whole round needs a single device → host transfer.
    residual = torch.clamp(p_target[:m] - p_draft, min=0.0)
    mass = residual.sum(dim=-1, keepdim=True)
    residual = torch.where(mass > 0, residual / mass.clamp_min(1e-30), p_target[:m])
    candidates = sample(torch.cat([residual, p_target[m:m + 1]]), generator)
    p_candidates = p_target[torch.arange(m + 1, device=device), candidates]
    values = torch.cat([accept.float(), candidates.float(), p_candidates, pt_x, pd_x]).tolist()
    n_accepted = 0
    while n_accepted < m and values[n_accepted] > 0.5:
        n_accepted += 1
    target_id = int(values[m + n_accepted])
    p_own = values[2 * m + 1 + n_accepted]
    return n_accepted, target_id, values[3 * m + 2: 4 * m + 2], values[4 * m + 2:], p_own


def _gather_drafted(rows: torch.Tensor, draft_ids: list[int], outside: float = 0.0) -> torch.Tensor:
    """rows[i, draft_ids[i]]; a draft id beyond the target's vocabulary (vocabularies may differ by up to
    128 padding ids) has target probability 0, so it is always rejected."""
    vocab = rows.shape[-1]
    drafted = torch.tensor(draft_ids, dtype=torch.long, device=rows.device)
    picked = rows[torch.arange(len(draft_ids), device=rows.device), drafted.clamp(max=vocab - 1)]
    return torch.where(drafted < vocab, picked, torch.full_like(picked, outside))


def _align_vocab(p_draft: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Draft and target vocabularies may differ by a few padding ids (≤ 128): pad or cut the draft's."""
    extra = vocab_size - p_draft.shape[-1]
    if extra > 0:
        return torch.nn.functional.pad(p_draft, (0, extra))
    return p_draft[:, :vocab_size] if extra < 0 else p_draft


def check_draft_backend(target: LoadedModel, draft_source, draft_name: str) -> None:
    """A draft runs on its target's backend: a GGUF target on llama.cpp needs a GGUF draft, and a GGUF draft
    does not draft for a Hugging Face target. ConfigError with the way out otherwise."""
    if target.backend == "llama.cpp" and not draft_source.gguf_file:
        raise ConfigError(f"{draft_name} is a Hugging Face model, but {target.label} runs on llama.cpp, where a "
                          "draft must be a .gguf file too (or run both with --backend transformers)")
    if draft_source.gguf_file and target.source.kind in ("folder", "hub"):
        raise ConfigError(f"{draft_name} is a GGUF file, but {target.label} is a Hugging Face model: pick a "
                          "Hugging Face draft (a GGUF draft drafts for a GGUF target)")


# ------------------------------------------------------------------ the engine

@dataclass(slots=True)
class _Generation:
    """What one generation has produced so far (the loop's mutable state, passed from step to step)."""

    ids: list[int]  # prompt + everything committed
    feed: list[int]  # what the first (prefill) round feeds the target: the prompt after the cached prefix
    detok: IncrementalDetokenizer
    stats: StatsAccumulator
    generator: torch.Generator
    started: float
    output: list[int] = field(default_factory=list)
    text: str = ""
    index: int = 0  # of the next round; 0 is the prefill
    stop_reason: str | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class _Verdict:
    """One round's draft and what the target made of it, with the times of both steps."""

    proposal: Proposal
    n_accepted: int
    target_id: int
    p_target: list[float]
    p_draft: list[float | None]
    p_own: float
    draft_seconds: float
    verify_seconds: float


class Engine:
    """Holds a loaded target (and drafts) between messages and runs generations as event streams."""

    def __init__(self, target: LoadedModel, draft_loader=load_model, drafter_factory=make_drafter,
                 on_status: Callable[[str], None] | None = None) -> None:
        """`draft_loader` loads draft models and `drafter_factory(spec, target, draft, target_runner=…)` builds
        drafters (both take LoadedModels; MTP heads and assistants also read the target's runner); both are seams for tests (a scripted drafter) and default to the real ones.
        `on_status` hears slow steps (loading a draft model, its progress) as one line of text each."""
        self.target = target
        self.runner = target.new_runner()
        self.eos_ids = target.eos_ids
        self.on_status = on_status
        self.consent = ConsentAnswers()  # the user's safety answers, for draft models (engine.models.consent)
        self._draft_loader = draft_loader
        self._drafter_factory = drafter_factory
        self._draft: LoadedModel | None = None
        self._drafter: Drafter | None = None
        self._drafter_key: tuple | None = None
        self._policy: DraftLengthPolicy | None = None  # adaptive draft length; learns across messages
        self._active: Iterator[Event] | None = None  # the generation in progress, if any
        self._curves: dict[int, VerifyCost] = {}  # the target's measured verify-cost curve, by n_max

    # ---- settings

    def validate(self, spec: SpecConfig) -> None:
        """Raise ConfigError/ModelLoadError/TokenizerMismatchError for a spec this target can't run."""
        check_backend(spec.method, self.target.backend)
        if spec.backend is not None and spec.backend != self.target.backend:
            raise ConfigError(f"{spec.label()} asks for the {spec.backend} backend, but {self.target.label} runs on "
                              f"{self.target.backend} (load it with --backend {spec.backend})")
        if spec.speculative and not self.target.supports_rollback:
            raise ConfigError(f"{self.target.label} keeps a recurrent state that cannot be rolled back past a "
                              "rejected draft; only method none runs on it")
        if spec.info.uses_layers:
            check_layers(spec.layers, self.target.n_layers)
        draft = self.draft_model(spec.draft) if spec.info.needs_draft else None
        check_drafter(spec, self.target, draft)  # what only the method knows (MTP layers, an assistant's family)

    def _status(self, message: str) -> None:
        if self.on_status is not None:
            self.on_status(message)

    def draft_model(self, name: str) -> LoadedModel:
        """Load (once) and check a draft model. The target itself is reused when named again."""
        if self._draft is not None and self._draft.name == name:
            return self._draft
        if name == self.target.name or resolve_source(name) == resolve_source(self.target.name):
            draft = self.target  # same weights: share them, the drafter still keeps its own cache
        else:
            check_draft_backend(self.target, resolve_source(name), name)
            safety_check(name, self.consent)  # a draft gets the target's two questions (ConsentNeeded)
            self._status(f"Loading draft model {name}…")
            draft = self._draft_loader(name, device=str(self.target.device), dtype=self.target.dtype,
                                       progress=self._status, backend=self.target.backend,
                                       trust_remote_code=name in self.consent.remote_code_allowed,
                                       allow_pickle=name in self.consent.pickle_allowed)
        check_tokenizers(self.target.tokenizer, draft.tokenizer, self.target.label, draft.label)
        self._forget_drafter()
        self._draft = draft
        return draft

    def _forget_drafter(self) -> None:
        if self._drafter is not None:
            self._drafter.release()
        self._drafter, self._drafter_key = None, None

    def drafter(self, spec: SpecConfig) -> Drafter:
        key = (spec.method, spec.draft, spec.layers, spec.ngram_max, spec.ngram_min)
        if key != self._drafter_key:
            draft = self.draft_model(spec.draft) if spec.info.needs_draft else None
            self._forget_drafter()
            self._drafter = self._drafter_factory(spec, self.target, draft, target_runner=self.runner)
            self._drafter_key = key
            self._policy = None
        if spec.adaptive and (self._policy is None or self._policy.k != spec.k):
            self._policy = DraftLengthPolicy(spec.k, self.verify_curve(spec.k))
        return self._drafter

    def verify_curve(self, k: int) -> VerifyCost | None:
        """The target's measured cost of verifying 1…k+1 tokens (engine.measure.verify_cost), read from its cache
        (kept once found); None where it has not been measured (`specscope bench` measures and caches it):
        the theory then assumes verification free. Never measures: a generation's start stays as fast."""
        if k <= 0:
            return None
        if k not in self._curves:
            curve = cached_verify_cost(self.target, k + 1, threads=engine_threads())
            if curve is None:
                return None
            self._curves[k] = curve
        return self._curves[k]

    def release(self) -> None:
        """Free the KV caches (memory) kept between messages."""
        self.runner.release()
        if self._drafter is not None:
            self._drafter.release()

    # ---- generation

    def prompt_ids(self, conversation: Conversation, system: str | None = None) -> list[int]:
        return prompt_ids(self.target.tokenizer, normalize_conversation(conversation, system))

    def generate(self, conversation: Conversation, *, spec: SpecConfig = SpecConfig(),
                 sampling: SamplingConfig = SamplingConfig(), max_new_tokens: int = 256,
                 stop_strings: tuple[str, ...] = (), cancel: threading.Event | None = None,
                 system: str | None = None) -> Iterator[Event]:
        """Chat: the conversation goes through the model's chat template; yields events."""
        ids = self.prompt_ids(conversation, system)
        return self.generate_ids(ids, spec=spec, sampling=sampling, max_new_tokens=max_new_tokens,
                                 stop_strings=stop_strings, cancel=cancel)

    def generate_ids(self, prompt: list[int], *, spec: SpecConfig = SpecConfig(),
                     sampling: SamplingConfig = SamplingConfig(), max_new_tokens: int = 256,
                     stop_strings: tuple[str, ...] = (), cancel: threading.Event | None = None
                     ) -> Iterator[Event]:
        """Raw ids in, events out. Checks everything before the first event, so errors come early."""
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
        drafter = self.drafter(spec)
        self._active = self._loop(list(prompt), spec, sampling, max_new_tokens, tuple(stop_strings),
                                  cancel or threading.Event(), drafter)
        return self._active

    def _loop(self, prompt, spec, sampling, max_new_tokens, stop_strings, cancel, drafter):
        """The generation: a started event, one event per round until a stop, a finished event."""
        state = self._begin(prompt, spec, sampling, drafter)
        yield GenerationStarted(
            spec_label=spec.label(), method=spec.method, k=spec.k, model=self.target.label, draft=spec.draft,
            device=self.target.device_label or str(self.target.device), dtype=self.target.dtype_label,
            greedy=sampling.greedy, prompt_tokens=len(prompt), reused_prefix_tokens=len(self.runner.ids),
            max_new_tokens=max_new_tokens, warnings=spec.warnings + ((drafter.note,) if drafter.note else ()))
        try:
            while state.stop_reason is None:
                room = self._room(state, cancel, max_new_tokens)
                if room <= 0:
                    break
                verdict = self._draft_and_verify(state, spec, sampling, drafter, room)
                event = self._commit(state, verdict, drafter.name, room, max_new_tokens, stop_strings)
                state.stats.add_round(event)
                state.index += 1
                yield event
        except torch.OutOfMemoryError:
            self._out_of_memory(state)
        state.stats.set_elapsed(time.perf_counter() - state.started)
        yield GenerationFinished(stop_reason=state.stop_reason, text=state.text, output_ids=tuple(state.output),
                                 stats=state.stats.snapshot(), error=state.error)

    def _begin(self, prompt: list[int], spec: SpecConfig, sampling: SamplingConfig,
               drafter: Drafter) -> _Generation:
        generator = make_generator(self.target.device, sampling.seed)
        drafter.begin(sampling, generator)
        return _Generation(ids=list(prompt), feed=self.runner.sync(prompt),
                           detok=IncrementalDetokenizer(self.target.tokenizer, prompt),
                           stats=StatsAccumulator(spec.k, self._curve_seconds(spec)), generator=generator,
                           started=time.perf_counter())

    def _curve_seconds(self, spec: SpecConfig) -> tuple[float, ...]:
        curve = self.verify_curve(spec.k) if spec.speculative else None
        return () if curve is None else curve.seconds

    def _room(self, state: _Generation, cancel: threading.Event, max_new_tokens: int) -> int:
        """How many tokens this round may still commit; ≤ 0 with the stop reason set when none."""
        if cancel.is_set():
            state.stop_reason = "cancelled"
            return 0
        room = min(max_new_tokens - len(state.output), self.target.context_length - len(state.ids))
        if room <= 0:
            state.stop_reason = "max-new-tokens" if len(state.output) >= max_new_tokens else "context-full"
        return room

    def _draft_and_verify(self, state: _Generation, spec: SpecConfig, sampling: SamplingConfig,
                          drafter: Drafter, room: int) -> _Verdict:
        """Draft (no more than the room can take: the last token is the target's), then verify in one pass."""
        k = min(spec.k, room - 1) if state.index else 0
        policy = self._policy if spec.adaptive and state.index else None
        if policy is not None:
            # A costly drafter drafts no more than pays; a free one (a lookup) proposes k and is trimmed
            # below by the kind of guess it turned out to be.
            k = k if drafter.free_to_propose else policy.best_length(limit=k)
        t_draft = time.perf_counter()
        proposal = self._propose(drafter, state.ids, k).trimmed(k) if k > 0 else Proposal.empty()
        if policy is not None and proposal.ids:
            proposal = proposal.trimmed(policy.best_length(proposal.bucket, len(proposal.ids)))
        t_verify = time.perf_counter()
        # normally the last committed id; everything again if a rollback had to empty the cache
        feed = state.feed if state.index == 0 else self.runner.sync(state.ids)
        n_accepted, target_id, p_target, p_draft, p_own = self._verify(feed, proposal, sampling, state.generator)
        done = time.perf_counter()
        drafter.observe(n_accepted)
        if policy is not None:
            policy.record(proposal.bucket, len(proposal.ids), n_accepted, t_verify - t_draft, done - t_verify)
        return _Verdict(proposal, n_accepted, target_id, p_target, p_draft, p_own, t_verify - t_draft,
                        done - t_verify)

    def _commit(self, state: _Generation, verdict: _Verdict, drafter_name: str, room: int, max_new_tokens: int,
                stop_strings: tuple[str, ...]) -> RoundVerified:
        """Append what the round keeps (cut at EOS, the room, a stop string) and describe it as an event."""
        draft_ids, n_accepted = verdict.proposal.ids, verdict.n_accepted
        committed = draft_ids[:n_accepted] + [verdict.target_id]
        cut = next((i + 1 for i, t in enumerate(committed) if t in self.eos_ids), None)
        if cut is not None:
            committed, state.stop_reason = committed[:cut], "eos"
        if len(committed) >= room:
            committed = committed[:room]
            state.stop_reason = state.stop_reason or (
                "max-new-tokens" if len(state.output) + len(committed) >= max_new_tokens else "context-full")
        # Rejected tokens are decoded after the accepted ones (their text may finish a character)
        rejected_pieces = state.detok.peek(draft_ids)[n_accepted:] if n_accepted < len(draft_ids) else []
        pieces = state.detok.add(committed)
        state.ids.extend(committed)
        state.output.extend(committed)
        if stop_strings:
            pieces, state.stop_reason, state.text = self._apply_stop(state.text, pieces, stop_strings,
                                                                     state.stop_reason)
        else:
            state.text += "".join(pieces)
        draft_pieces = tuple(pieces[:n_accepted] + [""] * max(0, n_accepted - len(pieces)) + rejected_pieces)
        return RoundVerified(
            index=state.index, drafter=drafter_name if draft_ids else "target", draft_ids=tuple(draft_ids),
            draft_pieces=draft_pieces, n_accepted=n_accepted, target_id=verdict.target_id,
            target_status=target_status(len(draft_ids), n_accepted),
            target_piece=pieces[n_accepted] if len(pieces) > n_accepted else "",
            p_target=tuple(verdict.p_target), p_draft=tuple(verdict.p_draft),
            p_target_of_target_id=verdict.p_own, committed_ids=tuple(committed), committed_pieces=tuple(pieces),
            draft_seconds=verdict.draft_seconds, verify_seconds=verdict.verify_seconds,
            elapsed_seconds=time.perf_counter() - state.started, n_committed_total=len(state.output))

    def _out_of_memory(self, state: _Generation) -> None:
        """The device ran out of memory mid-reply: free the caches, keep what was generated, say so."""
        self.release()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        state.stop_reason = "out-of-memory"
        state.error = (f"{self.target.device.type} ran out of memory after {len(state.output)} new tokens; the "
                       "reply so far is kept. Try a shorter conversation, a smaller k or a smaller model.")

    @staticmethod
    @torch.inference_mode()
    def _propose(drafter: Drafter, ids: list[int], k: int) -> Proposal:
        return drafter.propose(ids, k)

    @torch.inference_mode()
    def _verify(self, feed: list[int], proposal: Proposal, sampling: SamplingConfig,
                generator: torch.Generator):
        """One target forward pass over the pending token(s) plus the draft; then accept and roll back."""
        runner = self.runner
        draft_ids = proposal.ids
        m = len(draft_ids)
        logits = runner.forward(feed + draft_ids, m + 1)
        if sampling.greedy:
            n_accepted, target_id, p_target, p_own = verify_greedy(logits, draft_ids)
            p_draft = self._draft_probs(proposal)
        else:
            p_target_rows = probabilities(logits, sampling)
            p_draft_rows = None if proposal.p_draft is None else \
                _align_vocab(proposal.p_draft.to(p_target_rows.device), p_target_rows.shape[-1])
            n_accepted, target_id, p_target, p_draft, p_own = rejection_sample(
                p_target_rows, p_draft_rows, draft_ids, generator)
            if proposal.p_draft is None:
                p_draft = [None] * m
        # The cache holds everything fed; keep it up to the last accepted draft token. The target's own
        # token is not in it yet: it is fed at the start of the next round.
        runner.rollback(len(runner.ids) - (m - n_accepted))
        return n_accepted, target_id, p_target, p_draft, p_own

    @staticmethod
    def _draft_probs(proposal: Proposal) -> list[float | None]:
        if proposal.p_draft is None:
            return [None] * len(proposal.ids)
        rows = torch.arange(len(proposal.ids), device=proposal.p_draft.device)
        drafted = torch.tensor(proposal.ids, dtype=torch.long, device=proposal.p_draft.device)
        return proposal.p_draft[rows, drafted].tolist()

    @staticmethod
    def _apply_stop(text: str, pieces: list[str], stop_strings, stop_reason):
        """Cut this round's pieces where a stop string begins. Text streamed in an earlier round stays, so
        that the final text is always what was shown (a stop string spanning rounds leaves its first part).
        Returns pieces, stop reason, text so far."""
        joined = text + "".join(pieces)
        at = find_stop(joined, stop_strings, len(text))
        if at is None:
            return pieces, stop_reason, joined
        kept, length = [], len(text)
        for piece in pieces:
            take = max(0, min(len(piece), at - length))
            kept.append(piece[:take])
            length += len(piece)
        return kept, "stop-string", text + "".join(kept)
