"""'Which setting is fastest here?' on the fake engine with canned timings: every setting repeated, the median
and its range shown, the winner applied to the chat; a method the model refuses is left out with its reason."""

import dataclasses
import os

from engine.core.errors import ConfigError
from engine.core.events import GenerationFinished
from fakes import FakeEngine

WAIT_MS = 20_000
# tok/s by setting and repeat: plain decoding 10; prompt lookup k=2 fastest in the median, k=4 with one outlier
CANNED = {"none": (10, 10, 10), "prompt-lookup:k=2": (14, 15, 16), "prompt-lookup:k=4": (30, 12, 11),
          "prompt-lookup:k=6": (9, 9, 8)}
SLOWER = (5, 5, 5)  # every other method the sweep tries (suffix, the n-gram pools…)


@dataclasses.dataclass
class CannedEngine(FakeEngine):
    """The fake's events, with each run's speed taken from CANNED (repeat after repeat)."""

    refuse_early_exit: bool = True
    seen: dict = dataclasses.field(default_factory=dict)

    def validate(self, spec):
        if spec.method == "early-exit" and self.refuse_early_exit:
            raise ConfigError("early exit needs the transformers backend; this model runs on llama.cpp")
        super().validate(spec)

    def generate(self, conversation, **kwargs):
        label = kwargs["spec"].label()
        repeat = self.seen.get(label, 0)
        self.seen[label] = repeat + 1
        for event in super().generate(conversation, **kwargs):
            if isinstance(event, GenerationFinished):  # any other swept setting: slower than plain
                stats = event.stats
                rate = CANNED.get(label, SLOWER)[repeat % 3]
                stats = dataclasses.replace(stats, ttft_seconds=0.0, elapsed_seconds=stats.decode_tokens / rate)
                event = dataclasses.replace(event, stats=stats)
            yield event


def open_fastest(window, qtbot, send_and_wait):
    send_and_wait(window, "Write a haiku about the sea")
    dialog = window.open_fastest()
    qtbot.addWidget(dialog)
    return dialog


def test_fastest_sweep_medians_ranges_and_applies_the_winner(make_window, qtbot, send_and_wait):
    window = make_window(CannedEngine())
    window.controls.apply(max_new_tokens=20)
    dialog = open_fastest(window, qtbot, send_and_wait)
    assert "Write a haiku about the sea" in dialog.intro.text()
    dialog.max_new_tokens.setValue(24)
    with qtbot.waitSignal(dialog.sweep_finished, timeout=WAIT_MS) as blocker:
        assert dialog.start()
        assert not window.send_button.isEnabled()  # the device is taken
    result = blocker.args[0]
    assert result.repeats == 3
    # plain decoding ran once per repeat, every setting three times, early exit never (refused, left out)
    engine = window.engine
    assert engine.seen["none"] == 4  # the chat's reply, then once per repeat
    assert engine.seen["prompt-lookup:k=2"] == engine.seen["prompt-lookup:k=6"] == 3
    assert "early-exit:k=2" not in engine.seen
    assert result.winner.spec.label() == "prompt-lookup:k=2"
    assert abs(result.winner.median - 1.5) < 0.01 and abs(result.winner.low - 1.4) < 0.01
    k4 = next(r for r in result.results if r.spec.label() == "prompt-lookup:k=4")
    assert abs(k4.median - 1.2) < 0.01 and abs(k4.high - 3.0) < 0.01  # the outlier is in the range, not the figure
    rows = [[dialog.table.item(r, c).text() for c in range(dialog.table.columnCount())]
            for r in range(dialog.table.rowCount())]
    assert rows[0][0] == "★ prompt-lookup:k=2" and rows[0][1] == "1.50×" and rows[0][2] == "1.40 – 1.60×"
    assert any(row[0] == "plain decoding (none)" and row[1] == "1.00×" for row in rows)
    assert "Fastest here: prompt-lookup:k=2 at 1.50×" in dialog.verdict.text()
    assert "Left out: early exit (self-speculative): early exit needs the transformers backend" in dialog.verdict.text()
    assert dialog.status.text() == "Done · 3 of 3 repeats"
    shots = os.environ.get("SPECSCOPE_SHOTS")
    if shots:
        dialog.grab().save(os.path.join(shots, "fastest.png"))
    dialog.apply_button.click()
    assert window.controls.method_name() == "prompt-lookup" and window.controls.k.value() == 2
    assert window.send_button.isEnabled()


def test_fastest_needs_a_prompt_and_refuses_bad_k(make_window, qtbot):
    window = make_window(CannedEngine())
    dialog = window.open_fastest()
    qtbot.addWidget(dialog)
    assert "Send a message in the chat first" in dialog.intro.text()
    with qtbot.waitSignal(dialog.sweep_failed, timeout=WAIT_MS):
        assert not dialog.start()
    assert dialog.status.text().startswith("Refused: send a message in the chat first")
    window.session.add_user("hello there")
    dialog.ks.setText("2, x")
    assert not dialog.start()
    assert dialog.status.text() == "Refused: k values must be whole numbers separated by commas, got '2, x'"
    dialog.ks.setText("0")
    assert not dialog.start() and "k must be an integer from 1 to 64" in dialog.status.text()


def test_stopping_the_sweep_keeps_complete_repeats(make_window, qtbot, send_and_wait):
    engine = CannedEngine(refuse_early_exit=False)
    window = make_window(engine)
    window.controls.apply(max_new_tokens=12)
    dialog = open_fastest(window, qtbot, send_and_wait)
    dialog.ks.setText("2")
    engine.pause_after = 2
    with qtbot.waitSignal(dialog.sweep_finished, timeout=WAIT_MS) as blocker:
        dialog.start()
        qtbot.waitUntil(lambda: engine.seen.get("none", 0) >= 2, timeout=WAIT_MS)
        dialog.stop()
    assert blocker.args[0] is None  # stopped inside the first repeat: no answer, and no claim
    assert dialog.status.text() == "Stopped · 0 of 3 repeats" and not dialog.apply_button.isEnabled()
