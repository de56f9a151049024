"""IncrementalDetokenizer: the pieces, however the ids arrive, concatenate to tokenizer.decode of the whole
output, multi-byte characters included; no piece ever shows half a character."""

from __future__ import annotations

import random

import pytest

from engine.core.chat import IncrementalDetokenizer, find_stop

TEXTS = {
    "emoji": "Party time 🎉🎉 with friends 👩‍👩‍👧 and cake 🍰! Done ✅.",
    "accents": "Crème brûlée, naïve façade, Ærøskøbing, señor, Ünïcödé — déjà vu.",
    "cjk": "日本語のテキストです。中文文本，한국어 텍스트도 있어요。",
    "code": "def f(x):\n    return {'a': x ** 2}  # ½ → ∞\n\tprint(f\"{x!r}\")",
    "mixed": "Translate «Grüße aus Köln» → 'Greetings from Cologne' 😀; 東京 is Tokyo. " * 4,
}
CHUNKINGS = ["one-by-one", "pairs", "random", "all-at-once"]


def chunks(ids, how, seed=0):
    if how == "one-by-one":
        return [[t] for t in ids]
    if how == "pairs":
        return [ids[i:i + 2] for i in range(0, len(ids), 2)]
    if how == "all-at-once":
        return [ids]
    rng, out, i = random.Random(seed), [], 0
    while i < len(ids):
        n = rng.randint(1, 5)
        out.append(ids[i:i + n])
        i += n
    return out


def check_detokenizer(tokenizer, prompt_text, text, how):
    prompt = tokenizer.encode(prompt_text, add_special_tokens=False)
    ids = tokenizer.encode(text, add_special_tokens=False)
    detok = IncrementalDetokenizer(tokenizer, prompt)
    pieces = []
    for chunk in chunks(ids, how):
        peeked = detok.peek(chunk)
        added = detok.add(chunk)
        assert peeked == added  # peek is add without taking
        assert len(added) == len(chunk)
        pieces.extend(added)
    assert "".join(pieces) == tokenizer.decode(ids, skip_special_tokens=True) == detok.text
    assert not any("\ufffd" in p for p in pieces)
    return ids, pieces


@pytest.mark.model
@pytest.mark.parametrize("how", CHUNKINGS)
@pytest.mark.parametrize("name", TEXTS)
def test_builtin_tokenizer(default_model, name, how):
    tokenizer = default_model.tokenizer
    ids, pieces = check_detokenizer(tokenizer, "Say something:", TEXTS[name], how)
    if name in ("emoji", "cjk"):
        assert "" in pieces  # some tokens end inside a character: their text arrives with the next one


@pytest.mark.model
def test_builtin_tokenizer_with_special_tokens_and_a_long_reply(default_model):
    tokenizer = default_model.tokenizer
    prompt = default_model.tokenizer.apply_chat_template([{"role": "user", "content": "hi"}],
                                                         add_generation_prompt=True, tokenize=True)
    if not isinstance(prompt, list):
        prompt = prompt["input_ids"]
    text = " ".join(TEXTS.values()) * 3  # long enough for the context window to be trimmed many times
    ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
    detok = IncrementalDetokenizer(tokenizer, prompt)
    pieces = [p for t in ids for p in detok.add([t])]
    assert "".join(pieces) == tokenizer.decode(ids, skip_special_tokens=True)
    assert pieces[-1] == ""  # the end-of-turn token has no text


@pytest.mark.parametrize("how", CHUNKINGS)
@pytest.mark.parametrize("name", TEXTS)
def test_tiny_tokenizer(tiny_tokenizer, name, how):
    check_detokenizer(tiny_tokenizer, "hello", TEXTS[name], how)


def test_peek_does_not_change_state(tiny_tokenizer):
    ids = tiny_tokenizer.encode("Café 😀 ok", add_special_tokens=False)
    detok = IncrementalDetokenizer(tiny_tokenizer, [])
    detok.add(ids[:2])
    before = (list(detok.ids), detok.prefix, detok.read, detok.text)
    detok.peek(ids[2:])
    detok.peek([5, 6, 7])
    assert (list(detok.ids), detok.prefix, detok.read, detok.text) == before


@pytest.mark.parametrize("text, stops, start, expected", [
    ("hello world", ("world",), 0, 6),
    ("hello world", ("xyz",), 0, None),
    ("hello world", ("o",), 5, 7),  # searches from start − len(stop) + 1
    ("hello world", ("lo w", "wor"), 6, 3),  # a stop string spanning text already searched
    ("abc", ("",), 0, None),
])
def test_find_stop(text, stops, start, expected):
    assert find_stop(text, stops, start) == expected
