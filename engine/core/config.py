"""Settings as data: frozen dataclasses, validated on creation, and the one table of methods.

`METHOD_TABLE` is where a method's name, the label the user reads, its help line, whether it needs a draft
model or uses the target's layers, and which backends serve it live. The CLI parser, the GUI controls, the
compare view and the benchmark read it; the checks on a method's parameters (`check_k`, `check_layers`,
`check_backend`) are written here once and called everywhere; the number checks at the edge of their type
(seeds, temperatures, sizes) are engine.core.validation's, called from here. Pure Python: imports nothing but the
errors and engine.core.validation.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from engine.core.errors import ConfigError
from engine.core.validation import (check_int, check_seed, check_temperature, check_top_k, check_top_p,
                               MAX_COUNT)

BACKENDS = ("transformers", "llama.cpp")
MAX_K = 64


@dataclass(frozen=True, slots=True)
class Method:
    """One speculation method: what it is called, what the user reads, and what it needs."""

    name: str  # as typed on the command line and stored in settings (`prompt-lookup`)
    label: str  # what the user reads in a menu
    help: str  # one sentence for a tooltip or --help
    needs_draft: bool  # needs a separate draft model (`draft=` / --draft)
    uses_layers: bool  # drafts from the target's own first layers (`layers=` / --layers)
    uses_ngrams: bool  # reads `ngram_max` / `ngram_min`
    backends: tuple[str, ...]  # the backends (BACKENDS) that can serve it
    why_not: str = ""  # why the other backends can't, said when one is refused
    reads_head: bool = False  # `draft=` / --draft names a trained head folder (eagle), not a model

    @property
    def speculative(self) -> bool:
        return self.name != "none"

    def supports(self, backend: str) -> bool:
        return backend in self.backends


METHOD_TABLE: tuple[Method, ...] = (
    Method("none", "none (plain decoding)", "The target model writes every token itself: the baseline.",
           needs_draft=False, uses_layers=False, uses_ngrams=False, backends=BACKENDS),
    Method("draft-model", "draft model",
           "A smaller model with the same tokenizer drafts k tokens; the target verifies them in one pass.",
           needs_draft=True, uses_layers=False, uses_ngrams=False, backends=BACKENDS),
    Method("prompt-lookup", "prompt lookup (n-gram)",
           "Drafts by copying what followed the last n-gram where it appeared earlier in the text.",
           needs_draft=False, uses_layers=False, uses_ngrams=True, backends=BACKENDS),
    Method("early-exit", "early exit (self-speculative)",
           "The target's first layers draft (self-speculation); the full model verifies.",
           needs_draft=False, uses_layers=True, uses_ngrams=False, backends=("transformers",)),
    Method("mtp", "MTP heads (the model drafts for itself)",
           "The target's own multi-token-prediction layers draft, chained as transformers runs them: one token "
           "per MTP layer, so k is at most the number of MTP layers (DeepSeek-V3, GLM-4.5: 1).",
           needs_draft=False, uses_layers=False, uses_ngrams=False, backends=("transformers",),
           why_not="llama-cpp-python 0.3.36 binds llama.cpp's MTP context, but feeding it the target's hidden "
                   "state is not wired here yet"),
    Method("assistant", "Gemma 4 assistant",
           "A Gemma 4 assistant (--draft google/gemma-4-…-assistant) drafts from the target's own KV cache and "
           "last hidden state, one token per pass at a fixed position; any k.",
           needs_draft=True, uses_layers=False, uses_ngrams=False, backends=("transformers",),
           why_not="the assistant reads the target's key/value tensors, which only the transformers backend "
                   "exposes"),
    Method("eagle", "EAGLE head (trained here)",
           "A one-layer head trained on the target's own replies (specscope drafter train) drafts from the "
           "target's last hidden states; --draft DIR names the head (default: the one trained for the model).",
           needs_draft=False, uses_layers=False, uses_ngrams=False, backends=("transformers",), reads_head=True,
           why_not="the head reads the target's hidden states and torch modules (embedding, output head), "
                   "which only the transformers backend exposes"),
)
METHODS: tuple[str, ...] = tuple(m.name for m in METHOD_TABLE)
SPECULATIVE_METHODS: tuple[str, ...] = tuple(m.name for m in METHOD_TABLE if m.speculative)
_BY_NAME = {m.name: m for m in METHOD_TABLE}


def method_info(name: str) -> Method:
    """The table row of a method; ConfigError naming the choices for an unknown one."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ConfigError(f"unknown method {name!r}; choose one of {', '.join(METHODS)}") from None


def check_k(k) -> int:
    """k (tokens drafted per round) is an integer from 1 to MAX_K."""
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_K:
        raise ConfigError(f"k must be an integer from 1 to {MAX_K}, got {k!r}")
    return k


def layer_range(n_layers: int) -> tuple[int, int]:
    """The early-exit layer counts a model of `n_layers` layers allows: (1, n_layers − 1), since drafting
    with every layer is the target itself. (1, 1) for a one-layer model, which check_layers refuses."""
    return 1, max(1, n_layers - 1)


def check_layers(layers: int | None, n_layers: int | None = None) -> int | None:
    """Early-exit `layers` is ≥ 1 and, when the target's layer count is known, below it. None (auto) passes."""
    if layers is None:
        return None
    if not isinstance(layers, int) or isinstance(layers, bool) or not 1 <= layers <= MAX_COUNT:
        raise ConfigError(f"early-exit layers must be ≥ 1, got {layers!r}")
    if n_layers is not None and layers > n_layers - 1:
        raise ConfigError(f"early-exit layers must be from 1 to {n_layers - 1} for this model "
                          f"({n_layers} layers), got {layers}")
    return layers


def check_backend(method: str, backend: str) -> None:
    """Refuse a method the backend can't serve (early exit needs the transformers backend), with the reason."""
    info = method_info(method)
    if not info.supports(backend):
        served = " or ".join(info.backends)
        why = f" ({info.why_not})" if info.why_not else ""
        raise ConfigError(f"method {method} needs the {served} backend; this model runs on {backend}{why}")


@dataclass(frozen=True, slots=True)
class SamplingConfig:
    """How the next token is picked. temperature == 0 means greedy (argmax)."""

    temperature: float = 0.0
    top_k: int = 0  # 0: off
    top_p: float = 1.0
    seed: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "temperature", check_temperature(self.temperature))
        object.__setattr__(self, "top_p", check_top_p(self.top_p))
        check_top_k(self.top_k)
        check_seed(self.seed)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass(frozen=True, slots=True)
class SpecConfig:
    """Which drafter proposes tokens and how many (k) per round."""

    method: str = "none"
    k: int = 4
    draft: str | None = None  # draft-model only: a model name, path or "default"
    layers: int | None = None  # early-exit only: how many of the target's layers draft
    ngram_max: int = 3  # prompt-lookup only
    ngram_min: int = 1  # prompt-lookup only
    adaptive: bool = False  # draft only as many tokens (≤ k) as pay for their verification
    backend: str | None = None  # the backend (BACKENDS) to run on, or remote:url=… (a server); None: as loaded
    warnings: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        info = method_info(self.method)
        check_k(self.k)
        if info.needs_draft and not self.draft:
            raise ConfigError(f"method {self.method} needs a draft model (--draft NAME, or 'default')")
        check_layers(self.layers)
        if self.remote_url is not None and self.speculative:
            raise ConfigError(f"{self.backend} runs as its server was started: it takes no method "
                              f"({self.method}) of SpecScope's own")
        if self.backend is not None and self.remote_url is None:
            if self.backend not in BACKENDS:
                raise ConfigError(f"unknown backend {self.backend!r}; use {' or '.join(BACKENDS)}")
            if not info.supports(self.backend):
                raise ConfigError(f"method {self.method} needs the {' or '.join(info.backends)} backend, not "
                                  f"{self.backend}")
        check_int("--ngram-max", self.ngram_max, 1, MAX_COUNT)
        check_int("--ngram-min", self.ngram_min, 1, MAX_COUNT)
        if not 1 <= self.ngram_min <= self.ngram_max:
            raise ConfigError(
                f"n-gram sizes need 1 ≤ min ≤ max, got min={self.ngram_min} max={self.ngram_max}")
        notes = list(self.warnings)
        if self.draft and not (info.needs_draft or info.reads_head):
            notes.append(f"a draft model is ignored by method {self.method}")
            object.__setattr__(self, "draft", None)
        if self.layers is not None and not info.uses_layers:
            notes.append(f"--layers is ignored by method {self.method}")
            object.__setattr__(self, "layers", None)
        object.__setattr__(self, "warnings", tuple(dict.fromkeys(notes)))

    @property
    def speculative(self) -> bool:
        return self.method != "none"

    @property
    def remote_url(self) -> str | None:
        """The server's address when this setting runs on a server (`backend=remote:url=…`), else None."""
        return parse_remote(self.backend) if self.backend and self.backend.startswith(REMOTE_PREFIX) else None

    @property
    def info(self) -> Method:
        """This config's row of METHOD_TABLE."""
        return _BY_NAME[self.method]

    def label(self) -> str:
        """The SPEC string that parses back to this config (`prompt-lookup:k=5`)."""
        if self.remote_url is not None:
            return self.backend
        on = f"backend={self.backend}" if self.backend else None
        if self.method == "none":
            return f"none:{on}" if on else "none"
        info = self.info
        parts = [f"k={self.k}"]
        if info.needs_draft or (info.reads_head and self.draft):
            parts.append(f"draft={self.draft}")
        if info.uses_layers and self.layers is not None:
            parts.append(f"layers={self.layers}")
        if info.uses_ngrams and (self.ngram_max, self.ngram_min) != (3, 1):
            parts.append(f"ngram_max={self.ngram_max},ngram_min={self.ngram_min}")
        if self.adaptive:
            parts.append("adaptive=1")
        if on:
            parts.append(on)
        return f"{self.method}:{','.join(parts)}"

    def with_k(self, k: int) -> "SpecConfig":
        return replace(self, k=k, warnings=())


_SPEC_KEYS = {"k": "k", "draft": "draft", "layers": "layers", "ngram_max": "ngram_max", "adaptive": "adaptive",
              "ngram_min": "ngram_min", "max_ngram": "ngram_max", "min_ngram": "ngram_min", "backend": "backend"}


REMOTE_PREFIX = "remote:"


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
    `prompt-lookup:k=4,backend=transformers`; `remote:url=http://HOST:PORT` is the model on that server
    (method none, backend `remote:url=…`: it runs as the server was started)."""
    url = parse_remote(text)
    if url is not None:
        return SpecConfig(backend=f"{REMOTE_PREFIX}url={url}")
    method, _, rest = text.strip().partition(":")
    values: dict[str, object] = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in _SPEC_KEYS:
            raise ConfigError(
                f"bad setting {item!r} in {text!r}; use key=value with keys k, draft, layers, ngram_max, "
                "ngram_min, adaptive, backend")
        name = _SPEC_KEYS[key]
        if name in ("draft", "backend"):
            values[name] = value.strip()
        elif name == "adaptive":
            if value.strip().lower() not in ("0", "1", "true", "false", "yes", "no", "on", "off"):
                raise ConfigError(f"adaptive must be 0 or 1 in {text!r}, got {value!r}")
            values[name] = value.strip().lower() in ("1", "true", "yes", "on")
        else:
            try:
                values[name] = int(value)
            except ValueError:
                raise ConfigError(f"{key} must be an integer in {text!r}, got {value!r}") from None
    return SpecConfig(method=method.strip(), **values)
