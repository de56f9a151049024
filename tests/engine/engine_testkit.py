"""Helpers shared by the engine tests: the tiny model and tokenizer, a scripted drafter, event collection."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from engine.core.drafting import Drafter, Proposal
from engine.core.events import GenerationFinished, GenerationStarted, RoundVerified

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

# Text the tiny tokenizer is trained on: it must see accents, CJK and emoji so that some of them are split
# into several byte-level tokens and others are merged.
TINY_CORPUS = [
    "The quick brown fox jumps over the lazy dog. " * 3,
    "def add(a, b):\n    return a + b\n",
    "Bonjour, ça va? Très bien, merci. Café crème, naïve façade.",
    "日本語のテキスト、中文文本。",
    "Emoji 😀 🎉 👍 and more 🎉🎉",
    "Speculative decoding drafts tokens and verifies them with the target model.",
] * 5

# Prompts of different kinds, used for both the tiny and the built-in model.
PROMPTS = {
    "summarise": (
        "Summarise this article in a short paragraph for a newsletter: The city council met on Tuesday to "
        "discuss the new bike lanes. After two hours of debate, members voted seven to two to build protected "
        "lanes on Main Street and Oak Avenue, starting next spring. Shop owners worried about parking, while "
        "parents said the lanes would make it safer for children to ride to school. The project will cost "
        "2.4 million dollars, paid for by a state grant."),
    "code": (
        "Rename the variable x to total in this Python function and return the code:\n\n"
        "def add_all(values):\n    x = 0\n    for v in values:\n        x += v\n    return x"),
    "translate": (
        "Translate this paragraph into French: The weather is nice today, so we are going to the park with the "
        "children. We will bring sandwiches, apples and a bottle of water, and we will come home before "
        "dinner."),
    "qa": "What is the capital of Japan, and what is it famous for?",
    "chat": "Hi! I'm planning a small birthday party for my friend. Any ideas?",
}


def device_under_test() -> str:
    """Where the engine fixtures load their models: SPECSCOPE_TEST_DEVICE ("cuda", "cuda:1", "mps"), "cpu" when
    unset. (Not named test_*: pytest would collect it wherever it is imported.)"""
    return os.environ.get("SPECSCOPE_TEST_DEVICE", "").strip() or "cpu"


def build_tiny_tokenizer():
    """A byte-level BPE tokenizer (~400 ids) with ChatML-style special tokens and a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(TINY_CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|im_end|>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def tiny_config(tokenizer, **overrides):
    from transformers import LlamaConfig
    values = dict(vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=2, intermediate_size=128, max_position_embeddings=256,
                  bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                  tie_word_embeddings=False)
    values.update(overrides)
    return LlamaConfig(**values)


def save_tiny_model(folder: Path, tokenizer, seed: int = 0, noise: float = 0.0, **config) -> Path:
    """Build a float32 tiny Llama with a fixed seed (optionally with Gaussian noise added to every weight)
    and save it with `tokenizer` so that engine.models.load.load_model(str(folder)) loads it."""
    from transformers import LlamaForCausalLM
    torch.manual_seed(seed)
    model = LlamaForCausalLM(tiny_config(tokenizer, **config)).eval()
    if noise:
        generator = torch.Generator().manual_seed(seed + 1)
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(torch.randn(parameter.shape, generator=generator) * noise)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


class ScriptedDrafter(Drafter):
    """A Drafter that proposes what it is told. `script` is a list, one entry per decoding round: a list of
    ids (verified as a one-hot draft) or a Proposal (with p_draft rows). Rounds past the script draft nothing.
    It records every call so that tests can check what the engine asked and told it."""

    name = "scripted"
    free_to_propose = False
    note = None

    def __init__(self, script):
        self.script = list(script)
        self.contexts: list[list[int]] = []
        self.ks: list[int] = []
        self.observed: list[int] = []
        self.began = 0
        self.released = 0

    def begin(self, sampling, generator) -> None:
        self.began += 1

    def propose(self, context_ids: list[int], k: int) -> Proposal:
        self.contexts.append(list(context_ids))
        self.ks.append(k)
        entry = self.script.pop(0) if self.script else []
        if isinstance(entry, Proposal):
            return entry
        return Proposal(list(entry)[:k], None)

    def observe(self, n_accepted: int) -> None:
        self.observed.append(n_accepted)

    def release(self) -> None:
        self.released += 1


def factory_for(drafter):
    """A drafter_factory for Engine that always hands out `drafter`."""
    return lambda spec, target, draft=None, target_runner=None: drafter


def run(engine, prompt, **kwargs):
    """Drain a generation: (GenerationStarted, [RoundVerified…], GenerationFinished). `prompt` is a list of
    ids (generate_ids) or a conversation (generate)."""
    if isinstance(prompt, list) and (not prompt or isinstance(prompt[0], int)):
        events = list(engine.generate_ids(prompt, **kwargs))
    else:
        events = list(engine.generate(prompt, **kwargs))
    started, rounds, finished = events[0], events[1:-1], events[-1]
    assert isinstance(started, GenerationStarted)
    assert all(isinstance(e, RoundVerified) for e in rounds)
    assert isinstance(finished, GenerationFinished)
    return started, rounds, finished


def check_round_invariants(rounds, finished) -> None:
    """What every stream of round events must satisfy, whatever the method."""
    assert [r.index for r in rounds] == list(range(len(rounds)))
    output: list[int] = []
    for r in rounds:
        assert 0 <= r.n_accepted <= len(r.draft_ids)
        assert len(r.p_target) == len(r.draft_ids) == len(r.p_draft) == len(r.draft_pieces)
        assert all(0.0 <= p <= 1.0 + 1e-6 for p in r.p_target)
        assert all(p is None or 0.0 <= p <= 1.0 + 1e-6 for p in r.p_draft)
        assert 0.0 <= r.p_target_of_target_id <= 1.0 + 1e-6
        expected = r.draft_ids[:r.n_accepted] + (r.target_id,)
        assert r.committed_ids == expected[:len(r.committed_ids)]
        assert len(r.committed_pieces) == len(r.committed_ids)
        output.extend(r.committed_ids)
        assert r.n_committed_total == len(output)
    assert finished.output_ids == tuple(output)
    stats = finished.stats
    assert stats.committed_tokens == len(output)
    assert stats.rounds == stats.target_passes == len(rounds)
    assert stats.drafted_tokens == sum(len(r.draft_ids) for r in rounds)
    assert stats.accepted_tokens == sum(r.n_accepted for r in rounds)


def save_tiny_hybrid_model(folder: Path, tokenizer, seed: int = 0, noise: float = 0.0, **config) -> Path:
    """Like save_tiny_model, a float32 tiny Qwen 3.5 text model: 3 Gated DeltaNet (linear-attention) layers and
    1 full-attention layer (the second, so that a 2-layer early exit has both kinds)."""
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
    values = dict(vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=4, intermediate_size=128,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16, linear_num_value_heads=4,
                  linear_num_key_heads=2, linear_key_head_dim=16, linear_value_head_dim=16,
                  linear_conv_kernel_dim=4, max_position_embeddings=256,
                  layer_types=["linear_attention", "full_attention", "linear_attention", "linear_attention"],
                  bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                  pad_token_id=tokenizer.eos_token_id, tie_word_embeddings=False)
    values.update(config)
    torch.manual_seed(seed)
    model = Qwen3_5ForCausalLM(Qwen3_5TextConfig(**values)).eval()
    if noise:
        generator = torch.Generator().manual_seed(seed + 1)
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(torch.randn(parameter.shape, generator=generator) * noise)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


class SteeredDrafter(Drafter):
    """A real drafter whose proposals are replaced by turns: the target's own continuation (accepted whole),
    a wrong first token (rejected at position 0), or its own guess. Its inner drafter proposes every round, so
    its state follows the engine's as it would unsteered."""

    def __init__(self, inner, continuation: list[int], prompt_length: int, vocab: int) -> None:
        self.inner, self.continuation, self.prompt_length, self.vocab = inner, continuation, prompt_length, vocab
        self.name, self.free_to_propose, self.note = inner.name, False, None
        self.turn = 0

    def begin(self, sampling, generator):
        self.inner.begin(sampling, generator)

    def propose(self, context_ids, k):
        proposal = self.inner.propose(context_ids, k)
        done = len(context_ids) - self.prompt_length
        own = self.continuation[done:done + k]
        self.turn += 1
        if self.turn % 3 == 1 and len(own) == k:
            ids = own
        elif self.turn % 3 == 2:
            ids = [(own[0] + 1) % self.vocab] + own[1:] if own else proposal.ids
        else:
            return proposal
        return type(proposal)(ids, None)

    def observe(self, n_accepted):
        self.inner.observe(n_accepted)

    def release(self):
        self.inner.release()


def random_prompt(seed: int, n: int = 8, vocab: int = 390) -> list[int]:
    """n random ids of the tiny vocabulary (past its special tokens), the same for a seed."""
    import random
    rng = random.Random(seed)
    return [rng.randrange(3, vocab) for _ in range(n)]


def exact_joint(model, prompt_ids: list[int], sampling) -> dict[tuple[int, int], float]:
    """The target's own probability of each first two new tokens (x1, x2) under `sampling`, from a fresh runner
    of the same model (the lossless-sampling tests' reference)."""
    import torch

    from engine.core.sampling import probabilities
    runner = model.new_runner()
    p1 = probabilities(runner.forward(prompt_ids, 1).clone(), sampling)[0]
    joint = {}
    for x1 in torch.nonzero(p1).flatten().tolist():
        runner.rollback(len(prompt_ids))
        p2 = probabilities(runner.forward([x1], 1).clone(), sampling)[0]
        joint.update({(x1, x2): float(p1[x1] * p2[x2]) for x2 in torch.nonzero(p2).flatten().tolist()})
    runner.release()
    return joint


def chi_square(counts: dict, probs: dict, n: int) -> float:
    """Pearson's statistic of `counts` (n draws) against the exact `probs` of every cell."""
    assert set(counts) <= set(probs), "a pair the target gives probability 0 was emitted"
    return sum((counts.get(cell, 0) - p * n) ** 2 / (p * n) for cell, p in probs.items())

