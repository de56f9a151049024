"""What the app remembers between runs, in Qt's QSettings: the last model, draft, method, k, sampling, the
device and dtype, the plain-decoding speed per model, device and dtype (measured once, with its date), the model
folders and files the user added, the window layout, the user's answers to
"run this model's own code?" / "load these pickle weights?" (per model), and per model the folder its eagle head
was trained into and whether the offer to train one was declined.

Never the Hugging Face token: that lives in the OS keyring only (engine/models/secrets.py).

Where: Qt's per-user location for organisation "SpecScope", application "SpecScope"; SPECSCOPE_SETTINGS_DIR
puts an INI file there instead (tests: the user's real settings are never touched). Where that file can't be
written (a folder that can't be made), the settings hold for the session only and `AppSettings.problem` says
why; the app works on.

May touch: QSettings and the file system under that location, the method registry and SamplingConfig's field
descriptions (read: which fields the panel has); no widget, no model.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from PySide6.QtCore import QSettings

import engine.drafters  # noqa: F401  (registers the methods)
from engine.core.config import SAMPLING_FIELDS
from engine.core.methods import all_params

ORGANIZATION = "SpecScope"
APPLICATION = "SpecScope"
SETTINGS_FILE = "specscope.ini"
CONSENT_KINDS = ("remote-code", "pickle")


def app_settings() -> QSettings:
    override = os.environ.get("SPECSCOPE_SETTINGS_DIR")
    if override:
        folder = Path(override).expanduser()
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:  # kept for this session only: AppSettings.problem says so
            pass
        return QSettings(str(folder / SETTINGS_FILE), QSettings.Format.IniFormat)
    return QSettings(QSettings.Format.IniFormat, QSettings.Scope.UserScope, ORGANIZATION, APPLICATION)


def export_folder() -> Path:
    """Where every save dialog starts (chat exports, comparison tables, images): the user's documents folder,
    else the home folder."""
    from PySide6.QtCore import QStandardPaths

    documents = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.DocumentsLocation)
    return Path(documents) if documents and Path(documents).is_dir() else Path.home()


# the chat's settings panel as remembered between runs: name, type (keys chat/NAME); the method parameters
# (chat_fields) come in after k, then the tree's node budget (a chat remembered before it has no chat/tree: the
# panel's is left as it is); the sampling fields (engine.core.config.SAMPLING_FIELDS: their controls' numbers, a
# random seed -1) after adaptive
CHAT_FIELDS = (("model", str), ("method", str), ("draft", str), ("k", int), ("tree", int), ("adaptive", bool),
               *((field.name, field.type) for field in SAMPLING_FIELDS),
               ("max_new_tokens", int), ("system_prompt", str))


def chat_fields() -> tuple[tuple[str, type], ...]:
    """CHAT_FIELDS and each registered method parameter (engine.core.methods.ParamSpec) by its name and type."""
    return CHAT_FIELDS[:4] + tuple((p.name, p.type) for p in all_params()) + CHAT_FIELDS[4:]


class AppSettings:
    """Typed access to the QSettings keys the app uses."""

    def __init__(self, settings: QSettings | None = None) -> None:
        self.qsettings = settings if settings is not None else app_settings()

    def problem(self) -> str | None:
        """Why the settings can't be kept for the next run (their file can't be written), in words; else None."""
        if self.qsettings.isWritable():
            return None
        return (f"Settings are kept for this session only: {self.qsettings.fileName()} can't be written (its folder "
                "can't be made, or it is read-only).")

    # -- plain values
    def value(self, key: str, default=None, kind: type | None = None):
        raw = self.qsettings.value(key, None)
        if raw is None:
            return default
        if kind is None:
            return raw
        try:
            if kind is bool:
                return raw if isinstance(raw, bool) else str(raw).lower() in ("1", "true", "yes")
            return kind(raw)
        except (TypeError, ValueError):
            return default

    def set_value(self, key: str, value) -> None:
        if value is None:
            self.qsettings.remove(key)
        else:
            self.qsettings.setValue(key, value)

    def sync(self) -> None:
        self.qsettings.sync()

    # -- JSON values (lists and maps whose keys may hold '/', which QSettings would read as groups)
    def json_value(self, key: str, default):
        raw = self.qsettings.value(key, None)
        if raw is None:
            return default
        try:
            value = json.loads(str(raw))
        except ValueError:
            return default
        return value if isinstance(value, type(default)) else default

    def set_json_value(self, key: str, value) -> None:
        self.qsettings.setValue(key, json.dumps(value, ensure_ascii=False))

    # -- the chat's settings panel and the window's layout
    def chat_values(self) -> dict:
        """The remembered chat_fields() that are set, typed."""
        values = {name: self.value(f"chat/{name}", None, kind) for name, kind in chat_fields()}
        return {name: value for name, value in values.items() if value is not None}

    def set_chat_values(self, values: dict) -> None:
        for name, _kind in chat_fields():
            if name in values:
                self.set_value(f"chat/{name}", values[name])

    # -- models the user added (folders and .gguf files)
    def added_models(self) -> list[str]:
        return [str(p) for p in self.json_value("models/added", []) if isinstance(p, str)]

    def set_added_models(self, paths: list[str]) -> None:
        self.set_json_value("models/added", list(dict.fromkeys(paths)))

    # -- device and dtype for loading
    def device(self) -> str:
        return self.value("models/device", "auto", str)

    def dtype(self) -> str:
        return self.value("models/dtype", "auto", str)

    def set_device(self, device: str, dtype: str) -> None:
        self.set_value("models/device", device)
        self.set_value("models/dtype", dtype)

    # -- the plain-decoding speed per model, device and dtype (gui.sessions.chat.baseline_key)
    def baselines(self) -> dict[str, dict]:
        """key -> {"tok_per_s": float, "measured_at": seconds since the epoch}."""
        return {k: v for k, v in self.json_value("baselines/plain", {}).items() if isinstance(v, dict)}

    def set_baseline(self, key: str, tok_per_s: float, measured_at: float) -> None:
        values = self.json_value("baselines/plain", {})
        values[key] = {"tok_per_s": float(tok_per_s), "measured_at": float(measured_at)}
        self.set_json_value("baselines/plain", values)

    # -- per-model consent: None (never asked), True, False
    def consent(self, kind: str, model: str) -> bool | None:
        answers = self.json_value(f"consent/{kind}", {})
        answer = answers.get(model)
        return answer if isinstance(answer, bool) else None

    def consent_answers(self) -> dict[str, dict]:
        """Every remembered answer: kind -> {model: answer}."""
        return {kind: self.json_value(f"consent/{kind}", {}) for kind in CONSENT_KINDS}

    def set_consent(self, kind: str, model: str, answer: bool) -> None:
        if kind not in CONSENT_KINDS:
            raise ValueError(f"unknown consent kind {kind!r}")
        answers = self.json_value(f"consent/{kind}", {})
        answers[model] = bool(answer)
        self.set_json_value(f"consent/{kind}", answers)

    # -- eagle heads trained here (gui.views.dialogs.training): where each model's went, and a declined offer
    def eagle_head_folder(self, model: str) -> str | None:
        folder = self.json_value("eagle/heads", {}).get(model)
        return folder if isinstance(folder, str) else None

    def set_eagle_head_folder(self, model: str, folder: str) -> None:
        folders = self.json_value("eagle/heads", {})
        folders[model] = str(folder)
        self.set_json_value("eagle/heads", folders)

    def training_offer_declined(self, model: str) -> bool:
        return model in self.json_value("eagle/offer_declined", [])

    def set_training_offer_declined(self, model: str) -> None:
        declined = self.json_value("eagle/offer_declined", [])
        self.set_json_value("eagle/offer_declined", list(dict.fromkeys([*declined, model])))
