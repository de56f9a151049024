"""Chat templates, conversation → ids, stop conditions and incremental detokenization.

Uses only the tokenizer subset of the backend contract (engine/backends: apply_chat_template, encode/
__call__, decode, eos ids), so every backend's tokenizer works here. Touches nothing else."""

from __future__ import annotations

from typing import Mapping, Sequence

from engine.core.errors import ConfigError

Conversation = str | Sequence[Mapping[str, str]]
ROLES = ("system", "user", "assistant")


def normalize_conversation(conversation: Conversation, system: str | None = None) -> list[dict[str, str]]:
    """A prompt string or role/content messages → validated messages (system first if given)."""
    if isinstance(conversation, str):
        messages = [{"role": "user", "content": conversation}]
    else:
        messages = [{"role": str(m["role"]), "content": str(m["content"])} for m in conversation]
    if system and system.strip() and not (messages and messages[0]["role"] == "system"):
        messages.insert(0, {"role": "system", "content": system})
    for message in messages:
        if message["role"] not in ROLES:
            raise ConfigError(f"unknown chat role {message['role']!r}; use system, user or assistant")
    if not any(m["role"] == "user" and m["content"].strip() for m in messages):
        raise ConfigError("the prompt is empty: type a message first")
    return messages


def prompt_ids(tokenizer, messages: list[dict[str, str]]) -> list[int]:
    """Render through the model's chat template (multi-turn), or a plain transcript without one."""
    if getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, Mapping) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        return [int(i) for i in ids]
    text = "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant:"
    return [int(i) for i in tokenizer(text)["input_ids"]]


def eos_ids(tokenizer, model) -> frozenset[int]:
    ids: set[int] = set()
    for value in (getattr(tokenizer, "eos_token_id", None),
                  getattr(getattr(model, "generation_config", None), "eos_token_id", None)):
        if isinstance(value, int):
            ids.add(value)
        elif value:
            ids.update(int(v) for v in value)
    return frozenset(ids)


class IncrementalDetokenizer:
    """Text pieces per token whose concatenation is the decoded text (prefix/read offsets as in vLLM):
    a token that ends inside a multi-byte character gets "" and its text arrives with the next one."""

    CONTEXT = 6  # tokens of left context kept so that leading spaces decode right

    def __init__(self, tokenizer, prompt_ids: Sequence[int], solo_texts: dict[int, str] | None = None) -> None:
        """`solo_texts`: the text of single ids, remembered (the caller may share it between detokenizers of
        the same tokenizer); after the first token, each token's left context is the one id before it."""
        self._decode = tokenizer.decode
        self._solo = {} if solo_texts is None else solo_texts
        self.ids: list[int] = list(prompt_ids[-self.CONTEXT:])
        self.prefix = 0
        self.read = len(self.ids)
        self.text = ""

    def _text(self, ids: list[int], start: int, end: int) -> str:
        if end - start != 1:
            return self._decode(ids[start:end], skip_special_tokens=True)
        text = self._solo.get(ids[start])
        if text is None:
            text = self._solo[ids[start]] = self._decode(ids[start:end], skip_special_tokens=True)
        return text

    def _pieces(self, new_ids: Sequence[int]) -> tuple[list[str], int, int]:
        ids = self.ids + list(new_ids)
        prefix, read = self.prefix, self.read
        pieces = []
        for end in range(len(self.ids) + 1, len(ids) + 1):
            before = self._text(ids, prefix, read)
            after = self._decode(ids[prefix:end], skip_special_tokens=True)
            if after.endswith("\ufffd") or not after.startswith(before):
                pieces.append("")  # wait for the rest of the character
                continue
            pieces.append(after[len(before):])
            prefix, read = read, end
        return pieces, prefix, read

    def text_of(self, token_id: int) -> str:
        """The text of one id on its own (remembered): how an alternative the target did not choose reads."""
        return self._text([token_id], 0, 1)

    def peek(self, new_ids: Sequence[int]) -> list[str]:
        """Pieces of `new_ids` if they came next, without taking them (rejected drafts)."""
        return self._pieces(new_ids)[0]

    def add(self, new_ids: Sequence[int]) -> list[str]:
        pieces, self.prefix, self.read = self._pieces(new_ids)
        self.ids.extend(new_ids)
        if self.prefix > 4 * self.CONTEXT:  # keep the window short
            drop = self.prefix - self.CONTEXT
            del self.ids[:drop]
            self.prefix -= drop
            self.read -= drop
        self.text += "".join(pieces)
        return pieces


def find_stop(text: str, stop_strings: Sequence[str], start: int) -> int | None:
    """Index in `text` where the first stop string begins, searching from `start`."""
    hits = [i for s in stop_strings if s and (i := text.find(s, max(0, start - len(s) + 1))) >= 0]
    return min(hits) if hits else None
