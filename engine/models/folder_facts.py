"""What a Hugging Face model folder's metadata says: config.json (architecture, shapes, MTP layers, dtype), the
safetensors headers (parameter count, stored dtype), the tokenizer (family, vocabulary size) and whether it
names code of its own (`auto_map`). No weights are loaded; a fact that can't be read is None, and the problems
found are said in plain words.

Reads files in the folder only; file checks are engine.backends.source's.
"""

from __future__ import annotations

import os
from pathlib import Path

from engine.backends.device import DTYPE_NAMES
from engine.backends.source import read_json_dict, weight_files

__all__ = ["folder_facts", "needs_remote_code", "folder_tokenizer_facts"]

_SAFETENSORS_DTYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64", "I8": "int8",
                       "U8": "uint8", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "I32": "int32",
                       "I64": "int64", "I16": "int16", "BOOL": "bool"}


def folder_facts(folder: Path, *, with_tokenizer: bool = True) -> dict:
    """A model folder's facts, as engine.models.catalog.CatalogEntry's fields of the same names (with
    `complete` and `problem`, the problems joined; None when usable)."""
    config = read_json_dict(folder / "config.json")
    problems = []
    if config is None:
        problems.append("it has no readable config.json" if (folder / "config.json").exists()
                        else "it has no config.json")
        config = {}
    text = _text_config(config)
    architectures = config.get("architectures") or []
    present, missing, weights_format = weight_files(folder)
    n_parameters, stored_dtype = (None, None)
    if weights_format == "safetensors" and not missing:
        n_parameters, stored_dtype = _safetensors_facts(present)
    problems.extend(_weight_problems(present, missing, weights_format, n_parameters))
    family, vocab = folder_tokenizer_facts(folder, text) if with_tokenizer else (None, text.get("vocab_size"))
    n_heads = text.get("num_attention_heads")
    head_dim = text.get("head_dim") or (text["hidden_size"] // n_heads if n_heads and text.get("hidden_size")
                                        else None)
    return dict(
        architecture=architectures[0] if architectures else None,
        model_type=config.get("model_type"),
        n_parameters=n_parameters,
        dtype=_normalize_dtype(config.get("torch_dtype") or config.get("dtype") or text.get("torch_dtype")
                               or text.get("dtype")) or stored_dtype,
        tokenizer_family=family, vocab_size=vocab,
        n_layers=text.get("num_hidden_layers"),
        n_kv_heads=text.get("num_key_value_heads") or n_heads,
        head_dim=head_dim,
        context_length=text.get("max_position_embeddings"),
        n_mtp_layers=_mtp_layers(text),
        weights_format=weights_format,
        needs_remote_code=needs_remote_code(folder),
        complete=not missing and weights_format is not None and bool(config),
        problem="; ".join(problems) or None)


def _weight_problems(present: list[Path], missing: list, weights_format: str | None,
                     n_parameters: int | None) -> list[str]:
    if missing:
        return [f"{len(missing)} of {len(missing) + len(present)} weight files are missing (an unfinished "
                "download?)"]
    if weights_format is None:
        return ["it has no weights (no .safetensors file)"]
    if weights_format == "safetensors" and n_parameters is None:
        return ["its weights cannot be read (not safetensors, or cut short)"]
    return []


def _text_config(config: dict) -> dict:
    text = config.get("text_config")
    return {**config, **text} if isinstance(text, dict) else config


def _mtp_layers(text: dict) -> int:
    """MTP layers a config declares (transformers' num_mtp_layers; DeepSeek/GLM checkpoints say
    num_nextn_predict_layers)."""
    value = text.get("num_mtp_layers", text.get("num_nextn_predict_layers"))
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _normalize_dtype(value) -> str | None:
    if not value or not isinstance(value, str):
        return None
    value = value.removeprefix("torch.").lower()
    return DTYPE_NAMES.get(value, value)


def _safetensors_facts(files: list[Path]) -> tuple[int | None, str | None]:
    """Parameter count and the dominant dtype, from the safetensors headers (no tensor is read)."""
    from safetensors import safe_open
    n_parameters, by_dtype = 0, {}
    try:
        for file in files:
            with safe_open(str(file), framework="numpy") as f:
                for key in f.keys():
                    tensor = f.get_slice(key)
                    count = 1
                    for dim in tensor.get_shape():
                        count *= int(dim)
                    n_parameters += count
                    dtype = _SAFETENSORS_DTYPES.get(tensor.get_dtype(), tensor.get_dtype().lower())
                    by_dtype[dtype] = by_dtype.get(dtype, 0) + count
    except Exception:  # a truncated or foreign file: the facts are unknown, not an error
        return None, None
    return n_parameters, (max(by_dtype, key=by_dtype.get) if by_dtype else None)


def needs_remote_code(folder: str | os.PathLike) -> bool:
    """True when the model (or its tokenizer) names its own Python code (an `auto_map` in its config), which
    SpecScope never runs without the user's say-so (`trust_remote_code` stays off)."""
    folder = Path(folder)
    if folder.is_file():
        return False
    for name in ("config.json", "tokenizer_config.json"):
        data = read_json_dict(folder / name)
        if data and data.get("auto_map"):
            return True
    return False


def folder_tokenizer_facts(folder: Path, config: dict | None = None) -> tuple[str | None, int | None]:
    """A model folder's tokenizer family and vocabulary size, from tokenizer.json through the `tokenizers`
    library (no model weights), else from tokenizer.model and the config."""
    file = folder / "tokenizer.json"
    if file.is_file():
        try:
            from tokenizers import Tokenizer
            tokenizer = Tokenizer.from_file(str(file))
            return type(tokenizer.model).__name__, tokenizer.get_vocab_size(with_added_tokens=True)
        except Exception:  # unreadable tokenizer.json: fall back to the config's numbers
            pass
    family = "SentencePiece" if (folder / "tokenizer.model").is_file() else None
    vocab = (config or {}).get("vocab_size")
    return family, int(vocab) if isinstance(vocab, int) else None
