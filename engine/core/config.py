"""Settings as data: frozen dataclasses, validated on creation, and the one way a SpecConfig becomes text
(its SPEC label, parsed back by `parse_spec`) and a record (a JSON-ready dict: `spec_to_record`,
`spec_from_record`, what the history and the GUI's settings store). Each field of SamplingConfig is
described once (engine.core.sampling_fields, SAMPLING_FIELDS); its record (`sampling_to_record`,
`sampling_from_record`), its controls' and QSettings' numbers (`sampling_to_values`, `sampling_from_values`)
and its settings words (`sampling_words`) are made from those descriptions here.

A SpecConfig names its method and carries the method's own parameters as data; everything it knows about a
method (its name, parameters, whether it needs a draft, the backends that serve it) it reads from the method
registry (engine.core.methods; engine.drafters registers the methods). The checks on k and on a method's
backend are written here once and called everywhere; the number checks at the edge of their type (seeds,
temperatures, sizes) are engine.core.validation's. Pure Python: imports nothing but engine.core's errors,
validation, methods and sampling_fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Mapping

from engine.core.errors import ConfigError
from engine.core.methods import MethodSpec, check_params, method_spec, param_owner, plain_method
from engine.core.sampling_fields import SamplingField, described, described_fields
from engine.core.validation import (MAX_SEED, MAX_TEMPERATURE, MAX_TOP_K, check_seed, check_temperature, check_top_k,
                                    check_top_p)

BACKENDS = ("transformers", "llama.cpp")  # the one list of local backends: engine.backends.REGISTRY is built from it
MAX_K = 64
REMOTE_PREFIX = "remote:"


def check_k(k) -> int:
    """k (tokens drafted per round) is an integer from 1 to MAX_K."""
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_K:
        raise ConfigError(f"k must be an integer from 1 to {MAX_K}, got {k!r}")
    return k


MAX_TREE = 128  # nodes a round's tree may have (EAGLE-2's default is 60)


def check_tree(tree) -> int:
    """tree (a round's node budget; 0: a chain of k) is an integer from 0 to MAX_TREE."""
    if not isinstance(tree, int) or isinstance(tree, bool) or not 0 <= tree <= MAX_TREE:
        raise ConfigError(f"tree must be a whole number of nodes from 0 (a chain) to {MAX_TREE}, got {tree!r}")
    return tree


def check_backend(method: str, backend: str) -> None:
    """Refuse a method the backend can't serve (early exit needs the transformers backend), with the reason."""
    info = method_spec(method)
    if not info.supports(backend):
        served = " or ".join(info.backends)
        why = f" ({info.why_not})" if info.why_not else ""
        raise ConfigError(f"method {method} needs the {served} backend; this model runs on {backend}{why}")


@dataclass(frozen=True, slots=True)
class SamplingConfig:
    """How the next token is picked. temperature == 0 means greedy (argmax). Each field is described once
    (engine.core.sampling_fields.SamplingField: SAMPLING_FIELDS), and everything that stores, shows, parses or
    edits one reads that description."""

    temperature: float = described(SamplingField(
        0.0, float, check_temperature, "0 = greedy", "Temperature", words="temperature",
        control_range=(0.0, MAX_TEMPERATURE), step=0.1, decimals=2, special="0 (greedy)"))
    top_p: float = described(SamplingField(
        1.0, float, check_top_p, "1 = off", "Top-p", control_range=(0.01, 1.0), step=0.05, decimals=2,
        greedy_ignores=True))
    top_k: int = described(SamplingField(
        0, int, check_top_k, "0 = off", "Top-k", control_range=(0, MAX_TOP_K), special="off", greedy_ignores=True))
    seed: int | None = described(SamplingField(
        None, int, check_seed, "random seed for sampling", "Seed", words="seed", control_range=(-1, MAX_SEED),
        special="random", unset_shown=-1, greedy_ignores=True))

    def __post_init__(self) -> None:
        for description in SAMPLING_FIELDS:
            object.__setattr__(self, description.name, description.check(getattr(self, description.name)))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


SAMPLING_FIELDS: tuple[SamplingField, ...] = described_fields(SamplingConfig)


def sampling_to_record(sampling: SamplingConfig) -> dict:
    """`sampling` as a flat JSON-ready dict, one key per field (None: a random seed)."""
    return {f.name: getattr(sampling, f.name) for f in SAMPLING_FIELDS}


def sampling_from_record(record: Mapping) -> SamplingConfig:
    """The SamplingConfig a record of `sampling_to_record` describes; a key missing (an older record) or None
    takes its default, a key no field has is left out. ConfigError for values that don't fit."""
    return SamplingConfig(**{f.name: record[f.name] for f in SAMPLING_FIELDS if record.get(f.name) is not None})


def sampling_to_values(sampling: SamplingConfig) -> dict:
    """`sampling` as the numbers its controls show and QSettings keeps: no None (a random seed is -1)."""
    return {f.name: f.shown(getattr(sampling, f.name)) for f in SAMPLING_FIELDS}


def sampling_from_values(values: Mapping) -> SamplingConfig:
    """The SamplingConfig that controls' numbers (`sampling_to_values`) stand for; a field missing takes its
    default. ConfigError for values that don't fit."""
    return SamplingConfig(**{f.name: f.from_shown(values[f.name]) for f in SAMPLING_FIELDS if f.name in values})


def sampling_words(sampling: SamplingConfig) -> str:
    """What a settings line says of `sampling`: "temperature 0.7 · seed 7" (the fields with words, when set)."""
    return " · ".join(f"{f.words} {getattr(sampling, f.name)}" for f in SAMPLING_FIELDS
                      if f.words and getattr(sampling, f.name) is not None)


@dataclass(frozen=True, slots=True)
class SpecConfig:
    """Which drafter proposes tokens, how many (k) per round, and the method's own parameters.

    `params` holds (name, value) pairs of the method's ParamSpecs that differ from their defaults (a mapping
    is accepted on creation); `param(name)` reads one, default included. `method=None` is plain decoding."""

    method: str | None = None
    k: int = 4
    draft: str | None = None  # a draft model (name, path or "default"), or a head folder (reads_head)
    params: tuple[tuple[str, object], ...] = ()
    adaptive: bool = False  # draft only as many tokens (≤ k) as pay for their verification
    tree: int = 0  # a round drafts a tree of up to this many nodes, k deep (0: a chain of k); branching methods only
    backend: str | None = None  # the backend (BACKENDS) to run on, or remote:url=… (a server); None: as loaded
    warnings: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if self.method is None:
            object.__setattr__(self, "method", plain_method().name)
        info = method_spec(self.method)
        check_k(self.k)
        if info.needs_draft and not self.draft:
            raise ConfigError(f"method {self.method} needs a draft model (--draft NAME, or 'default')")
        self._check_backend(info)
        notes = list(self.warnings)
        object.__setattr__(self, "params", _own_params(info, self.params, notes))
        if self.draft and not (info.needs_draft or info.reads_head):
            notes.append(f"a draft model is ignored by method {self.method}")
            object.__setattr__(self, "draft", None)
        object.__setattr__(self, "adaptive", bool(self.adaptive))
        if check_tree(self.tree) and not info.branches:
            if info.speculative:
                notes.append(f"tree={self.tree} is ignored by method {self.method}: it drafts one chain a round")
            object.__setattr__(self, "tree", 0)
        object.__setattr__(self, "warnings", tuple(dict.fromkeys(notes)))

    def _check_backend(self, info: MethodSpec) -> None:
        if self.remote_url is not None and info.speculative:
            raise ConfigError(f"{self.backend} runs as its server was started: it takes no method "
                              f"({self.method}) of SpecScope's own")
        if self.backend is not None and self.remote_url is None:
            if self.backend not in BACKENDS:
                raise ConfigError(f"unknown backend {self.backend!r}; use {' or '.join(BACKENDS)}")
            if not info.supports(self.backend):
                raise ConfigError(f"method {self.method} needs the {' or '.join(info.backends)} backend, not "
                                  f"{self.backend}")

    @property
    def info(self) -> MethodSpec:
        """This config's method, as registered."""
        return method_spec(self.method)

    @property
    def speculative(self) -> bool:
        return self.info.speculative

    @property
    def learns(self) -> bool:
        """This setting learns from finished replies across chats (the method's MethodSpec.learns)."""
        return self.info.learns is not None and bool(self.info.learns(self))

    @property
    def remote_url(self) -> str | None:
        """The server's address when this setting runs on a server (`backend=remote:url=…`), else None."""
        return parse_remote(self.backend) if self.backend and self.backend.startswith(REMOTE_PREFIX) else None

    def param(self, name: str):
        """The value of the method's parameter `name` (its default when not set); None for a parameter the
        method doesn't have."""
        given = dict(self.params)
        if name in given:
            return given[name]
        param = self.info.param(name)
        return None if param is None else param.default

    def param_values(self) -> dict[str, object]:
        """Every parameter of the method with its value, defaults included, in declaration order."""
        return {p.name: self.param(p.name) for p in self.info.params}

    def label(self) -> str:
        """The SPEC string that parses back to this config (`prompt-lookup:k=5`)."""
        if self.remote_url is not None:
            return self.backend
        on = f"backend={self.backend}" if self.backend else None
        info = self.info
        if not info.speculative:
            return f"{self.method}:{on}" if on else self.method
        parts = [f"k={self.k}"]
        if self.draft:
            parts.append(f"draft={self.draft}")
        parts += [f"{name}={info.param(name).format(value)}" for name, value in self.params]
        if self.tree:
            parts.append(f"tree={self.tree}")
        if self.adaptive:
            parts.append("adaptive=1")
        if on:
            parts.append(on)
        return f"{self.method}:{','.join(parts)}"

    def with_k(self, k: int) -> "SpecConfig":
        return replace(self, k=k, warnings=())

    def with_tree(self, tree: int) -> "SpecConfig":
        return replace(self, tree=tree, warnings=())

    def with_params(self, **values) -> "SpecConfig":
        """This config with some of its method's parameters set (None: back to the default)."""
        return replace(self, params={**dict(self.params), **values}, warnings=())


def _own_params(info: MethodSpec, given, notes: list[str]) -> tuple[tuple[str, object], ...]:
    """`given` (a mapping or (name, value) pairs) checked against the method's ParamSpecs, as the pairs that
    differ from their defaults, in declaration order. A parameter of another method is dropped with a note in
    `notes`; one no method has is a ConfigError."""
    values: dict[str, object] = {}
    for name, value in (given.items() if isinstance(given, Mapping) else given):
        param = info.param(name)
        if param is not None:
            values[name] = value
            continue
        owner = param_owner(name)
        if owner is None:
            raise ConfigError(f"unknown setting {name!r} for method {info.name}")
        if value is not None and value != owner[1].default:
            owner[1].check(value, owner[0].name)  # a bad value is refused even where it would be ignored
            notes.append(f"{owner[1].cli_flag} is ignored by method {info.name}")
    resolved = {p.name: values.get(p.name, p.default) for p in info.params}
    check_params(info, resolved)
    return tuple((p.name, resolved[p.name]) for p in info.params if resolved[p.name] != p.default)


# the SpecConfig fields every method has, as SPEC keys (the method's parameters come from its ParamSpecs)
_FIXED_KEYS = ("k", "draft", "tree", "adaptive", "backend")


def _spec_keys(info: MethodSpec) -> str:
    tree = ("tree",) if info.branches else ()  # accepted from any method (with a warning); offered where it branches
    return ", ".join(("k", "draft", *(p.name for p in info.params), *tree, "adaptive", "backend"))


def _parse_fixed(key: str, value: str, text: str):
    if key in ("draft", "backend"):
        return value.strip()
    if key == "adaptive":
        if value.strip().lower() not in ("0", "1", "true", "false", "yes", "no", "on", "off"):
            raise ConfigError(f"adaptive must be 0 or 1 in {text!r}, got {value!r}")
        return value.strip().lower() in ("1", "true", "yes", "on")
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"{key} must be an integer in {text!r}, got {value!r}") from None


def parse_remote(text: str) -> str | None:
    """The server address of a `remote:url=http(s)://HOST:PORT` setting (a model served elsewhere, run as
    it was started: engine.remote.engine), or None when `text` is a SpecConfig's SPEC string."""
    if not text.strip().startswith(REMOTE_PREFIX):
        return None
    key, sep, url = text.strip()[len(REMOTE_PREFIX):].partition("=")
    if key.strip() != "url" or not sep or not url.strip():
        raise ConfigError(f"a remote setting is remote:url=http(s)://HOST:PORT, got {text!r}")
    return url.strip()


def parse_spec(text: str) -> SpecConfig:
    """Parse `method[:key=value,...]`, e.g. `prompt-lookup:k=5`, `draft-model:k=4,draft=default`,
    `prompt-lookup:k=4,backend=transformers`: the keys are k, draft, adaptive, backend and the method's own
    parameters (engine.core.methods.ParamSpec). `remote:url=http://HOST:PORT` is the model on that server
    (plain decoding, backend `remote:url=…`: it runs as the server was started)."""
    url = parse_remote(text)
    if url is not None:
        return SpecConfig(backend=f"{REMOTE_PREFIX}url={url}")
    method, _, rest = text.strip().partition(":")
    info = method_spec(method.strip())
    values: dict[str, object] = {}
    params: dict[str, object] = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        param = next((p for p in info.params if key == p.name or key in p.aliases), None)
        if sep and key in _FIXED_KEYS:
            values[key] = _parse_fixed(key, value, text)
        elif sep and param is not None:
            params[param.name] = param.parse(value, text)
        else:
            raise ConfigError(f"bad setting {item!r} in {text!r}; use key=value with keys {_spec_keys(info)}")
    return SpecConfig(method=info.name, params=params, **values)


def spec_to_record(spec: SpecConfig) -> dict:
    """`spec` as a flat JSON-ready dict: method, k, draft, adaptive, backend and each of the method's
    parameters (defaults included: None is auto)."""
    record = {f.name: getattr(spec, f.name) for f in fields(SpecConfig) if f.name not in ("params", "warnings")}
    record.update(spec.param_values())
    return record


_RECORD_FIELDS = tuple(f.name for f in fields(SpecConfig) if f.name not in ("method", "params", "warnings"))


def spec_from_record(record: Mapping) -> SpecConfig:
    """The SpecConfig a record of `spec_to_record` (or an older record with fewer keys) describes; a key that
    is no parameter of its method is left out. ConfigError for values that don't fit."""
    info = method_spec(record.get("method") or plain_method().name)
    kept = {name: record[name] for name in _RECORD_FIELDS if record.get(name) is not None}
    params = {p.name: record[p.name] for p in info.params if p.name in record}
    return SpecConfig(method=info.name, params=params, **kept)
