"""The settings panel's Sampling box (gui.views.chat.sampling_box.SamplingBox), made from SamplingConfig's field
descriptions: the controls the chat panel has always had (ranges, steps, decimals, the text of their "off"
values), a SamplingConfig set and read back whole, `changed` on every change, and greedy decoding (temperature
0) disabling top-p, top-k and seed with the reason as their tooltip."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QDoubleSpinBox, QSpinBox

from engine.core.config import SamplingConfig
from gui.views.chat.sampling_box import GREEDY_IGNORES, SamplingBox

IGNORED_WHEN_GREEDY = ("top_p", "top_k", "seed")


@pytest.fixture
def box(qtbot):
    made = SamplingBox()
    qtbot.addWidget(made)
    return made


def test_the_controls_are_the_chat_panels_own(box):
    temperature, top_p, top_k, seed = (box.controls[name] for name in ("temperature", "top_p", "top_k", "seed"))
    assert list(box.controls) == ["temperature", "top_p", "top_k", "seed"]
    assert isinstance(temperature, QDoubleSpinBox) and isinstance(top_p, QDoubleSpinBox)
    assert isinstance(top_k, QSpinBox) and isinstance(seed, QSpinBox)
    assert (temperature.minimum(), temperature.maximum(), temperature.singleStep(), temperature.decimals(),
            temperature.specialValueText(), temperature.value()) == (0.0, 5.0, 0.1, 2, "0 (greedy)", 0.0)
    assert (top_p.minimum(), top_p.maximum(), top_p.singleStep(), top_p.decimals(), top_p.specialValueText(),
            top_p.value()) == (0.01, 1.0, 0.05, 2, "", 1.0)
    assert (top_k.minimum(), top_k.maximum(), top_k.specialValueText(), top_k.value()) == (0, 100_000, "off", 0)
    assert (seed.minimum(), seed.maximum(), seed.specialValueText(), seed.value()) == (-1, 2**31 - 1, "random", -1)
    assert (box.budget.minimum(), box.budget.maximum(), box.budget.singleStep(), box.max_new_tokens()) == (
        1, 1_000_000, 64, 256)
    assert box.title() == "Sampling" and box.sampling() == SamplingConfig()


@pytest.mark.parametrize("sampling", [SamplingConfig(), SamplingConfig(temperature=0.7, top_p=0.9, top_k=40, seed=7),
                                      SamplingConfig(temperature=1.25, seed=0)], ids=["defaults", "all", "seed 0"])
def test_a_sampling_set_reads_back_whole(box, sampling):
    box.set_sampling(SamplingConfig(temperature=2.0, top_p=0.5, top_k=3, seed=99))  # away from it first
    box.set_sampling(sampling)
    assert box.sampling() == sampling
    assert box.values()["seed"] == (-1 if sampling.seed is None else sampling.seed)


def test_set_values_leaves_what_is_none_and_refuses_a_name_no_field_has(box):
    box.set_values(temperature=0.5, seed=None)
    assert box.sampling() == SamplingConfig(temperature=0.5)
    with pytest.raises(TypeError, match="min_p"):
        box.set_values(min_p=0.1)


@pytest.mark.parametrize("name, value", [("temperature", 0.8), ("top_p", 0.5), ("top_k", 9), ("seed", 4)])
def test_every_control_tells_of_a_change(box, qtbot, name, value):
    with qtbot.waitSignal(box.changed, timeout=1000):
        box.controls[name].setValue(value)
    with qtbot.waitSignal(box.changed, timeout=1000):
        box.set_max_new_tokens(99)
    assert box.max_new_tokens() == 99


def test_greedy_disables_what_it_ignores_and_says_why(box):
    def states():
        return {name: (box.controls[name].isEnabled(), box.controls[name].toolTip()) for name in IGNORED_WHEN_GREEDY}

    assert states() == {name: (False, GREEDY_IGNORES) for name in IGNORED_WHEN_GREEDY}
    assert box.controls["temperature"].isEnabled() and box.controls["temperature"].toolTip() == ""
    box.controls["temperature"].setValue(0.7)
    assert states() == {name: (True, "") for name in IGNORED_WHEN_GREEDY}
    box.set_sampling(SamplingConfig(top_k=5))
    assert states() == {name: (False, GREEDY_IGNORES) for name in IGNORED_WHEN_GREEDY}
