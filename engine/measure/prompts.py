"""Prompt sets, read one way for `specscope bench`, the comparison and the GUI's compare view.

Three formats, told apart by their content:
- the presets (assets/presets.json): one JSON document `{"presets": [{"id", "category", "title", "prompt"}]}`;
- Spec-Bench question files: JSON lines `{"question_id", "category", "turns": [first, …]}` (first turn used);
- plain JSON lines `{"prompt": …}`, with "category" and "question_id" optional.

Reads the file it is given; nothing else (no Qt, no models).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from engine.core.errors import ConfigError

DEFAULT_CATEGORY = "general"
TITLE_WIDTH = 60


@dataclass(frozen=True, slots=True)
class Prompt:
    """One prompt of a set. `title` is the preset's own title, else the text shortened to one line."""

    id: str
    category: str
    text: str
    title: str = ""


def shorten(text: str, width: int = TITLE_WIDTH) -> str:
    """The text on one line, cut to `width` characters with an ellipsis."""
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1].rstrip() + "…"


def _prompt(id_: object, category: object, text: object, title: object = None) -> Prompt:
    text = str(text)
    return Prompt(str(id_), str(category or DEFAULT_CATEGORY), text, str(title or "") or shorten(text))


def _presets(content: str) -> list[Prompt] | None:
    """The prompts of a presets document, or None when the content is not one."""
    if not (content.lstrip().startswith("{") and '"presets"' in content):
        return None
    try:
        return [_prompt(p["id"], p["category"], p["prompt"], p.get("title")) for p in json.loads(content)["presets"]]
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
        return None  # not a presets document after all: read as JSON lines


def _json_lines(path: str, content: str) -> list[Prompt]:
    """Spec-Bench or {"prompt": …} lines; ConfigError naming the first line that is neither."""
    prompts = []
    for number, line in enumerate(content.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            text = row["turns"][0] if "turns" in row else row["prompt"]
        except (json.JSONDecodeError, KeyError, IndexError, TypeError):
            raise ConfigError(f"{path}:{number} is neither Spec-Bench JSON ({{\"turns\": […]}}) nor "
                              "{\"prompt\": …}") from None
        if not isinstance(text, str):
            raise ConfigError(f"{path}:{number}: the prompt must be text (a JSON string), got "
                              f"{type(text).__name__}")
        prompts.append(_prompt(row.get("question_id", number), row.get("category"), text))
    return prompts


def select(prompts: Iterable[Prompt], categories: Iterable[str] | None = None,
           limit: int | None = None) -> list[Prompt]:
    """The prompts of the given categories (all when None or empty), at most `limit` per category, in order."""
    wanted = set(categories or ())
    taken: dict[str, int] = defaultdict(int)
    chosen = []
    for prompt in prompts:
        if (wanted and prompt.category not in wanted) or (limit is not None and taken[prompt.category] >= limit):
            continue
        taken[prompt.category] += 1
        chosen.append(prompt)
    return chosen


def load_prompts(path: str | Path, categories: Iterable[str] | None = None, limit: int | None = None
                 ) -> list[Prompt]:
    """Every prompt of a presets, Spec-Bench or {"prompt": …} file (see `select` for categories and limit).
    Raises ConfigError for a missing file, a line in no known format, or no prompt left."""
    path = str(path)
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"prompt file not found: {path}")
    try:
        content = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"prompt file {path} is not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
    except OSError as exc:
        raise ConfigError(f"prompt file {path} could not be read ({exc.strerror or type(exc).__name__})") from None
    found = _presets(content)
    prompts = select(found if found is not None else _json_lines(path, content), categories, limit)
    if not prompts:
        wanted = sorted(set(categories or ()))
        raise ConfigError(f"no prompts in {path}" + (f" for categories {', '.join(wanted)}" if wanted else ""))
    return prompts


def categories_of(prompts: Iterable[Prompt]) -> list[str]:
    """The categories in the order they first appear."""
    return list(dict.fromkeys(p.category for p in prompts))


__all__ = ["Prompt", "load_prompts", "select", "categories_of", "shorten", "DEFAULT_CATEGORY"]
