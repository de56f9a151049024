"""Speed-up without a hunt: after a speculative reply, while this model has no plain speed, the speed-up card
offers the measurement inline ("Measure plain speed (≈ N s)"); one click measures it and it is remembered."""

import math

from fakes import FakeEngine

WAIT_MS = 10_000
KEY = "default · cpu · float32"


def offer_shown(window) -> bool:
    strip = window.stats_strip
    return strip.offer.isVisibleTo(strip) and not strip.speedup.detail.isVisibleTo(strip)


def test_the_speedup_card_offers_the_measurement_and_one_click_remembers_it(make_window, send_and_wait, qtbot):
    window = make_window()
    strip = window.stats_strip
    assert not offer_shown(window)  # nothing replied yet
    window.controls.apply(method="prompt-lookup", k=4, max_new_tokens=40)
    turn = send_and_wait(window)
    stats = turn.stats
    seconds = math.ceil(stats.ttft_seconds + max(32, stats.committed_tokens) / stats.tok_per_s)
    assert offer_shown(window) and strip.offer.isEnabled()
    assert strip.offer.texts[0] == f"Measure plain speed (≈ {max(1, seconds)} s)"  # shorter where the card is narrow
    assert strip.offer.text() in strip.offer.texts
    assert f"about {max(1, seconds)} s" in strip.offer.toolTip()
    assert strip.speedup.value.text() == "—"
    calls = len(window.engine.calls)
    with qtbot.waitSignal(window.baseline_measured, timeout=WAIT_MS) as blocker:
        strip.offer.click()  # no dialog, no question
    baseline = blocker.args[0]
    assert len(window.engine.calls) == calls + 1 and window.engine.calls[-1].spec.method == "none"
    assert window.engine.calls[-1].max_new_tokens == max(32, stats.committed_tokens)
    assert window.session.baseline().tok_per_s == baseline
    assert window.settings.baselines()[KEY]["tok_per_s"] == baseline  # remembered (the Baseline store)
    assert not offer_shown(window) and strip.speedup.value.text().endswith("×")
    send_and_wait(window, "again")
    assert not offer_shown(window)  # a baseline exists: nothing to offer


def test_no_offer_while_measuring_nor_when_the_plain_speed_is_known(make_window, send_and_wait, qtbot):
    window = make_window(FakeEngine(delay=0.01))
    window.controls.apply(method="draft-model", draft="default", k=4, max_new_tokens=40)
    send_and_wait(window)
    assert offer_shown(window)
    window.measure_baseline()
    assert not window.stats_strip.offer.isEnabled()  # the measurement is running
    qtbot.waitUntil(lambda: not window.generating, timeout=WAIT_MS)
    assert not offer_shown(window)
    second = make_window()  # a later window: the baseline is remembered for this model, device and dtype
    second.controls.apply(method="prompt-lookup", k=4, max_new_tokens=40)
    send_and_wait(second)
    assert second.session.baseline() is not None and not offer_shown(second)


def test_a_plain_reply_is_its_own_reference_and_gets_no_offer(make_window, send_and_wait):
    window = make_window()
    window.controls.apply(method="none", max_new_tokens=40)
    send_and_wait(window)
    assert window.session.baseline() is not None  # as before: the first plain reply is the reference
    assert not offer_shown(window)
