"""Method `ngram-mod`: llama.cpp's `--spec-type ngram-mod` (its `--spec-default`), written here from its
semantics so that a run compares with `llama-server --spec-type ngram-mod` on the same prompt. No model, no
distribution.

The pool is a fixed-size table indexed by a hash of an n-gram (n = n_match); each slot holds the token that
last followed an n-gram of that hash (collisions overwrite, lookups don't check the key). A draft chains
lookups: the last n_match tokens give the next token, which shifts into the key, up to n_max tokens; a
chain that breaks before n_min tokens drafts nothing. As in llama.cpp: the pool outlives a generation (each
one adds its prompt's n-grams; generated text is added in chunks of 32 tokens), it is emptied when more than a
quarter of it is used at a generation's start, and after five drafts in a row with under a quarter accepted.
The loop's k trims a draft the way llama-server's room left does: with k ≥ n_max the drafts are llama.cpp's.
Touches no model.
"""

from __future__ import annotations

from engine.core.drafting import Drafter, Proposal
from engine.core.errors import ConfigError
from engine.core.methods import MethodSpec, ParamSpec

POOL_SIZE = 4 * 1024 * 1024  # llama.cpp's table size: a power of two, so the slot is the hash's low bits
_SLOT_MASK = POOL_SIZE - 1
_HASH_FACTOR = 6364136223846793005  # llama.cpp's 64-bit LCG multiplier (its hash of an n-gram)
ADD_CHUNK = 32  # generated n-grams join the pool once this many tokens are new
RESET_OCCUPANCY = 0.25  # a pool fuller than this at a generation's start is emptied
LOW_ACCEPTANCE, LOW_STREAK = 0.25, 5  # this many drafts in a row accepted below this fraction empty it
SHORT_N_MATCH = 16  # llama.cpp warns of poor drafts below this


class NgramModPool:
    """n-gram hash → the token that last followed it, in a table of POOL_SIZE slots (a dict holds the used
    ones: an absent slot is llama.cpp's EMPTY)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.slots: dict[int, int] = {}

    def slot(self, tokens: list[int], start: int) -> int:
        """The slot of the n-gram tokens[start:start+n] (llama.cpp's 64-bit hash modulo the table size, which
        only its low bits decide)."""
        value = 0
        for token in tokens[start:start + self.n]:
            value = (value * _HASH_FACTOR + token) & _SLOT_MASK
        return value

    def add(self, tokens: list[int], start: int) -> None:
        """The n-gram at `start` is followed by tokens[start + n]."""
        self.slots[self.slot(tokens, start)] = tokens[start + self.n]

    def get(self, tokens: list[int], start: int) -> int | None:
        return self.slots.get(self.slot(tokens, start))

    @property
    def occupancy(self) -> float:
        return len(self.slots) / POOL_SIZE

    def reset(self) -> None:
        self.slots.clear()


class NgramModDrafter(Drafter):
    name = "ngram-mod"
    free_to_propose = True  # lookups: proposing n_max and trimming costs nothing

    def __init__(self, n_match: int = 24, n_min: int = 48, n_max: int = 64) -> None:
        self.n_min, self.n_max = n_min, n_max
        self.pool = NgramModPool(n_match)
        self.note: str | None = None
        self.warning: str | None = None if n_match >= SHORT_N_MATCH else (
            f"ngram-mod n_match={n_match} is short: llama.cpp warns of poor drafts below {SHORT_N_MATCH}")
        self._starting = False  # a generation began: its prompt joins the pool at the first proposal
        self._i_last = 0  # n-grams starting before this index of the history are in the pool
        self._n_draft_last = 0
        self._n_low = 0  # drafts in a row accepted below LOW_ACCEPTANCE
        self._drafted = False  # the last proposal drafted something (observe's count is about it)

    def begin(self, sampling, generator) -> None:
        self._starting = True

    def _start(self, prompt: list[int]) -> None:
        """llama.cpp's begin(prompt): the prompt's n-grams join the pool; a pool too full is emptied."""
        self._i_last, self._n_draft_last = 0, 0
        n = self.pool.n
        if len(prompt) < n:
            return
        for start in range(len(prompt) - n):
            self.pool.add(prompt, start)
        self._i_last = len(prompt) - n
        if self.pool.occupancy > RESET_OCCUPANCY:
            self.pool.reset()

    def draft(self, history: list[int], id_last: int) -> list[int]:
        """What llama.cpp drafts after `history` (the ids the target has seen) and `id_last` (the token it just
        chose): the chained lookups from the last n_match tokens, or [] for a chain shorter than n_min.

        n_match=2, history [1, 2, 3, 4, 5, 1] (its n-grams in the pool: [1, 2]→3, [2, 3]→4, [3, 4]→5, [4, 5]→1),
        id_last 2: [1, 2] gives 3, [2, 3] gives 4, [3, 4] gives 5, [4, 5] gives 1, and n_max=4 ends the chain:
        [3, 4, 5, 1]. With n_min=3, history [1, 2, 3, 1] and id_last 2, the chain breaks at [3, 1] (never seen)
        after 3, 1: two ids, fewer than n_min, so nothing is drafted (`propose` runs both).
        """
        self._n_draft_last = 0
        n, length = self.pool.n, len(history)
        if length < n:
            return []
        if self._i_last + ADD_CHUNK < length:
            for start in range(self._i_last, length - n):
                self.pool.add(history, start)
            self._i_last = length - n
        window = history[length - n + 1:] + [id_last]
        drafted: list[int] = []
        for i in range(self.n_max):
            token = self.pool.get(window, i)
            if token is None:
                if i < self.n_min:
                    return []
                break
            window.append(token)
            drafted.append(token)
        self._n_draft_last = len(drafted)
        return drafted

    def propose(self, context_ids: list[int], k: int) -> Proposal:
        """`draft` of the context (its last id is id_last; at a generation's start its n-grams join the pool
        first), as llama.cpp drafts it: up to n_max ids, which the loop trims to k.

        >>> drafter = NgramModDrafter(n_match=2, n_min=1, n_max=4)
        >>> drafter.begin(sampling=None, generator=None)  # a generation starts: its prompt joins the pool
        >>> drafter.propose([1, 2, 3, 4, 5, 1, 2], k=8).ids
        [3, 4, 5, 1]
        >>> drafter = NgramModDrafter(n_match=2, n_min=3, n_max=4)
        >>> drafter.begin(sampling=None, generator=None)
        >>> drafter.propose([1, 2, 3, 1, 2], k=8).ids
        []
        """
        if len(context_ids) < 2:
            return Proposal.empty()
        history, id_last = context_ids[:-1], context_ids[-1]
        if self._starting:
            self._starting = False
            self._start(history)
        drafted = self.draft(history, id_last)
        self._drafted = bool(drafted)
        return Proposal(drafted, None)

    def observe(self, n_accepted: int) -> None:
        """llama.cpp's accept: only after a draft; a streak of poorly accepted drafts empties the pool."""
        if not self._drafted:
            return
        self._drafted = False
        if self._n_draft_last == 0:
            return
        if n_accepted / self._n_draft_last >= LOW_ACCEPTANCE:
            self._n_low = 0
            return
        self._n_low += 1
        if self._n_low >= LOW_STREAK:
            self.pool.reset()
            self._n_low, self._i_last = 0, 0

    def release(self) -> None:
        self.pool.reset()
        self._i_last = self._n_draft_last = self._n_low = 0
        self._starting = self._drafted = False


def llama_server_args(spec, engine) -> tuple[str, ...]:
    """llama-server's options for the same setting; ConfigError where it has none (it drafts up to n_max at
    once, so its drafts equal ours only where spec.k ≥ n_max)."""
    if spec.k < spec.param("n_max"):
        raise ConfigError(f"llama-server's ngram-mod drafts up to n_max={spec.param('n_max')} tokens at once, ours "
                          f"at most k={spec.k}: give k ≥ n_max (or a smaller n_max) to compare like with like")
    return ("--spec-type", NgramModDrafter.name,
            "--spec-ngram-mod-n-match", str(spec.param("n_match")),
            "--spec-ngram-mod-n-min", str(spec.param("n_min")),
            "--spec-ngram-mod-n-max", str(spec.param("n_max")))


METHOD = MethodSpec(
    name=NgramModDrafter.name, label="n-gram pool (llama.cpp ngram-mod)",
    description="llama.cpp's ngram-mod: chains lookups in a hashed pool of the n-grams seen so far, across "
                "chats; drafts only runs of at least n_min tokens.",
    params=(ParamSpec("n_match", int, 24, "ngram-mod: the n-gram length looked up (llama.cpp's default 24)",
                      min=1, max=1024, flag="--spec-ngram-mod-n-match", label="n-gram looked up"),
            ParamSpec("n_min", int, 48, "ngram-mod: a shorter chain drafts nothing (llama.cpp's default 48)",
                      min=0, max=1024, flag="--spec-ngram-mod-n-min", label="shortest draft"),
            ParamSpec("n_max", int, 64, "ngram-mod: the longest chain (llama.cpp's default 64; k trims it as "
                      "llama-server's room left does)", min=0, max=1024, flag="--spec-ngram-mod-n-max",
                      label="longest draft")),
    cache_params=("n_match", "n_min", "n_max"),
    build=lambda spec, target, draft, target_runner: NgramModDrafter(
        spec.param("n_match"), spec.param("n_min"), spec.param("n_max")),
    sweep_rank=4, lookup=True, llama_server_args=llama_server_args)
