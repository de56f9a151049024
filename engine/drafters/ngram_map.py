"""Method `ngram-map`: llama.cpp's `--spec-type ngram-map-k` (and, with four_values, `ngram-map-k4v`), written
here from its semantics so that a run compares with llama-server's on the same prompt. No model, no
distribution.

The key is the last size_n tokens; its latest earlier occurrence (found through a hash of n-grams to their
position, else by a scan of the part not hashed yet) gives the draft: the size_m tokens after it. Each key keeps
statistics: how often it was hit and, for the values, how many tokens of its last draft were accepted (the
next draft from that value is no longer). With four_values a key also counts up to four different m-grams that
followed it; it drafts only after min_hits hits and when one m-gram is at least twice as frequent as the
others together (as llama.cpp does, the draft is then what followed the matched occurrence). As in llama.cpp
the map outlives a generation: a new prompt shorter than the text seen drops what was learnt past it.
The loop's k trims a draft the way llama-server's room left does. Touches no model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.core.drafting import Drafter, Proposal
from engine.core.errors import ConfigError
from engine.core.methods import MethodSpec, ParamSpec

KEY_MAP_SIZE = 262144  # llama.cpp's hash → position table: a power of two, so the slot is the hash's low bits
_SLOT_MASK = KEY_MAP_SIZE - 1
_HASH_FACTOR = 2654435761  # llama.cpp's 32-bit LCG multiplier
MAX_VALUES = 4  # the m-grams counted after one key
MAX_COUNT = 16380  # where a hit count stops


def key_slot(tokens: list[int], start: int, n: int) -> int:
    value = 0
    for token in tokens[start:start + n]:
        value = (value * _HASH_FACTOR + token) & _SLOT_MASK
    return value


@dataclass(slots=True)
class MapValue:
    """One m-gram seen after a key: where it starts (0: an unused slot), how often, and how many tokens of the
    last draft from it were accepted."""

    start: int = 0
    count: int = 0
    n_accepted: int = -1


@dataclass(slots=True)
class MapKey:
    start: int  # where the key n-gram occurs in the text
    counted_to: int = 0  # the values are counted over occurrences up to here
    hits: int = 0
    values: list[MapValue] = field(default_factory=list)


class NgramMap:
    """llama.cpp's common_ngram_map: begin(prompt) at a generation's start, draft(history, id_last) each round,
    accept(n_accepted) after a draft was verified."""

    def __init__(self, size_n: int, size_m: int, key_only: bool, min_hits: int) -> None:
        self.n, self.m, self.key_only, self.min_hits = size_n, size_m, key_only, min_hits
        self.keys: list[MapKey] = []
        self.positions: dict[int, int] = {}  # key_slot → a position of an n-gram with that hash
        self.hashed_to = 0  # n-grams starting after here are not hashed yet
        self.begin_length = 0  # the prompt's length at the last begin
        self.checked_to = 0  # the history's length at the last begin or draft
        self.last: tuple[int, int] | None = None  # (key, value) the last draft came from

    def begin(self, prompt: list[int]) -> None:
        """A generation starts from `prompt`: where it is shorter than the text seen, what was learnt past it
        (less one key and value's length) is dropped."""
        length = len(prompt)
        cleanup = self.begin_length
        if cleanup > length:
            cleanup = length - self.n - self.m if length > self.n + self.m else 0
        if length < self.checked_to:
            self.positions = {slot: at for slot, at in self.positions.items() if at < cleanup}
            self.hashed_to = cleanup - 1 if cleanup > 0 else 0
            self._drop_from(cleanup)
        self.checked_to = self.begin_length = length

    def _drop_from(self, cleanup: int) -> None:
        for index in range(len(self.keys) - 1, -1, -1):
            key = self.keys[index]
            if key.start >= cleanup:
                del self.keys[index]
                continue
            if self.key_only:
                continue
            for slot in range(MAX_VALUES - 1, -1, -1):
                if key.values[slot].start != 0 and key.values[slot].start >= cleanup:
                    del key.values[slot]  # the later values move left; the freed last slot keeps n_accepted
                    key.values.append(MapValue(0, 0, key.values[-1].n_accepted))
            if key.values[0].start == 0:
                del self.keys[index]

    def _scan(self, text: list[int], pattern: list[int], high: int, low: int) -> int:
        """The latest position in (low, high] where `pattern` occurs, else 0."""
        n, first = self.n, pattern[0]
        for at in range(high, low, -1):
            if text[at] == first and text[at:at + n] == pattern:
                return at
        return 0

    def _find(self, text: list[int], pattern: list[int]) -> int:
        """Where the key occurred before: through the hash table, else by scanning what is not hashed yet."""
        n, m = self.n, self.m
        latest = len(text) - n - m - 1  # a match must leave room for its value before the end
        at = self.positions.get(key_slot(pattern, 0, n), 0)
        if at != 0 and at < latest and text[at:at + n] == pattern:
            return at
        found = 0
        if self.begin_length > n + m + 1:
            found = self._scan(text, pattern, self.begin_length - n - m - 1, self.hashed_to)
        if found == 0:
            found = self._scan(text, pattern, latest, max(self.begin_length, self.hashed_to))
        return found

    def _hash_new(self, text: list[int]) -> None:
        """Positions not hashed yet join the table, in _find's order; a slot keeps its first position."""
        n, m = self.n, self.m
        latest = len(text) - n - m - 1
        spans = [(latest, max(self.begin_length, self.hashed_to))]
        if self.begin_length > n + m + 1:
            spans.insert(0, (self.begin_length - n - m - 1, self.hashed_to))
        for high, low in spans:
            for at in range(high, low, -1):
                self.positions.setdefault(key_slot(text, at, n), at)
        self.hashed_to = max(latest, self.hashed_to)

    def _entry(self, text: list[int], pattern: list[int], match: int) -> int:
        """The index of the key's statistics (new ones for a key first matched)."""
        n = self.n
        for index, key in enumerate(self.keys):
            if text[key.start:key.start + n] == pattern:
                return index
        self.keys.append(MapKey(match, values=[MapValue(0, 0, self.m) for _ in range(MAX_VALUES)]))
        return len(self.keys) - 1

    def _count_values(self, text: list[int], pattern: list[int], key: MapKey, match: int) -> None:
        """Count the m-grams after each occurrence of the key from where counting stopped to `match`."""
        n, m = self.n, self.m
        for at in range(key.counted_to, match + 1):
            if text[at] != pattern[0] or text[at:at + n] != pattern:
                continue
            start = at + n
            for value in key.values:
                if value.start == 0:
                    value.start, value.count, value.n_accepted = start, 0, m
                elif text[start:start + m] != text[value.start:value.start + m]:
                    continue
                value.count = min(value.count + 1, MAX_COUNT)
                break
        key.counted_to = match

    @staticmethod
    def _dominant(key: MapKey) -> int | None:
        """The value slot seen at least twice as often as the others together, else None."""
        best = max(range(MAX_VALUES), key=lambda slot: (key.values[slot].count, -slot))
        most = key.values[best].count
        others = sum(v.count for slot, v in enumerate(key.values) if slot != best)
        return None if others > 0 and most < 2 * others else best

    def draft(self, history: list[int], id_last: int) -> list[int]:
        """What llama.cpp drafts after `history` (the ids the target has seen) and `id_last` (its last token).

        size_n=2, size_m=3: the key is [1, 2] (the history's last token and id_last); it occurred before at 1,
        so the size_m ids after it, from 3 on, are drafted. An occurrence at position 0 is never found (0
        stands for "none", as in llama.cpp), and a history shorter than 2·size_n + size_m drafts nothing:

        >>> NgramMap(size_n=2, size_m=3, key_only=True, min_hits=1).draft([9, 1, 2, 3, 4, 5, 6, 1], id_last=2)
        [3, 4, 5]
        >>> NgramMap(size_n=2, size_m=3, key_only=True, min_hits=1).draft([1, 2, 3, 4, 5, 6, 7, 1], id_last=2)
        []
        """
        self.last = None
        n, m, length = self.n, self.m, len(history)
        if length < 2 * n + m:
            return []
        self.checked_to = length
        pattern = history[length - n + 1:] + [id_last]
        match = self._find(history, pattern)
        self._hash_new(history)
        if match == 0:
            return []
        index = self._entry(history, pattern, match)
        key = self.keys[index]
        key.hits = min(key.hits + 1, MAX_COUNT)
        slot = 0
        if not self.key_only:
            if key.hits < self.min_hits:
                return []
            self._count_values(history, pattern, key, match)
            slot = self._dominant(key)
            if slot is None:
                return []
        self.last = (index, slot)
        size = max(0, min(m, key.values[slot].n_accepted))
        return history[match + n:match + n + size]

    def accept(self, n_accepted: int) -> None:
        if self.last is not None:
            key, slot = self.last
            self.keys[key].values[slot].n_accepted = n_accepted


class NgramMapDrafter(Drafter):
    name = "ngram-map"
    free_to_propose = True  # lookups: proposing size_m and trimming costs nothing
    note: str | None = None

    def __init__(self, size_n: int = 12, size_m: int = 48, min_hits: int = 1, four_values: bool = False) -> None:
        self.settings = (size_n, size_m, not four_values, min_hits)
        self.map = NgramMap(*self.settings)
        self._starting = False
        self._drafted = False

    def begin(self, sampling, generator) -> None:
        self._starting = True

    def propose(self, context_ids: list[int], k: int) -> Proposal:
        """NgramMap.draft of the context (its last id is id_last), as llama.cpp drafts it: size_m ids, which the
        loop trims to k.

        >>> drafter = NgramMapDrafter(size_n=2, size_m=3)
        >>> drafter.begin(sampling=None, generator=None)
        >>> drafter.propose([9, 1, 2, 3, 4, 5, 6, 1, 2], k=8).ids
        [3, 4, 5]
        """
        if len(context_ids) < 2:
            return Proposal.empty()
        history, id_last = context_ids[:-1], context_ids[-1]
        if self._starting:
            self._starting = False
            self.map.begin(history)
        drafted = self.map.draft(history, id_last)
        self._drafted = bool(drafted)
        return Proposal(drafted, None)

    def observe(self, n_accepted: int) -> None:
        """llama.cpp's accept: only after a draft was verified."""
        if self._drafted:
            self._drafted = False
            self.map.accept(n_accepted)

    def release(self) -> None:
        self.map = NgramMap(*self.settings)
        self._starting = self._drafted = False


def llama_server_type(spec) -> str:
    return "ngram-map-k4v" if spec.param("four_values") else "ngram-map-k"


def llama_server_args(spec, engine) -> tuple[str, ...]:
    """llama-server's options for the same setting; ConfigError where it has none (it drafts size_m tokens at
    once, so its drafts equal ours only where spec.k ≥ size_m)."""
    if spec.k < spec.param("size_m"):
        raise ConfigError(f"llama-server's ngram-map drafts size_m={spec.param('size_m')} tokens at once, ours at "
                          f"most k={spec.k}: give k ≥ size_m (or a smaller size_m) to compare like with like")
    kind = llama_server_type(spec)
    return ("--spec-type", kind, f"--spec-{kind}-size-n", str(spec.param("size_n")),
            f"--spec-{kind}-size-m", str(spec.param("size_m")),
            f"--spec-{kind}-min-hits", str(spec.param("min_hits")))


METHOD = MethodSpec(
    name=NgramMapDrafter.name, label="n-gram map (llama.cpp ngram-map)",
    description="llama.cpp's ngram-map-k: drafts what followed the last n-gram's latest earlier occurrence, "
                "no longer than last time accepted; four values: ngram-map-k4v.",
    params=(ParamSpec("size_n", int, 12, "ngram-map: the n-gram length looked up (llama.cpp's default 12)",
                      min=1, max=1024, flag="--spec-ngram-map-size-n", label="n-gram looked up"),
            ParamSpec("size_m", int, 48, "ngram-map: the draft's length, and the m-gram counted as a value "
                      "(llama.cpp's default 48)", min=1, max=1024, flag="--spec-ngram-map-size-m",
                      label="draft length"),
            ParamSpec("min_hits", int, 1, "ngram-map: hits of a key before it drafts, with four values "
                      "(llama.cpp's default 1)", min=1, max=MAX_COUNT, flag="--spec-ngram-map-min-hits",
                      label="least hits"),
            ParamSpec("four_values", bool, False, "ngram-map: count up to four m-grams after each key and draft "
                      "only a dominant one (llama.cpp's ngram-map-k4v)", flag="--spec-ngram-map-k4v",
                      label="four values (k4v)")),
    cache_params=("size_n", "size_m", "min_hits", "four_values"),
    build=lambda spec, target, draft, target_runner: NgramMapDrafter(
        spec.param("size_n"), spec.param("size_m"), spec.param("min_hits"), spec.param("four_values")),
    sweep_rank=5, lookup=True, llama_server_args=llama_server_args)
