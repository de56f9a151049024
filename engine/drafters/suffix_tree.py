"""The suffix structure suffix decoding drafts from (Oliaro et al., "SuffixDecoding", arXiv 2411.04975; Arctic
Inference's suffix cache): token sequences, and for any pattern (the context's last tokens) how often it
occurred and how often each continuation followed it.

A depth-limited suffix tree answers exactly two questions at a node: its count (how many suffixes pass through
it: the occurrences of the pattern) and its children's counts (which token followed, how often). `SuffixTree`
answers the same questions from an index of each token's positions, narrowing a pattern's occurrences one token
at a time, so memory stays one entry per token (a Python node per suffix and depth would be tens of bytes per
token per level). Sequences are kept apart by a separator no token equals, so no match crosses two of them.

`speculate` is the paper's path speculation: for each match length m (1 … max_depth), the draft may be
min(k, m·spec_factor + spec_offset) long; from the matched occurrences it follows the most frequent continuation,
its probability the product of the frequencies on the way, and stops where that falls below min_token_prob. The
candidate with the highest score (the sum of its tokens' probabilities) wins; equal scores go to the longer
match. Pure Python, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SEPARATOR = -1  # between sequences: equals no token id


@dataclass(frozen=True, slots=True)
class Candidate:
    """A drafted path: its ids, each one's probability (the product of frequencies up to it), the path's score
    (their sum) and the length of the pattern it continues."""

    ids: tuple[int, ...] = ()
    probs: tuple[float, ...] = ()
    score: float = 0.0
    match_length: int = 0


@dataclass(frozen=True, slots=True)
class SpeculationLimits:
    """How far a match may be followed (the Arctic Inference knobs)."""

    max_depth: int = 24  # the longest pattern matched
    spec_factor: float = 1.0  # a draft is at most match length × this (+ spec_offset) tokens
    spec_offset: float = 0.0
    min_token_prob: float = 0.1  # stop where the path's probability falls below this


@dataclass(slots=True)
class SuffixTree:
    """Sequences of token ids and where each token occurs in them: closed ones (`add`: past replies, each ended
    by SEPARATOR) and at most one open one, last (`extend`: the conversation as it grows)."""

    tokens: list[int] = field(default_factory=list)  # the sequences, each closed one followed by SEPARATOR
    _positions: dict[int, list[int]] = field(default_factory=dict)  # token -> its positions in `tokens`
    n_sequences: int = 0
    _open: bool = False  # the last sequence is still growing

    def add(self, ids) -> None:
        """A finished sequence (a past reply)."""
        self.extend(ids)
        self.tokens.append(SEPARATOR)
        self._open = False

    def extend(self, ids) -> None:
        """More tokens at the end of the open sequence (the conversation as it grows), opening one if none is."""
        if not self._open:
            self.n_sequences += 1
            self._open = True
        positions, tokens = self._positions, self.tokens
        for token in ids:
            positions.setdefault(token, []).append(len(tokens))
            tokens.append(token)

    def clear(self) -> None:
        self.tokens.clear()
        self._positions.clear()
        self.n_sequences = 0
        self._open = False

    def __len__(self) -> int:
        """How many tokens it holds."""
        return sum(len(p) for p in self._positions.values())

    def occurrences(self, pattern) -> list[int]:
        """Where `pattern` ends in the sequences, each followed by something (a token or a sequence's end): an
        occurrence at the very end of the open sequence (the context matching itself) is not one.

        In [1, 2, 3, 1, 2, 4, 1, 2], [1, 2] ends at 1, 4 and 7; 7 is the end itself:

        >>> tree = SuffixTree()
        >>> tree.extend([1, 2, 3, 1, 2, 4, 1, 2])
        >>> tree.occurrences([1, 2])
        [1, 4]
        """
        if not pattern:
            return []
        last = len(self.tokens) - 1
        ends = [p for p in self._positions.get(pattern[-1], ()) if p < last]
        for back in range(2, len(pattern) + 1):
            ends = self._narrow(ends, pattern[-back], back)
        return ends

    def _narrow(self, ends: list[int], token: int, back: int) -> list[int]:
        """The occurrences in `ends` whose token `back` places before the end (1: the end itself) is `token`."""
        tokens = self.tokens
        return [p for p in ends if p - back + 1 >= 0 and tokens[p - back + 1] == token]

    def continuations(self, ends: list[int]) -> dict[int, int]:
        """How often each token followed the occurrences ending at `ends` (a sequence's end is no token).

        In [1, 2, 3, 1, 2, 4, 1, 2], 3 followed the 2 at 1 and 4 the 2 at 4:

        >>> tree = SuffixTree()
        >>> tree.extend([1, 2, 3, 1, 2, 4, 1, 2])
        >>> tree.continuations([1, 4])
        {3: 1, 4: 1}
        """
        counts: dict[int, int] = {}
        tokens, n = self.tokens, len(self.tokens)
        for p in ends:
            if p + 1 < n and tokens[p + 1] != SEPARATOR:
                counts[tokens[p + 1]] = counts.get(tokens[p + 1], 0) + 1
        return counts

    def speculate(self, context, k: int, limits: SpeculationLimits = SpeculationLimits()) -> Candidate:
        """The best path continuing `context`'s last tokens, at most k long (see the module's docstring). The
        longest match is followed first; a shorter one only while its length bound could beat the best score.

        Tokens [1, 2, 3, 1, 2, 4, 1, 2], context [1, 2]: the tail [1, 2] (match length 2, so at most 2 ids with
        spec_factor 1) occurred twice, followed once by 3 and once by 4; the tie goes to the later one, 4
        (probability 1/2), and 1 always followed that 4 (1/2 · 1): the path is [4, 1], score 1/2 + 1/2.

        >>> tree = SuffixTree()
        >>> tree.extend([1, 2, 3, 1, 2, 4, 1, 2])
        >>> tree.speculate([1, 2], k=3)
        Candidate(ids=(4, 1), probs=(0.5, 0.5), score=1.0, match_length=2)

        Three past replies [5, 6, 7], [5, 6, 8], [5, 6, 7] and the context [4, 5, 6]: [5, 6] matches them all,
        7 followed it two times in three (2/3), and each reply ends there:

        >>> tree = SuffixTree()
        >>> for reply in ([5, 6, 7], [5, 6, 8], [5, 6, 7]):
        ...     tree.add(reply)
        >>> tree.extend([4, 5, 6])
        >>> tree.speculate([4, 5, 6], k=4).ids
        (7,)
        """
        best = Candidate()
        if k < 1 or not context or not self.tokens:
            return best
        tail = list(context[-limits.max_depth:])
        last = len(self.tokens) - 1
        matches = [[p for p in self._positions.get(tail[-1], ()) if p < last]]  # occurrences of the last 1, 2, …
        while matches[-1] and len(matches) < len(tail):
            matches.append(self._narrow(matches[-1], tail[-len(matches) - 1], len(matches) + 1))
        for match_length in range(len(matches), 0, -1):
            length = min(k, int(match_length * limits.spec_factor + limits.spec_offset + 1e-6))
            if length <= best.score:  # a path's score is at most its length: no shorter match can win
                break
            if matches[match_length - 1]:
                candidate = self._follow(matches[match_length - 1], length, limits.min_token_prob, match_length)
                if candidate.ids and candidate.score > best.score:
                    best = candidate
        return best

    def branches(self, context, match_length: int, length: int, budget: int, min_token_prob: float
                 ) -> tuple[list[int], list[int], list[float]]:
        """Arctic Inference's tree speculation: the continuations of the occurrences of `context`'s last
        `match_length` tokens, best first by probability (a node's: its parent's × the share of the parent's
        occurrences its token followed), at most `budget` nodes and `length` deep, none below min_token_prob.
        Returns ids, parents (engine.core.tree_shape's) and probabilities; parents come first.

        In [1, 2, 3, 1, 2, 4, 1, 2] from the tail [1, 2]: 3 and 4 followed it once each (1/2), then 1 followed each:

        >>> tree = SuffixTree()
        >>> tree.extend([1, 2, 3, 1, 2, 4, 1, 2])
        >>> tree.branches([1, 2], match_length=2, length=2, budget=4, min_token_prob=0.1)
        ([3, 4, 1, 1], [-1, -1, 0, 1], [0.5, 0.5, 0.5, 0.5])
        """
        import heapq
        import itertools
        order = itertools.count()  # ties: the earlier offered first
        tokens, n = self.tokens, len(self.tokens)
        ids: list[int] = []
        parents: list[int] = []
        probs: list[float] = []
        waiting: list[tuple] = []  # (−probability, order, token, parent node, the parent's occurrences, depth)

        def offer(node: int, ends: list[int], prob: float, depth: int) -> None:
            if depth < length and ends:
                for token, count in self.continuations(ends).items():
                    if prob * count / len(ends) >= min_token_prob:
                        heapq.heappush(waiting, (-prob * count / len(ends), next(order), token, node,
                                                 ends, depth))

        offer(-1, self.occurrences(list(context[-match_length:])), 1.0, 0)
        while waiting and len(ids) < budget:
            neg_prob, _, token, parent, ends, depth = heapq.heappop(waiting)
            ids.append(token)
            parents.append(parent)
            probs.append(-neg_prob)
            offer(len(ids) - 1, [p + 1 for p in ends if p + 1 < n and tokens[p + 1] == token], -neg_prob, depth + 1)
        return ids, parents, probs

    def _follow(self, ends: list[int], length: int, min_token_prob: float, match_length: int) -> Candidate:
        """The most frequent continuation of the occurrences `ends`, up to `length` tokens, while its probability
        stays at or above min_token_prob. Equal counts go to the token that followed most recently.

        In [1, 2, 3, 1, 2, 4, 1, 2] from the 2s at 1 and 4: 3 and 4 followed once each, the later (4) wins at 1/2,
        then 1 followed that 4 (1/2 · 1 = 1/2): [4, 1] within length 2. With min_token_prob 0.6 even 4 is too
        rare, and the path is empty.
        """
        tokens, n = self.tokens, len(self.tokens)
        ids: list[int] = []
        probs: list[float] = []
        prob = 1.0
        while len(ids) < length and ends:
            counts = self.continuations(ends)
            if not counts:
                break
            latest = {tokens[p + 1]: p for p in ends if p + 1 < n}
            token = max(counts, key=lambda t: (counts[t], latest[t]))
            prob *= counts[token] / len(ends)
            if prob < min_token_prob:
                break
            ids.append(token)
            probs.append(prob)
            ends = [p + 1 for p in ends if p + 1 < n and tokens[p + 1] == token]
        return Candidate(tuple(ids), tuple(probs), sum(probs), match_length)


def best_of(*candidates: Candidate) -> Candidate:
    """The candidate with the highest score; the first of equals (the conversation's own tree comes first)."""
    best = Candidate()
    for candidate in candidates:
        if candidate.ids and candidate.score > best.score:
            best = candidate
    return best
