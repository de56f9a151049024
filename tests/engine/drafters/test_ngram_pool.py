"""llama.cpp's n-gram pool methods as written in engine/drafters/ngram_mod.py and ngram_map.py, on hand-made
token lists: what each drafts after a given context (n-gram sizes, chains, n_min, min hits, the dominance rule,
the accepted-length limit, the chunked pool updates and resets), that it only learns after a verified draft,
and that bad parameters are refused with one line. No model."""

from __future__ import annotations

import pytest

import engine.drafters  # noqa: F401  (registers the methods)
from engine.core.config import SpecConfig, parse_spec
from engine.core.errors import ConfigError
from engine.core.methods import method_names, method_spec
from engine.drafters.ngram_map import NgramMap, NgramMapDrafter, llama_server_args as map_args
from engine.drafters.ngram_mod import (ADD_CHUNK, LOW_STREAK, NgramModDrafter, NgramModPool,
                                       llama_server_args as mod_args)

# a text whose middle part repeats: 10 11 12 13 14 appears twice, what follows it differs after the second
TEXT = [1, 2, 10, 11, 12, 13, 14, 3, 4, 5, 6, 10, 11, 12, 13, 14, 7, 8]


def propose(drafter, context: list[int], k: int = 64) -> list[int]:
    return drafter.propose(context, k).ids


# ------------------------------------------------------------------ ngram-mod

def test_mod_pool_maps_an_ngram_to_what_followed_it_last():
    pool = NgramModPool(2)
    text = [5, 6, 7, 5, 6, 9]
    for start in range(len(text) - 2):
        pool.add(text, start)
    assert pool.get([5, 6], 0) == 9  # the later occurrence overwrote the earlier
    assert pool.get([6, 7], 0) == 5 and pool.get([7, 7], 0) is None
    assert pool.slot([5, 6], 0) == (5 * 6364136223846793005 + 6) % (4 * 1024 * 1024)  # llama.cpp's hash


def test_mod_drafts_a_chain_of_lookups_from_the_prompt():
    drafter = NgramModDrafter(n_match=2, n_min=1, n_max=8)
    drafter.begin(None, None)
    prompt = [1, 2, 3, 4, 5, 6, 9, 9, 1, 2]
    # after "… 1 2" and the sampled 3: the key (2, 3) → 4 → (3, 4) → 5 → … until the pool has no next
    assert propose(drafter, prompt + [3]) == [4, 5, 6, 9, 9, 1, 2, 3]
    assert drafter.propose(prompt + [3], 3).ids[:3] == [4, 5, 6]  # the loop trims to k


def fresh_mod(**params) -> NgramModDrafter:
    drafter = NgramModDrafter(**params)
    drafter.begin(None, None)
    return drafter


def test_mod_a_chain_shorter_than_n_min_drafts_nothing_and_n_max_caps_it():
    # the pool from this prompt: (1,2)→3 (2,3)→4 (3,4)→5 (4,5)→6 (5,6)→0 (6,0)→0 (0,0)→1; (0,1) is its last
    # n-gram, not added: after the sampled 2 the chain from (1,2) is 7 tokens long
    prompt, sampled = [1, 2, 3, 4, 5, 6, 0, 0, 1], 2
    assert propose(fresh_mod(n_match=2, n_min=7, n_max=16), prompt + [sampled]) == [3, 4, 5, 6, 0, 0, 1]
    assert propose(fresh_mod(n_match=2, n_min=8, n_max=16), prompt + [sampled]) == []
    assert propose(fresh_mod(n_match=2, n_min=2, n_max=3), prompt + [sampled]) == [3, 4, 5]
    assert propose(fresh_mod(n_match=2, n_min=1, n_max=16), prompt + [9]) == []  # (1, 9) was never seen


def test_mod_n_match_is_the_key_length():
    prompt = [7, 1, 2, 3, 8, 1, 2]  # "1 2 3" then "8 1 2": with n_match 2 the key (2, x) …
    two = NgramModDrafter(n_match=2, n_min=1, n_max=2)
    two.begin(None, None)
    assert propose(two, prompt + [3]) == [8, 1]  # (2,3) → 8, (3,8) → 1
    three = NgramModDrafter(n_match=3, n_min=1, n_max=2)
    three.begin(None, None)
    assert propose(three, [7, 1, 2, 3, 8, 9, 2] + [3]) == []  # (9, 2, 3) never seen
    assert propose(three, [7, 1, 2, 3, 8, 9, 1, 2] + [3]) == [8, 9]  # (1, 2, 3) → 8, (2, 3, 8) → 9


def test_mod_generated_text_joins_the_pool_in_chunks():
    drafter = fresh_mod(n_match=2, n_min=1, n_max=1)
    assert propose(drafter, [1, 2, 3] + [4]) == []  # the prompt [1, 2, 3] is in the pool
    text = [1, 2, 3, 4, 50, 51, 52] + list(range(60, 60 + 25))  # 32 ids, then the key (50, 51) again
    assert propose(drafter, text + [50, 51]) == []  # 33 ids seen: not more than 32 past the last addition
    assert propose(drafter, text + [50, 51, 52, 50, 51]) == [52]  # 36: the new n-grams were added


def test_mod_a_streak_of_rejected_drafts_empties_the_pool():
    drafter = fresh_mod(n_match=2, n_min=1, n_max=4)
    context = [1, 2, 3, 4, 5, 1, 2]
    for _ in range(LOW_STREAK - 1):
        assert propose(drafter, context) == [3, 4, 5, 1]
        drafter.observe(0)
    assert propose(drafter, context) == [3, 4, 5, 1]
    drafter.observe(1)  # 1/4 is not low: the streak starts over
    for _ in range(LOW_STREAK - 1):
        assert propose(drafter, context) == [3, 4, 5, 1]
        drafter.observe(0)
    assert drafter.pool.slots
    assert propose(drafter, context) == [3, 4, 5, 1]
    drafter.observe(0)
    assert not drafter.pool.slots  # the fifth low draft in a row emptied it
    assert propose(drafter, context) == []  # refilled once more than 32 ids are past its start
    long_context = context + list(range(60, 90)) + [1, 2]
    assert propose(drafter, long_context) == [60, 61, 62, 63]  # the later (1, 2) overwrote the first


def test_mod_observe_counts_only_after_a_draft():
    drafter = NgramModDrafter(n_match=2, n_min=1, n_max=4)
    drafter.begin(None, None)
    context = [1, 2, 3, 4, 5, 1, 2]
    for _ in range(2 * LOW_STREAK):
        assert propose(drafter, context) == [3, 4, 5, 1]
        drafter.observe(3)  # a good draft …
        drafter.observe(0)  # … then rounds that drafted nothing (the prefill, the last token)
    assert drafter.pool.slots


def test_mod_pool_outlives_a_generation_and_release_empties_it():
    drafter = NgramModDrafter(n_match=2, n_min=1, n_max=2)
    drafter.begin(None, None)
    assert propose(drafter, [1, 2, 3, 4, 5, 6] + [7]) == []
    drafter.begin(None, None)  # another chat: what the first prompt taught stays
    assert propose(drafter, [9, 9, 2] + [3]) == [4, 5]
    drafter.release()
    drafter.begin(None, None)
    assert propose(drafter, [9, 9, 2] + [3]) == []


def test_mod_warns_of_a_short_n_match_as_llama_cpp_does():
    assert NgramModDrafter().warning is None and NgramModDrafter(n_match=4).note is None
    assert "16" in NgramModDrafter(n_match=4).warning


# ------------------------------------------------------------------ ngram-map

def map_draft(map_: NgramMap, text: list[int]) -> list[int]:
    return map_.draft(text[:-1], text[-1])


def fresh_map(size_n: int, size_m: int, key_only: bool = True, min_hits: int = 1) -> NgramMap:
    map_ = NgramMap(size_n, size_m, key_only, min_hits)
    map_.begin([])
    return map_


def test_map_k_drafts_what_followed_the_latest_earlier_occurrence():
    text = [1, 5, 6, 2, 2, 2, 5, 6, 3, 3, 3, 0, 0, 0, 5, 6]
    assert map_draft(fresh_map(2, 3), text) == [3, 3, 3]  # the later (5, 6) wins over the first
    assert map_draft(fresh_map(2, 3), [1, 5, 6, 2, 2, 2, 9, 9, 9, 9, 5, 6]) == [2, 2, 2]
    assert map_draft(fresh_map(3, 3), text) == []  # (0, 5, 6) was never seen
    assert map_draft(fresh_map(2, 2), text) == [3, 3]


def test_map_needs_room_for_the_key_twice_and_a_value():
    map_ = fresh_map(2, 3)
    assert map_draft(map_, [0, 5, 6, 1, 5, 6]) == []  # a history of 5 ids < 2·2 + 3
    assert map_draft(map_, [0, 5, 6, 1, 2, 3, 4, 8, 5, 6]) == [1, 2, 3]
    # a match must leave size_m + 1 ids before the end: (5, 6) at 5 of 8 doesn't
    assert map_draft(fresh_map(2, 3), [0, 0, 0, 0, 0, 5, 6, 1, 5, 6]) == []


def test_map_k_drafts_no_more_than_was_accepted_last_time_from_that_key():
    drafter = NgramMapDrafter(size_n=2, size_m=4)
    drafter.begin(None, None)
    text = [0, 5, 6, 1, 2, 3, 4, 9, 9, 9, 5, 6]
    assert propose(drafter, text) == [1, 2, 3, 4]
    drafter.observe(1)
    longer = text + [7, 7, 7, 5, 6]
    # found through the hash table, which keeps the position it was given first: (5, 6) at 1 again
    assert propose(drafter, longer) == [1]  # as many as were accepted last time
    drafter.observe(1)
    drafter.observe(0)  # a round that drafted nothing tells it nothing
    assert propose(drafter, longer) == [1]
    drafter.observe(0)
    assert propose(drafter, longer) == []


def test_map_k4v_needs_min_hits_and_a_dominant_value():
    map_ = fresh_map(1, 2, key_only=False, min_hits=2)
    text = [9, 5, 1, 1, 7, 7, 7, 7, 5]
    assert map_draft(map_, text) == []  # the key 5 is hit once: fewer than min_hits
    assert map_draft(map_, text) == [1, 1]  # hit twice; one value (1, 1) seen: dominant
    assert map_draft(fresh_map(1, 2, key_only=True, min_hits=2), text) == [1, 1]  # key only: no min hits
    # after 5: (1, 1) once and (2, 2) once: neither twice the other, no draft
    assert map_draft(fresh_map(1, 2, key_only=False), [9, 5, 1, 1, 7, 5, 2, 2, 7, 7, 7, 7, 5]) == []
    dominant = fresh_map(1, 2, key_only=False)
    # (1, 1) twice and (2, 2) once after 5: (1, 1) dominates; as in llama.cpp the draft is what followed the
    # matched (latest) occurrence
    assert map_draft(dominant, [9, 5, 1, 1, 5, 1, 1, 5, 2, 2, 7, 7, 7, 5]) == [2, 2]
    assert [v.count for v in dominant.keys[0].values] == [2, 1, 0, 0]


def test_map_a_shorter_prompt_drops_what_was_learnt_past_it():
    map_ = NgramMap(2, 2, key_only=True, min_hits=1)
    long_text = [0, 5, 6, 1, 2, 9, 9, 9, 9, 9, 9, 9, 3, 5, 6]
    map_.begin(long_text[:-1])
    assert map_draft(map_, long_text) == [1, 2] and map_.keys
    map_.begin([0, 1])  # shorter than what was checked: keys and hashes past it go
    assert not map_.keys and not map_.positions


def test_map_release_forgets_and_k4v_is_a_setting():
    drafter = NgramMapDrafter(size_n=2, size_m=4)
    drafter.begin(None, None)
    assert propose(drafter, [0, 5, 6, 1, 2, 3, 4, 9, 9, 9, 5, 6])
    drafter.release()
    assert not drafter.map.keys and drafter.map.key_only
    assert not NgramMapDrafter(four_values=True).map.key_only


# ------------------------------------------------------------------ the registry and llama-server's options

def test_both_methods_are_registered_with_llama_cpps_defaults():
    assert {"ngram-mod", "ngram-map"} <= set(method_names())
    assert SpecConfig("ngram-mod").param_values() == {"n_match": 24, "n_min": 48, "n_max": 64}
    assert SpecConfig("ngram-map").param_values() == {"size_n": 12, "size_m": 48, "min_hits": 1,
                                                      "four_values": False}
    assert method_spec("ngram-mod").sweep_rank is not None and method_spec("ngram-mod").offered
    assert set(method_spec("ngram-map").backends) == {"transformers", "llama.cpp"}


def test_llama_server_options_name_the_same_setting():
    assert mod_args(parse_spec("ngram-mod:k=64,n_match=8,n_min=2"), None) == (
        "--spec-type", "ngram-mod", "--spec-ngram-mod-n-match", "8", "--spec-ngram-mod-n-min", "2",
        "--spec-ngram-mod-n-max", "64")
    assert map_args(parse_spec("ngram-map:k=48,four_values=1,min_hits=2"), None) == (
        "--spec-type", "ngram-map-k4v", "--spec-ngram-map-k4v-size-n", "12", "--spec-ngram-map-k4v-size-m", "48",
        "--spec-ngram-map-k4v-min-hits", "2")


@pytest.mark.parametrize("text, words", [
    ("ngram-mod:n_match=0", "n_match must be from 1 to 1024, got 0"),
    ("ngram-mod:n_min=-1", "n_min must be from 0 to 1024"),
    ("ngram-mod:n_max=5000", "n_max must be from 0 to 1024"),
    ("ngram-mod:n_match=two", "n_match must be an integer"),
    ("ngram-map:size_n=0", "size_n must be from 1 to 1024"),
    ("ngram-map:size_m=2000", "size_m must be from 1 to 1024"),
    ("ngram-map:min_hits=0", "min_hits must be from 1 to"),
    ("ngram-map:four_values=maybe", "four_values must be 0 or 1"),
])
def test_bad_parameters_are_refused_in_one_line(text, words):
    with pytest.raises(ConfigError, match=words) as info:
        parse_spec(text)
    assert "\n" not in str(info.value)
