"""A reply's settings as the history stores them (gui.sessions.chat.settings_record, the SpecConfig's one
record) come back into the settings panel whole (gui.persistence.replay.apply_values): method, k, draft,
every parameter of the method and adaptive, for every registered method; and the panel's fields survive a
restart through QSettings (gui.persistence.settings)."""

import pytest

from engine.core.config import SamplingConfig, SpecConfig
from engine.core.methods import ParamSpec, methods
from gui.persistence.replay import apply_values
from gui.persistence.settings import AppSettings, app_settings
from gui.sessions.chat import Settings, settings_record
from gui.views.chat.controls import ControlsPanel


def other_value(param: ParamSpec):
    if param.type is bool:
        return not param.default
    low = param.min if param.min is not None else 0
    value = (low + 1) if param.default is None else param.default + 1
    if param.max is not None and value > param.max:  # a bounded parameter (a probability): halfway down instead
        value = ((param.default if param.default is not None else param.max) + low) / 2
    return param.type(value)


def varied(method) -> SpecConfig:
    """`method` with k, adaptive and each of its parameters away from their defaults."""
    drafting = {"k": 3, "adaptive": True} if method.speculative else {}
    return SpecConfig(method=method.name, draft="small" if method.needs_draft else None,
                      params={p.name: other_value(p) for p in method.params}, **drafting)


@pytest.mark.parametrize("method", [m for m in methods() if m.offered], ids=lambda m: m.name)
def test_a_stored_reply_gives_the_panel_back_every_setting(qtbot, method):
    spec = varied(method)
    settings = Settings(model="default", spec=spec, sampling=SamplingConfig(temperature=0.5, seed=3),
                        max_new_tokens=77, system_prompt="Be brief.")
    record = settings_record(settings, "default")
    panel = ControlsPanel()
    qtbot.addWidget(panel)
    panel.apply(**apply_values(record))
    restored = panel.read()
    assert restored.spec == spec and restored.spec.adaptive == spec.adaptive
    assert (restored.sampling, restored.max_new_tokens, restored.system_prompt) == (
        settings.sampling, 77, "Be brief.")

    # the window remembers the panel between runs; a fresh panel reads it back the same
    remembered = AppSettings(app_settings())
    remembered.set_chat_values(panel.values())
    again = ControlsPanel()
    qtbot.addWidget(again)
    again.apply(**remembered.chat_values())
    assert again.read().spec == spec


def test_a_record_of_a_method_not_registered_now_leaves_the_panel_as_it_is():
    assert set(apply_values({"method": "no-such-method", "k": 3, "max_new_tokens": 9})) == {"max_new_tokens",
                                                                                         "system_prompt"}
