"""The command-line options shared by `specscope generate`/`bench` and the GUI's scripted mode (`specscope gui`).

One definition of each option (name, type, choices, help) and one way from parsed options to the engine's
settings (SpecConfig, SamplingConfig), so the CLI and the GUI cannot drift apart.

`unset=True` gives every option the default None, meaning "not given": the GUI keeps the setting last used
for it; `spec_from_args` / `sampling_from_args` fill what is None from a base config. Without it the defaults
are the CLI's (SpecConfig() and SamplingConfig()).

The method options are generated from the method registry (engine.drafters registers each method's
MethodSpec): --method's choices (every registered method, and every combination a SPEC takes), and one option
per method parameter (engine.core.methods.ParamSpec). A parameter given to a method that doesn't take it is
refused here (`check_own_params`), the one place the command line's stray method options are refused. The
sampling options are generated the same way, one per SamplingConfig field (engine.core.config.SAMPLING_FIELDS).

Touches argparse, engine.core.config, engine.backends.device's dtype names and the method registry only: no
models, no Qt.
"""

from __future__ import annotations

import argparse
from dataclasses import fields
from typing import Iterable

import engine.drafters  # noqa: F401  (registers the methods)
from engine.backends.device import DTYPE_NAMES
from engine.core.config import BACKENDS, MAX_K, MAX_TREE, SAMPLING_FIELDS, SamplingConfig, SpecConfig
from engine.core.errors import ConfigError
from engine.core.methods import (ParamSpec, all_params, foreign_param_words, implied_method, method_names,
                                 method_spec, methods, plain_method)
from engine.core.validation import check_max_new_tokens, parse_float, parse_int

DEFAULT_MAX_NEW_TOKENS = 256

_K_DEFAULT = next(f.default for f in fields(SpecConfig) if f.name == "k")
_SAMPLING_DEFAULTS = SamplingConfig()
_PARSERS = {int: parse_int, float: parse_float, str: str}


def _default(value, unset: bool):
    return None if unset else value


def _help(text: str, unset: bool, kept: str = "the last one used") -> str:
    return f"{text} (default: {kept})" if unset else text


def add_model_args(parser: argparse.ArgumentParser, *, unset: bool = False, dtype: bool = True) -> None:
    """--model, --device, --backend and (with dtype=True) --dtype."""
    parser.add_argument("--model", default=_default("default", unset),
                        help=_help("target: a model folder, a .gguf file, a hub id in the local cache, or "
                                   "'default'", unset, "the last one used, else the built-in model"))
    parser.add_argument("--device", default=_default("auto", unset),
                        help=_help("auto (cuda, then mps, then cpu), cpu, cuda, mps", unset, "the last one chosen"))
    parser.add_argument("--backend", default=_default("auto", unset), choices=("auto",) + BACKENDS,
                        help=_help("auto (llama.cpp for .gguf files and the built-in model where "
                                   "llama-cpp-python is installed, else transformers), transformers, llama.cpp",
                                   unset, "the last one chosen"))
    if dtype:
        what = ("auto, float32, bf16, fp16 (auto: bf16 on CUDA and on CPUs with native bf16 (AVX512-BF16/AMX), "
                "float32 on other CPUs); transformers backend only (GGUF weights on llama.cpp stay as quantized)")
        parser.add_argument("--dtype", default=None, type=dtype_choice, help=_help(what, unset, "the last one chosen"))


def dtype_choice(text: str) -> str:
    """--dtype (argparse's type): auto, or a dtype name engine.backends.device knows (float32, bf16, fp16, …),
    as its full name (bfloat16); one line naming the choices for another."""
    name = text.strip().lower().removeprefix("torch.")
    if name == "auto":
        return name
    if name not in DTYPE_NAMES:
        raise argparse.ArgumentTypeError(f"expected auto, float32, bf16 or fp16, got {text!r}")
    return DTYPE_NAMES[name]


def method_choice(text: str) -> str:
    """--method (argparse's type): a registered method, or any combination a SPEC takes (lookup+model, made by
    engine.core.methods.method_spec), by its name; argparse's "invalid choice" line naming them otherwise."""
    try:
        return method_spec(text.strip()).name
    except ConfigError as exc:
        if "+" in text:
            raise argparse.ArgumentTypeError(str(exc)) from None
        combined = next((m.name for m in methods() if m.parts), "LOOKUP+MODEL")
        raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from {', '.join(method_names())}, "
                                         f"or a lookup and a model joined by + such as {combined})") from None


def add_compile_arg(parser: argparse.ArgumentParser) -> None:
    """--compile: torch.compile'd runners on a static KV cache (engine.backends.transformers_static)."""
    parser.add_argument("--compile", action="store_true",
                        help="transformers backend: a static KV cache and torch.compile (CUDA graphs on CUDA); "
                             "each verify width compiles on its first use (slow, once per run)")


def _add_param(parser: argparse.ArgumentParser, param: ParamSpec, unset: bool) -> None:
    if param.type is bool:
        parser.add_argument(param.cli_flag, dest=param.name, action="store_true", default=None, help=param.help)
        return
    if param.default is None:
        help_text = param.help
    else:
        help_text = _help(param.help, True) if unset else f"{param.help} (default: {param.default})"
    parser.add_argument(param.cli_flag, dest=param.name, type=_PARSERS[param.type], default=None, help=help_text)


def add_spec_args(parser: argparse.ArgumentParser, *, unset: bool = False) -> None:
    """--method, --draft, --k, one option per method parameter (--layers, --ngram-max, --ngram-min, …) and
    --adaptive."""
    plain, implied = plain_method().name, implied_method()
    combined = next((m.name for m in methods() if m.parts), "")
    what = f"{plain}, or a drafter: {', '.join(method_names())}, or a lookup and a model joined by + ({combined})"
    parser.add_argument("--method", default=None, type=method_choice, metavar="METHOD",
                        help=_help(what, unset) if unset else f"{what} (default: {implied} with --draft, else {plain})")
    drafts = "; ".join(f"{m.name}: {m.draft_help}" for m in methods() if m.draft_help)
    parser.add_argument("--draft", default=None, help=f"what the method drafts with ({drafts})")
    parser.add_argument("--k", type=parse_int, default=_default(_K_DEFAULT, unset),
                        help=_help(f"tokens drafted per round, 1…{MAX_K}", unset))
    for param in all_params():
        _add_param(parser, param, unset)
    branching = ", ".join(m.name for m in methods() if m.branches)
    parser.add_argument("--tree", type=parse_int, default=_default(0, unset), metavar="N",
                        help=_help(f"draft a tree of up to N nodes, k deep, verified in one pass (0: a chain of k; "
                                   f"{MAX_TREE} at most; methods {branching or 'none yet'})", unset))
    parser.add_argument("--adaptive", action="store_true", default=_default(False, unset),
                        help="draft only as many tokens (≤ k) as pay for their verification, learnt as it runs")


def add_sampling_args(parser: argparse.ArgumentParser, *, unset: bool = False) -> None:
    """One option per SamplingConfig field (--temperature, --top-p, --top-k, --seed), from its description
    (engine.core.config.SAMPLING_FIELDS): type, default and help."""
    for field in SAMPLING_FIELDS:
        if field.default is None:  # not set is the default (a random seed): nothing to say of it
            help_text = field.help
        else:
            help_text = _help(field.help, True) if unset else f"{field.help} (default)"
        parser.add_argument(field.cli_flag, dest=field.name, type=_PARSERS[field.type],
                            default=_default(field.default, unset), help=help_text)


def add_generation_args(parser: argparse.ArgumentParser, *, unset: bool = False,
                        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS) -> None:
    """--max-new-tokens and --system."""
    parser.add_argument("--max-new-tokens", type=parse_int, default=_default(max_new_tokens, unset),
                        help=_help("most tokens to generate", unset))
    parser.add_argument("--system", default=None, help="system prompt")


def add_consent_args(parser: argparse.ArgumentParser) -> None:
    """--trust-remote-code and --allow-pickle: the answers to engine.models.consent's two questions, given up front
    (a command-line or scripted run never stops to ask)."""
    parser.add_argument("--trust-remote-code", action="store_true",
                        help="run the Python code a model (or its draft) ships with (auto_map): only for models "
                             "you trust")
    parser.add_argument("--allow-pickle", action="store_true",
                        help="load weights stored only as pickle checkpoints (.bin/.pt), which can run code: "
                             "only for models you trust")


def check_generation_args(args: argparse.Namespace) -> None:
    """The numbers of --max-new-tokens (when given) at the edge of their type; raises ConfigError."""
    if getattr(args, "max_new_tokens", None) is not None:
        check_max_new_tokens(args.max_new_tokens)


def _given(args: argparse.Namespace, name: str, base):
    value = getattr(args, name, None)
    return getattr(base, name) if value is None else value


def given_params(args: argparse.Namespace) -> dict[str, object]:
    """The method parameters the options give (those left None aside)."""
    return {p.name: getattr(args, p.name) for p in all_params() if getattr(args, p.name, None) is not None}


def check_own_params(method: str, names: Iterable[str]) -> None:
    """ConfigError for a parameter option given to a method that doesn't take it, in one line: "--layers is
    early-exit's parameter; prompt-lookup takes --ngram-max, --ngram-min" (the command line never drops one)."""
    info = method_spec(method)
    for name in names:
        if info.param(name) is None:
            raise ConfigError(foreign_param_words(info, name))


def spec_from_args(args: argparse.Namespace, base: SpecConfig | None = None, *,
                   keeps_method: bool = False) -> SpecConfig:
    """The SpecConfig the options ask for; an option left None takes `base`'s value (a parameter only while
    the method stays the same). No --method: the method a draft implies when --draft is given, else
    `base.method`. Raises ConfigError on a bad combination, and for a parameter option of another method than
    the one asked for (check_own_params); `keeps_method`: without --method the method is one not known here
    (the window's last, which a --draft doesn't change), so that check is its caller's."""
    base = SpecConfig() if base is None else base
    method = getattr(args, "method", None) or (implied_method() if getattr(args, "draft", None) else base.method)
    if getattr(args, "method", None) or not keeps_method:
        check_own_params(method, given_params(args))
    params = {**(dict(base.params) if method == base.method else {}), **given_params(args)}
    return SpecConfig(method=method_spec(method).name, k=_given(args, "k", base), draft=_given(args, "draft", base),
                      params=params, adaptive=bool(_given(args, "adaptive", base)), tree=_given(args, "tree", base))


def sampling_from_args(args: argparse.Namespace, base: SamplingConfig = _SAMPLING_DEFAULTS) -> SamplingConfig:
    """The SamplingConfig the options ask for; an option left None takes `base`'s value. Raises ConfigError."""
    return SamplingConfig(**{field.name: _given(args, field.name, base) for field in SAMPLING_FIELDS})


__all__ = ["add_compile_arg", "add_consent_args", "check_generation_args", "add_model_args", "add_spec_args",
           "add_sampling_args", "add_generation_args", "spec_from_args", "sampling_from_args", "given_params",
           "check_own_params", "dtype_choice", "method_choice",
           "DEFAULT_MAX_NEW_TOKENS"]
