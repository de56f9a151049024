"""The method registry's mechanism: what a speculation method declares about itself (`MethodSpec`, with its
parameters as `ParamSpec`s) and the container the drafters register into (engine.drafters registers every
method it ships, one line each). Everything that lists, parses, labels, checks or builds a method reads
these records; the loop and the settings never name a method.

Pure Python: imports only engine.core's errors and validation. A MethodSpec's `build` and `check` import their drafter's heavy
modules themselves, so registering costs nothing.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator, Mapping

from engine.core.errors import ConfigError
from engine.core.validation import MAX_COUNT  # the largest number a parameter without a maximum of its own takes
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


@dataclass(frozen=True, slots=True)
class ParamSpec:
    """One parameter of a method: its SPEC key, type, default, range and help (the one source for the CLI
    option, the SPEC key, the GUI control and the compare row)."""

    name: str  # the SPEC key and the record key: `ngram_max`
    type: type  # int, float, bool or str
    default: object  # None: auto (the method picks, e.g. from the target's size)
    help: str  # one line for --help and a tooltip
    min: float | None = None
    max: float | None = None
    flag: str = ""  # the CLI option; "" → --NAME with dashes (`--ngram-max`)
    label: str = ""  # what the user reads beside the GUI control; "" → the name with spaces
    aliases: tuple[str, ...] = ()  # other SPEC keys read as this one (`max_ngram`)

    @property
    def cli_flag(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    @property
    def title(self) -> str:
        return self.label or self.name.replace("_", " ")

    def _range_words(self) -> str:
        if self.max is None:
            return f"≥ {self.min:g}" if self.min is not None else "a number"
        return f"from {self.min:g} to {self.max:g}" if self.min is not None else f"≤ {self.max:g}"

    def check(self, value, method: str):
        """`value` if it has this parameter's type and range (None: auto, where the default is None); else a
        ConfigError that names the method and the parameter."""
        if value is None and self.default is None:
            return None
        where = f"{method} {self.name}"
        if self.type is bool:
            if not isinstance(value, bool):
                raise ConfigError(f"{where} must be true or false, got {value!r}")
            return value
        if self.type is str:
            if not isinstance(value, str):
                raise ConfigError(f"{where} must be text, got {value!r}")
            return value
        if self.type is int and (not isinstance(value, int) or isinstance(value, bool)):
            raise ConfigError(f"{where} must be a whole number {self._range_words()}, got {value!r}")
        if self.type is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ConfigError(f"{where} must be a number {self._range_words()}, got {value!r}")
            value = float(value)
        high = self.max if self.max is not None else MAX_COUNT
        if (self.min is not None and value < self.min) or value > high:
            raise ConfigError(f"{where} must be {self._range_words()}, got {value!r}")
        return value

    def parse(self, text: str, where: str):
        """A value of this type from SPEC or command-line text (range unchecked: `check` does that);
        ConfigError naming `where` (the whole SPEC) for text of another type."""
        text = text.strip()
        if self.type is str:
            return text
        if self.type is bool:
            if text.lower() not in _TRUE + _FALSE:
                raise ConfigError(f"{self.name} must be 0 or 1 in {where!r}, got {text!r}")
            return text.lower() in _TRUE
        try:
            return self.type(text)
        except ValueError:
            kind = "an integer" if self.type is int else "a number"
            raise ConfigError(f"{self.name} must be {kind} in {where!r}, got {text!r}") from None

    def format(self, value) -> str:
        """`value` as SPEC text that `parse` reads back."""
        if self.type is bool:
            return "1" if value else "0"
        return str(value)


@dataclass(frozen=True, slots=True)
class ModelFacts:
    """What is known of a target without its weights: enough for a method's `check_facts`."""

    n_layers: int | None = None  # None: not known yet
    backend: str | None = None


@dataclass(frozen=True, slots=True)
class MethodSpec:
    """One speculation method as everything outside its drafter sees it."""

    name: str  # as typed on the command line and stored in settings
    label: str  # what the user reads in a menu
    description: str  # one line for a tooltip or --help
    build: Callable  # (spec, target, draft, target_runner) -> Drafter; imports its heavy modules itself
    params: tuple[ParamSpec, ...] = ()
    needs_draft: bool = False  # needs a separate draft model (`draft=` / --draft)
    cross_tokenizer: bool = False  # its draft model may have another tokenizer than the target's
    reads_head: bool = False  # `draft=` / --draft names a trained head folder, not a model (optional)
    head_file: str = ""  # a reads_head method whose head is one file: its name pattern (mtp: "mtp-*.gguf");
    # "": a head folder
    backends: tuple[str, ...] = ("transformers", "llama.cpp")  # the backends that can serve it
    branches: bool = False  # drafts a tree of continuations when asked (SpecConfig.tree; Drafter.propose_tree)
    why_not: str = ""  # why the other backends can't, said when one is refused
    cache_params: tuple[str, ...] = ()  # the parameters whose change needs a new drafter (draft always does)
    check: Callable | None = None  # (spec, target, draft) -> None; ConfigError for what only it knows
    check_facts: Callable | None = None  # (spec, ModelFacts) -> None: the part of `check` that needs only the
    # target's facts (a settings panel runs it before a reply, with the loaded model's facts)
    check_params: Callable | None = None  # (params: dict) -> None; ConfigError for parameters that disagree
    hf_generate_kwargs: Callable | None = None  # (spec, engine) -> transformers generate()'s kwargs for the same
    # setting (bench --compare-hf), or None where generate() has no equal
    llama_reference: Callable | None = None  # (spec) -> engine.measure.references.LlamaCppPython's k and ngram_max
    # for the same setting (bench --compare-llama), or None where llama-cpp-python's Llama has no equal
    llama_server_args: Callable | None = None  # (spec, engine) -> llama-server's options for the same setting,
    # naming the files the engine runs (a llama.cpp target; bench --compare-llama-server; ConfigError where this
    # setting has no equal there), or None where it has none
    own_drafter: Callable | None = None  # (catalog entry, its known pairs) -> words, when a model drafts for
    # itself with this method (its MTP layers, its assistant), else None
    own_settings: Callable | None = None  # (catalog entry, pairs) -> {"max_k": …, "draft": …}: what a settings
    # panel sets when it picks this method for a model that drafts for itself
    why_unusable: Callable | None = None  # (catalog entry, pairs) -> why that model can't use this method on any
    # backend (no MTP layers, not a Gemma 4 model), else None: from the entry's facts, before anything loads
    plain: bool = False  # plain decoding: the baseline, no drafter
    implied_by_draft: bool = False  # the method a bare --draft asks for
    needs_target_runner: bool = False  # drafts from the runner the loop verifies on
    offered: bool = True  # in the GUI's method lists and the fastest-setting sweep
    sweep_rank: int | None = None  # where the fastest-setting sweep tries it (None: it doesn't)
    draft_help: str = ""  # what --draft / draft= names for this method
    lookup: bool = False  # drafts from the text alone (no model, no distribution): it may go first in a
    # combination `lookup+model` (engine.drafters.combined), drafting where it has a match
    parts: tuple[str, ...] = ()  # a combination's methods, first the lookup (else ())
    learns: Callable | None = None  # (spec) -> bool: this setting learns from finished replies across chats
    # (kept in the data folder), so a benchmark gives it a store of its own (engine.measure.bench)

    @property
    def speculative(self) -> bool:
        return not self.plain

    def supports(self, backend: str) -> bool:
        return backend in self.backends

    def param(self, name: str) -> ParamSpec | None:
        return next((p for p in self.params if p.name == name), None)


@dataclass(slots=True)
class _Registry:
    by_name: dict[str, MethodSpec] = field(default_factory=dict)


_REGISTRY = _Registry()


def register(spec: MethodSpec) -> MethodSpec:
    """Add a method (engine.drafters does this for its own); ValueError for a name taken already."""
    if spec.name in _REGISTRY.by_name and _REGISTRY.by_name[spec.name] is not spec:
        raise ValueError(f"method {spec.name!r} is registered already")
    if spec.plain and any(m.plain and m is not spec for m in _REGISTRY.by_name.values()):
        raise ValueError("one plain-decoding method only")
    _check_shared_params(spec)
    _REGISTRY.by_name[spec.name] = spec
    return spec


def _check_shared_params(spec: MethodSpec) -> None:
    """ValueError where `spec` declares a parameter that a registered method declares too, but of another type,
    range or option: the command line has one option per name (all_params), so both must read it alike."""
    for param in spec.params:
        for method in _REGISTRY.by_name.values():
            other = method.param(param.name)
            if method is spec or other is None or other is param:
                continue
            differs = [what for what, one, two in (("type", param.type, other.type),
                                                    ("range", (param.min, param.max), (other.min, other.max)),
                                                    ("option", param.cli_flag, other.cli_flag)) if one != two]
            if differs:
                raise ValueError(f"method {spec.name}'s parameter {param.name} ({_shape(param)}) differs in its "
                                 f"{' and '.join(differs)} from method {method.name}'s ({_shape(other)}): one "
                                 "option can't serve both; declare it alike or give it another name")


def _shape(param: ParamSpec) -> str:
    numeric = param.type in (int, float)
    return ", ".join((param.type.__name__, *((param._range_words(),) if numeric else ()), param.cli_flag))


def unregister(name: str) -> None:
    _REGISTRY.by_name.pop(name, None)


@contextmanager
def registered(spec: MethodSpec) -> Iterator[MethodSpec]:
    """`spec` registered for the block, gone afterwards (tests register a method of their own)."""
    register(spec)
    try:
        yield spec
    finally:
        unregister(spec.name)


def _nonempty() -> dict[str, MethodSpec]:
    if not _REGISTRY.by_name:
        raise RuntimeError("no method is registered: import engine.drafters first")
    return _REGISTRY.by_name


def methods() -> tuple[MethodSpec, ...]:
    """Every registered method, in registration order."""
    return tuple(_nonempty().values())


def method_names() -> tuple[str, ...]:
    return tuple(_nonempty())


def method_spec(name: str) -> MethodSpec:
    """The registered method called `name` (a combination `lookup+model` of two registered ones, made on first
    use: combined_spec); ConfigError naming the choices for an unknown one."""
    by_name = _nonempty()
    try:
        return by_name[name]
    except (KeyError, TypeError):
        pass
    if isinstance(name, str) and "+" in name:
        made = _COMBINED.get(name)
        if made is None:
            made = _COMBINED[name] = combined_spec(*(method_spec(part.strip()) for part in name.split("+")))
        return made
    raise ConfigError(f"unknown method {name!r}; choose one of {', '.join(by_name)}, or a lookup method and a "
                      f"model's joined by + (prompt-lookup+draft-model)") from None


_COMBINED: dict[str, MethodSpec] = {}  # combinations made on first use (not listed unless registered)
_COMBINER: dict[str, Callable] = {}  # "drafter": (lookup drafter, model drafter) -> the combined drafter


def register_combiner(combine: Callable) -> None:
    """The drafter of every combined method (engine.drafters registers engine.drafters.combined's), so this
    module builds combinations without importing a drafter."""
    _COMBINER["drafter"] = combine


def combined_spec(*parts: MethodSpec) -> MethodSpec:
    """The method `first+second`: `first`, a lookup (drafts from the text alone), drafts where it has a match;
    `second`, a model or head, drafts otherwise. Its parameters, draft and checks are both methods'; it runs
    on the backends both serve. ConfigError for a combination that can't work, saying why."""
    if len(parts) != 2:
        raise ConfigError(f"a combined method joins two methods (a lookup first, then a model or head), not "
                          f"{len(parts)}: {'+'.join(p.name for p in parts)}")
    first, second = parts
    name = f"{first.name}+{second.name}"
    if not first.lookup:
        raise ConfigError(f"{name}: the first method of a combination drafts from the text alone (a lookup such "
                          f"as prompt-lookup); {first.name} is not one")
    if second.plain or second.lookup or second.parts:
        raise ConfigError(f"{name}: the second method of a combination drafts with a model or head (draft-model, "
                          f"early-exit, eagle, mtp, assistant); {second.name} does not")
    clash = {p.name for p in first.params} & {p.name for p in second.params}
    if clash:
        raise ConfigError(f"{name}: both methods have a parameter {', '.join(sorted(clash))}")
    backends = tuple(b for b in second.backends if b in first.backends)
    if not backends:
        raise ConfigError(f"{name}: no backend serves both methods")

    def both(attribute: str):
        one, two = getattr(first, attribute), getattr(second, attribute)
        if one is None and two is None:
            return None

        def run(*args):
            for check in (one, two):
                if check is not None:
                    check(*args)
        return run

    def check_params(params: dict) -> None:
        for method in parts:
            if method.check_params is not None:
                method.check_params({p.name: params.get(p.name, p.default) for p in method.params})

    def build(spec, target, draft, target_runner):
        combine = _COMBINER.get("drafter")
        if combine is None:
            raise RuntimeError("no combined drafter is registered: import engine.drafters first")
        return combine(first.build(spec, target, None, target_runner), second.build(spec, target, draft, target_runner))

    return MethodSpec(
        name=name, label=f"{first.label} + {second.label}",
        description=f"{first.label} drafts where it finds a match in the text; {second.label} drafts otherwise.",
        build=build, params=first.params + second.params, needs_draft=second.needs_draft,
        cross_tokenizer=second.cross_tokenizer,
        reads_head=second.reads_head, head_file=second.head_file, backends=backends,
        why_not=second.why_not or first.why_not, cache_params=first.cache_params + second.cache_params,
        check=both("check"), check_facts=both("check_facts"), check_params=check_params,
        why_unusable=second.why_unusable, needs_target_runner=first.needs_target_runner or second.needs_target_runner,
        draft_help=second.draft_help, parts=(first.name, second.name), offered=False, learns=first.learns)


def plain_method() -> MethodSpec:
    """The plain-decoding method (no drafter), the baseline every figure is compared with."""
    return next(m for m in methods() if m.plain)


def implied_method() -> str:
    """The name of the method a bare draft asks for (a draft model drafts)."""
    return next(m.name for m in methods() if m.implied_by_draft)


def head_method() -> str:
    """The name of the method whose draft names a trained head folder."""
    return next(m.name for m in methods() if m.reads_head and not m.head_file)


def speculative_methods() -> tuple[MethodSpec, ...]:
    return tuple(m for m in methods() if m.speculative)


def param_owner(name: str) -> tuple[MethodSpec, ParamSpec] | None:
    """The first registered method declaring a parameter (or alias) `name`, with that parameter."""
    for method in methods():
        for param in method.params:
            if name == param.name or name in param.aliases:
                return method, param
    return None


def param_owners(name: str) -> tuple[MethodSpec, ...]:
    """The registered methods (combinations aside) that declare a parameter `name`."""
    return tuple(m for m in methods() if not m.parts and m.param(name) is not None)


def foreign_param_words(method: MethodSpec, name: str) -> str:
    """Why parameter `name`, another method's, does not apply to `method`, in the command line's words:
    "--layers is early-exit's parameter; prompt-lookup takes --ngram-max, --ngram-min"."""
    owners = param_owners(name)
    flag = next((p.cli_flag for m in owners for p in m.params if p.name == name), "--" + name.replace("_", "-"))
    whose = f"{owners[0].name}'s parameter" if len(owners) == 1 else \
        f"a parameter of {', '.join(m.name for m in owners) or 'no method'}"
    takes = ", ".join(p.cli_flag for p in method.params) or "no parameter of its own"
    return f"{flag} is {whose}; {method.name} takes {takes}"


def all_params() -> tuple[ParamSpec, ...]:
    """Every registered method's parameters, one per name (the CLI's options), in registration order; two
    methods' parameters of one name are alike (register refuses them otherwise)."""
    seen: dict[str, ParamSpec] = {}
    for method in methods():
        for param in method.params:
            seen.setdefault(param.name, param)
    return tuple(seen.values())


def check_params(method: MethodSpec, params: Mapping[str, object]) -> None:
    """Each of `params` against its ParamSpec, then the method's own check of how they combine."""
    for name, value in params.items():
        param = method.param(name)
        if param is None:
            raise ConfigError(f"method {method.name} has no parameter {name!r}")
        param.check(value, method.name)
    if method.check_params is not None:
        method.check_params(dict(params))


__all__ = ["ParamSpec", "MethodSpec", "ModelFacts", "register", "register_combiner", "combined_spec", "unregister",
           "registered", "methods",
           "method_names", "method_spec", "plain_method", "implied_method", "head_method", "speculative_methods",
           "param_owner", "param_owners", "foreign_param_words", "all_params", "check_params"]
