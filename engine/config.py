"""Settings as data: frozen dataclasses, validated on creation."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from engine.errors import ConfigError

METHODS = ("none", "draft-model", "prompt-lookup", "early-exit")
MAX_K = 64


@dataclass(frozen=True, slots=True)
class SamplingConfig:
    """How the next token is picked. temperature == 0 means greedy (argmax)."""

    temperature: float = 0.0
    top_k: int = 0  # 0: off
    top_p: float = 1.0
    seed: int | None = None

    def __post_init__(self) -> None:
        if not self.temperature >= 0:
            raise ConfigError(f"temperature must be ≥ 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"top-p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ConfigError(f"top-k must be ≥ 0 (0 turns it off), got {self.top_k}")

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
    warnings: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ConfigError(f"unknown method {self.method!r}; choose one of {', '.join(METHODS)}")
        if not isinstance(self.k, int) or not 1 <= self.k <= MAX_K:
            raise ConfigError(f"k must be an integer from 1 to {MAX_K}, got {self.k!r}")
        if self.method == "draft-model" and not self.draft:
            raise ConfigError("method draft-model needs a draft model (--draft NAME, or 'default')")
        if self.layers is not None and self.layers < 1:
            raise ConfigError(f"early-exit layers must be ≥ 1, got {self.layers}")
        if not 1 <= self.ngram_min <= self.ngram_max:
            raise ConfigError(
                f"n-gram sizes need 1 ≤ min ≤ max, got min={self.ngram_min} max={self.ngram_max}")
        notes = list(self.warnings)
        if self.draft and self.method != "draft-model":
            notes.append(f"a draft model is ignored by method {self.method}")
            object.__setattr__(self, "draft", None)
        if self.layers is not None and self.method != "early-exit":
            notes.append(f"--layers is ignored by method {self.method}")
            object.__setattr__(self, "layers", None)
        object.__setattr__(self, "warnings", tuple(dict.fromkeys(notes)))

    @property
    def speculative(self) -> bool:
        return self.method != "none"

    def label(self) -> str:
        """The SPEC string that parses back to this config (`prompt-lookup:k=5`)."""
        if self.method == "none":
            return "none"
        parts = [f"k={self.k}"]
        if self.method == "draft-model":
            parts.append(f"draft={self.draft}")
        if self.method == "early-exit" and self.layers is not None:
            parts.append(f"layers={self.layers}")
        if self.method == "prompt-lookup" and (self.ngram_max, self.ngram_min) != (3, 1):
            parts.append(f"ngram_max={self.ngram_max},ngram_min={self.ngram_min}")
        if self.adaptive:
            parts.append("adaptive=1")
        return f"{self.method}:{','.join(parts)}"

    def with_k(self, k: int) -> "SpecConfig":
        return replace(self, k=k, warnings=())


_SPEC_KEYS = {"k": "k", "draft": "draft", "layers": "layers", "ngram_max": "ngram_max", "adaptive": "adaptive",
              "ngram_min": "ngram_min", "max_ngram": "ngram_max", "min_ngram": "ngram_min"}


def parse_spec(text: str) -> SpecConfig:
    """Parse `method[:key=value,...]`, e.g. `prompt-lookup:k=5`, `draft-model:k=4,draft=default`."""
    method, _, rest = text.strip().partition(":")
    values: dict[str, object] = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in _SPEC_KEYS:
            raise ConfigError(
                f"bad setting {item!r} in {text!r}; use key=value with keys k, draft, layers, ngram_max, "
                "ngram_min, adaptive")
        name = _SPEC_KEYS[key]
        if name == "draft":
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
