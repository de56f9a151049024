"""The tokenizer of a GGUF model on the llama.cpp backend: llama.cpp's own vocabulary behind the subset of
the Hugging Face tokenizer API the engine uses (engine/core/chat.py, engine/core/compat.py, IncrementalDetokenizer),
and the chat template stored in the GGUF rendered with transformers' own Jinja renderer (the same sandbox,
options and globals as `apply_chat_template`).

Touches only the llama.cpp vocabulary of a loaded model (through llama-cpp-python's low-level API); no
weights, no context.
"""

from __future__ import annotations

import ctypes
import threading
from functools import cached_property

from engine.core.compat import OwnFactsTokenizer, TokenizerFacts

# llama_vocab_type → llama.cpp's name for it, and the name a Hugging Face tokenizer gives the same kind of
# vocabulary (its tokenizer model's class: SentencePiece-BPE and byte-level BPE are both "BPE" there)
VOCAB_KINDS = {0: "none", 1: "SPM", 2: "BPE", 3: "WPM", 4: "UGM", 5: "RWKV", 6: "PLAMO2"}
HF_VOCAB_KINDS = {"SPM": "BPE", "BPE": "BPE", "WPM": "WordPiece", "UGM": "Unigram"}
PIECE_BUFFER = 256


class LlamaCppTokenizer(OwnFactsTokenizer):
    """encode/decode/apply_chat_template over a llama.cpp vocabulary. `owner` keeps the model alive."""

    def __init__(self, lib, model_handle, metadata: dict | None = None, owner=None) -> None:
        self._lib = lib
        self._model = model_handle
        self._vocab = lib.llama_model_get_vocab(model_handle)
        self._owner = owner
        self.vocab_size = int(lib.llama_vocab_n_tokens(self._vocab))
        self.bos_token_id = self._special(lib.llama_vocab_bos)
        self.eos_token_id = self._special(lib.llama_vocab_eos)
        # llama.cpp has no getter for the unknown token: the GGUF names it
        unknown = (metadata or {}).get("tokenizer.ggml.unknown_token_id")
        self.unk_token_id = unknown if isinstance(unknown, int) and 0 <= unknown < self.vocab_size else None
        self.pad_token_id = self._special(lib.llama_vocab_pad)
        template = lib.llama_model_chat_template(model_handle, None)
        self.chat_template = template.decode("utf-8") if template else None
        self.vocab_kind = VOCAB_KINDS.get(int(lib.llama_vocab_type(self._vocab)), "unknown")
        self._buffers = threading.local()  # decode()'s ids and text buffers, one pair per thread that decodes

    def _special(self, getter) -> int | None:
        token = int(getter(self._vocab))
        return token if 0 <= token < self.vocab_size else None

    # ---- facts

    def __len__(self) -> int:
        return self.vocab_size

    def token_text(self, token_id: int) -> str:
        """The id's entry in the vocabulary as stored (byte-level BPE spells a space 'Ġ', SPM '▁')."""
        return self._lib.llama_vocab_get_text(self._vocab, token_id).decode("utf-8", errors="replace")

    def get_vocab(self) -> dict[str, int]:
        return dict(self._vocab_by_text)

    @cached_property
    def _vocab_by_text(self) -> dict[str, int]:
        return {self.token_text(i): i for i in range(self.vocab_size)}

    def _token(self, token_id: int | None) -> str | None:
        return None if token_id is None else self.token_text(token_id)

    @property
    def bos_token(self) -> str | None:
        return self._token(self.bos_token_id)

    @property
    def eos_token(self) -> str | None:
        return self._token(self.eos_token_id)

    @property
    def unk_token(self) -> str | None:
        return self._token(self.unk_token_id)

    @property
    def pad_token(self) -> str | None:
        return self._token(self.pad_token_id)

    @property
    def special_tokens_map(self) -> dict[str, str]:
        """What a chat template may read as bos_token, eos_token, ... (as transformers passes them)."""
        named = {"bos_token": self.bos_token, "eos_token": self.eos_token, "unk_token": self.unk_token,
                 "pad_token": self.pad_token}
        return {key: value for key, value in named.items() if value is not None}

    def own_compatibility_facts(self) -> TokenizerFacts:
        """What engine.core.compat decides compatibility on: the GGUF vocabulary's kind (named as HF names it, so a
        GGUF and an HF tokenizer compare too), size, BOS/EOS and the stored text of every id."""
        return TokenizerFacts(vocab_kind=HF_VOCAB_KINDS.get(self.vocab_kind, self.vocab_kind),
                              size=self.vocab_size, bos_id=self.bos_token_id,
                              bos_token=self.bos_token, eos_id=self.eos_token_id, eos_token=self.eos_token,
                              piece=self._piece)

    def _piece(self, token_id: int) -> str | None:
        return self.token_text(token_id) if 0 <= token_id < self.vocab_size else None

    @cached_property
    def eog_ids(self) -> frozenset[int]:
        """Every id that ends a generation for llama.cpp (end of sequence, end of turn, ...)."""
        is_eog = self._lib.llama_vocab_is_eog
        return frozenset(i for i in range(self.vocab_size) if is_eog(self._vocab, i))

    @cached_property
    def all_special_ids(self) -> list[int]:
        """Control tokens: what skip_special_tokens leaves out."""
        attr, control = self._lib.llama_vocab_get_attr, self._lib.LLAMA_TOKEN_ATTR_CONTROL
        return [i for i in range(self.vocab_size) if int(attr(self._vocab, i)) & control]

    # ---- text ↔ ids

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Special tokens written in the text are parsed as such, as a Hugging Face tokenizer does."""
        raw = text.encode("utf-8")
        capacity = len(raw) + 8
        for _ in range(2):
            tokens = (ctypes.c_int32 * capacity)()
            n = self._lib.llama_tokenize(self._vocab, raw, len(raw), tokens, capacity, add_special_tokens, True)
            if n >= 0:
                return list(tokens[:n])
            capacity = -n
        raise ValueError(f"llama.cpp could not tokenize a text of {len(raw)} bytes")

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        return {"input_ids": self.encode(text, add_special_tokens=add_special_tokens)}

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        """Bytes of every piece joined, then UTF-8 with replacement: a token that ends inside a character
        decodes to '\ufffd' at the end, as on transformers (the incremental detokenizer relies on it). The ids and
        text buffers are kept between calls, per thread (the detokenizer calls this for every token)."""
        n_ids = len(ids)
        if not n_ids:
            return ""
        kept = self._buffers
        tokens = getattr(kept, "ids", None)
        if tokens is None or n_ids > len(tokens):
            tokens = kept.ids = (ctypes.c_int32 * max(64, 2 * n_ids))()
        for i, token in enumerate(ids):
            tokens[i] = int(token)
        capacity = 16 * n_ids + 64
        for _ in range(2):
            buffer = getattr(kept, "text", None)
            if buffer is None or capacity > len(buffer):
                buffer = kept.text = ctypes.create_string_buffer(max(1024, capacity))
            n = self._lib.llama_detokenize(self._vocab, tokens, n_ids, buffer, len(buffer),
                                           skip_special_tokens, not skip_special_tokens)
            if n >= 0:
                return ctypes.string_at(buffer, n).decode("utf-8", errors="replace")
            capacity = -n
        raise ValueError("llama.cpp could not decode these ids")

    def convert_ids_to_tokens(self, ids):
        if isinstance(ids, int):
            return self.token_text(ids)
        return [self.token_text(int(i)) for i in ids]

    # ---- chat template

    def apply_chat_template(self, messages, add_generation_prompt: bool = False, tokenize: bool = True,
                            **template_kwargs):
        """Render `messages` with the GGUF's chat template, exactly as transformers renders a template, and
        tokenize the result without adding special tokens (the template writes them)."""
        if not self.chat_template:
            raise ValueError("this model has no chat template")
        from transformers.utils.chat_template_utils import render_jinja_template
        rendered, _ = render_jinja_template(
            conversations=[list(messages)], chat_template=self.chat_template,
            add_generation_prompt=add_generation_prompt, **{**self.special_tokens_map, **template_kwargs})
        text = rendered[0]
        return self.encode(text, add_special_tokens=False) if tokenize else text
