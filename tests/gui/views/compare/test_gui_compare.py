"""The compare window and the k sweep, driven by the scripted FakeEngine; a server's run whose rounds are revised at
its end; the scripted `--compare` mode; one real comparison on the built-in model."""

import csv
import json
import subprocess
import sys
from dataclasses import dataclass, field, replace
from types import SimpleNamespace

import pytest
import torch
from PySide6.QtGui import QImage

from engine.measure.compare import SweepPoint, best_k, sweep_points, sweep_summary
from engine.core.config import SpecConfig, parse_spec
from engine.core.events import GenerationFinished, TokenStatus
from gui import theme
from gui.sessions.compare import load_prompt_choices
from fakes import FakeEngine, FakeModel
import revised_events
from revised_events import RevisingEngine
from transcript_probe import fragments
from gui.resources import app_icon, asset_path
from test_gui_scripted import ROOT, default_model_available, status_pixels, subprocess_env

WAIT_MS = 10_000
SPEC_BENCH = ROOT.parent / "shared" / "benchmarks" / "spec_bench_questions.jsonl"


PLANTED_ID = 99_999


class PlantedRunner:
    """The planted difference's target, as engine.measure.divergence sees it (a Runner): plain decoding's token at
    10.0 and the planted one just below it in a one-token pass but just above it in a batched pass (a bf16
    near-tie); with `mismatch`, the planted token far below either way (a real error)."""

    def __init__(self, engine: "PlantedDifference") -> None:
        self.engine, self.ids, self.device = engine, [], torch.device("cpu")

    def forward(self, new_ids, n_logits):
        self.ids.extend(new_ids)
        rows = torch.zeros(n_logits, PLANTED_ID + 1)
        rows[:, self.engine.plain_id] = 10.0
        rows[:, PLANTED_ID] = 2.0 if self.engine.mismatch else (9.9375 if len(new_ids) == 1 else 10.03125)
        return rows

    def rollback(self, length):
        del self.ids[length:]

    def reset(self):
        self.ids = []

    release = reset


@dataclass
class PlantedTarget(FakeModel):
    backend: str = "fake"
    engine: object = None
    tokenizer: object = field(default_factory=lambda: SimpleNamespace(
        decode=lambda ids, skip_special_tokens=False: "CHANGED" if ids == [PLANTED_ID] else "plain-word"))

    def new_runner(self):
        return PlantedRunner(self.engine)


class PlantedDifference(FakeEngine):
    """Every run gives the same tokens, except `differs` (a SPEC label), whose token `at` is changed: what
    bf16 numerics can do to a greedy speculative run (diagnosed a near-tie), or with `mismatch` a real error."""

    def __init__(self, differs: str, at: int = 5, mismatch: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.target = PlantedTarget(engine=self)
        self.differs, self.at, self.mismatch, self.plain_id = differs, at, mismatch, None

    def prompt_ids(self, conversation, system=None):
        return list(range(1, len(str(conversation).split()) + 2))

    def generate(self, conversation, *, spec=SpecConfig(), **kwargs):
        for event in super().generate(conversation, spec=spec, **kwargs):
            if isinstance(event, GenerationFinished) and not spec.speculative:
                self.plain_id = event.output_ids[self.at]
            if isinstance(event, GenerationFinished) and spec.label() == self.differs:
                ids = list(event.output_ids)
                ids[self.at] = PLANTED_ID
                words = event.text.split(" ")
                words[self.at] = "CHANGED"
                event = replace(event, output_ids=tuple(ids), text=" ".join(words))
            yield event


@pytest.fixture
def make_compare(make_window, qtbot):
    """A chat window on `engine` with its compare window open; returns (chat window, compare window)."""

    def make(engine=None, palette=theme.LIGHT):
        window = make_window(engine or FakeEngine(), palette=palette)
        compare = window.open_compare()
        qtbot.addWidget(compare)
        compare.resize(1300, 850)
        return window, compare

    return make


def run_and_wait(qtbot, compare, signal=None):
    with qtbot.waitSignal(signal or compare.comparison_finished, timeout=WAIT_MS) as blocker:
        assert (compare.run_sweep if signal is compare.sweep_finished else compare.run_comparison)()
    return blocker.args[0]


def test_comparison_fills_panes_and_table_and_every_greedy_output_is_identical(make_compare, qtbot):
    window, compare = make_compare()
    compare.set_specs([parse_spec("prompt-lookup:k=3"), parse_spec("draft-model:k=4,draft=default")])
    compare.prompt.setPlainText("Summarise: speculative decoding drafts and verifies.")
    compare.max_new_tokens.setValue(30)
    session = run_and_wait(qtbot, compare)
    engine = window.engine
    # plain first, then each setting, one after another, each from an empty cache
    assert [c.spec.label() for c in engine.calls] == ["none", "prompt-lookup:k=3", "draft-model:k=4,draft=default"]
    assert engine.releases == 3
    assert {c.max_new_tokens for c in engine.calls} == {30}
    # one pane per run, each drawing its own tokens
    assert [p.title.text() for p in compare.panes] == ["plain decoding", "prompt-lookup:k=3",
                                                       "draft-model:k=4,draft=default"]
    for pane, run in zip(compare.panes, session.runs):
        assert pane.run is run and run.state == "done"
        committed = "".join(t.text for t in run.session.tokens if t.committed)
        assert committed == run.finished.text
        assert run.finished.text.replace("\n", "")[:20] in pane.transcript.toPlainText().replace("\n", "")
    # the table: a row per run, speed-up against plain, identical (greedy)
    table = compare.table
    assert table.rowCount() == 3
    cells = [[table.item(r, c).text() for c in range(table.columnCount())] for r in range(3)]
    assert cells[0][0] == "plain decoding" and cells[0][2] == "1.00×"
    assert cells[1][0] == "prompt-lookup:k=3" and cells[1][8] == "✓ identical" and cells[2][8] == "✓ identical"
    rows = session.rows()
    assert cells[1][2] == f"{rows[1].speedup:.2f}×" and cells[1][3] == f"{rows[1].acceptance_rate:.0%}"
    assert table.isColumnHidden(9)  # one backend: no cross-backend column
    assert "against plain on transformers" in table.item(1, 2).toolTip()
    assert "identical" in compare.diff_text() and "token for token" in compare.diff_text()
    assert not compare.running and compare.side_by_side.settings.run_button.isEnabled()
    assert window.send_button.isEnabled()  # the chat may send again


def test_a_runs_rounds_revised_by_its_server_redraw_its_pane(make_compare, qtbot):
    window, compare = make_compare(RevisingEngine())
    compare.set_specs([parse_spec("prompt-lookup:k=3")])
    compare.prompt.setPlainText("Hello?")
    session = run_and_wait(qtbot, compare)
    for pane, run in zip(compare.panes, session.runs):
        shown = SimpleNamespace(transcript=pane.transcript, session=run.session)
        assert [(token.status, text) for token, _, text, _ in fragments(shown)] == [
            (t.status, "▯" if t.status is TokenStatus.REJECTED else t.text) for t in run.turn.tokens]
        assert [t.status for t in run.turn.tokens].count(TokenStatus.REJECTED) == 3
        assert pane.timeline.count == 4 and pane.timeline.server_note.isVisible()
        assert revised_events.NOTE in pane.transcript.toPlainText()
    assert compare.table.item(1, 3).text() == "56%"


def test_a_planted_difference_shows_its_position_and_a_diff(make_compare, qtbot):
    window, compare = make_compare(PlantedDifference("early-exit:k=2", at=5))
    compare.set_specs([parse_spec("prompt-lookup:k=3"), parse_spec("early-exit:k=2")])
    compare.prompt.setPlainText("Explain it")
    compare.max_new_tokens.setValue(24)
    session = run_and_wait(qtbot, compare)
    rows = session.rows()
    assert rows[1].identical_to_plain is True
    assert rows[2].identical_to_plain is False and rows[2].first_difference == 5
    # diagnosed (engine.measure.divergence on the planted runner): a near-tie, with margin, discrepancy and both tokens
    near_tie = "≈ near-tie at token 5 (margin 0.0625, discrepancy 0.0938, 'plain-word' vs 'CHANGED')"
    assert rows[2].equality == "near-tie" and compare.table.item(2, 8).text() == near_tie
    assert "rounding difference" in compare.table.item(2, 8).toolTip()
    assert compare.table.item(1, 8).text() == "✓ identical"
    assert compare.panes[2].state.text() == near_tie
    # the differing row is selected and its diff shown, the near-tie explained in one sentence: the plain
    # word struck, the new one underlined
    assert compare.selected_row().label == "early-exit:k=2"
    text = compare.diff_text()
    assert "differs from plain decoding at token 5" in text and "CHANGED" in text
    assert "a rounding difference, not a speculation error" in text and "Prove it in float32" in text
    assert "1 near-tie" in compare.status_label.text()
    plain_word = rows[0].text.split(" ")[5]
    doc = compare.diff_view.document()
    formats = {}
    block = doc.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            formats[fragment.text().strip()] = fragment.charFormat()
            it += 1
        block = block.next()
    assert formats["CHANGED"].fontUnderline() or formats["CHANGED"].underlineStyle() != 0
    assert formats[plain_word.strip()].fontStrikeOut()


def test_a_planted_error_is_a_mismatch_shown_loudly(make_compare, qtbot):
    window, compare = make_compare(PlantedDifference("prompt-lookup:k=3", at=3, mismatch=True))
    compare.set_specs([parse_spec("prompt-lookup:k=3")])
    compare.prompt.setPlainText("Explain it")
    compare.max_new_tokens.setValue(16)
    session = run_and_wait(qtbot, compare)
    row = session.rows()[1]
    assert row.equality == "mismatch" and row.divergence.replayed
    assert compare.table.item(1, 8).text() == "✗ MISMATCH at token 3 ('plain-word' vs 'CHANGED')"
    text = compare.diff_text()
    assert "MISMATCH at token 3" in text and "please report it" in text and "verification batch" in text
    assert "1 MISMATCH" in compare.status_label.text()


@dataclass
class StrictTarget(FakeModel):
    backend: str = "transformers"  # with the fake's cpu and float32: already where the strict check runs


def test_prove_it_in_float32_sends_a_strict_request(make_compare, qtbot):
    window, compare = make_compare(FakeEngine(target=StrictTarget()))
    compare.set_specs([parse_spec("prompt-lookup:k=3")])
    compare.prompt.setPlainText("Go")
    requests = []
    compare.comparison_requested.connect(requests.append)
    with qtbot.waitSignal(compare.comparison_finished, timeout=WAIT_MS) as blocker:
        assert compare.strict_button.isEnabled() and compare.run_strict_comparison()
    assert requests[-1].strict is True and blocker.args[0].strict
    assert "strict check in float32 on the CPU" in compare.status_label.text()
    assert "in float32 on the CPU (strict check)" in compare.diff_text()
    compare.temperature.setValue(0.7)
    assert not compare.run_strict_comparison() and "temperature to 0" in compare.status_label.text()


def test_export_writes_csv_json_and_png_that_read_back(make_compare, qtbot, tmp_path):
    window, compare = make_compare(PlantedDifference("prompt-lookup:k=5", at=3))
    compare.set_specs([parse_spec("prompt-lookup:k=5"), parse_spec("early-exit:k=3")])
    compare.prompt.setPlainText("Translate it")
    compare.max_new_tokens.setValue(20)
    session = run_and_wait(qtbot, compare)
    rows = session.rows()
    compare.export_csv(tmp_path / "summary.csv")
    compare.export_json(tmp_path / "summary.json")
    assert compare.save_png(tmp_path / "compare.png")
    with open(tmp_path / "summary.csv", newline="", encoding="utf-8") as file:
        read = list(csv.DictReader(file))
    assert [r["label"] for r in read] == ["none", "prompt-lookup:k=5", "early-exit:k=3"]
    for got, row in zip(read, rows):
        assert float(got["tok_per_s"]) == pytest.approx(row.tok_per_s)
        assert float(got["speedup"]) == pytest.approx(row.speedup)
        assert got["identical_to_plain"] == str(row.identical_to_plain)
        assert got["text"] == row.text
    assert read[1]["first_difference"] == "3" and read[2]["first_difference"] == ""
    document = json.loads((tmp_path / "summary.json").read_text(encoding="utf-8"))
    assert document["prompt"] == "Translate it" and document["max_new_tokens"] == 20
    assert [r["label"] for r in document["rows"]] == [r.label for r in rows]
    assert document["rows"][1]["identical_to_plain"] is False and "+CHANGED" in document["rows"][1]["diff"]
    assert document["rows"][2]["acceptance_rate"] == pytest.approx(rows[2].acceptance_rate)
    image = QImage(str(tmp_path / "compare.png"))
    assert image.width() >= 1000 and image.height() >= 700
    assert status_pixels(tmp_path / "compare.png", TokenStatus.ACCEPTED) > 100


def test_stop_ends_a_comparison_between_rounds_and_keeps_what_finished(make_compare, qtbot):
    engine = FakeEngine(pause_after=6)  # the first run (plain) blocks after 6 rounds until resumed
    window, compare = make_compare(engine)
    compare.prompt.setPlainText("Go")
    compare.max_new_tokens.setValue(40)
    assert compare.run_comparison()
    qtbot.waitUntil(lambda: compare.session.runs[0].session.live.accumulator.rounds >= 6, timeout=WAIT_MS)
    assert compare.running and not window.send_button.isEnabled() and not window.send("hello")
    with qtbot.waitSignal(compare.comparison_finished, timeout=WAIT_MS) as blocker:
        compare.stop()
    session = blocker.args[0]
    assert session.cancelled and session.runs[0].state == "stopped"
    assert [r.state for r in session.runs[1:]] == ["waiting", "waiting"]
    assert len(engine.calls) == 1  # nothing ran after Stop
    assert compare.table.rowCount() == 0  # a stopped run's partial figures are not a result
    assert window.send_button.isEnabled()


def test_a_refused_setting_fails_before_any_run(make_compare, qtbot):
    window, compare = make_compare()
    compare.set_specs([parse_spec("prompt-lookup:k=3"), parse_spec("draft-model:k=4,draft=mismatch")])
    compare.prompt.setPlainText("x")
    with qtbot.waitSignal(compare.comparison_failed, timeout=WAIT_MS) as blocker:
        assert compare.run_comparison()
    assert "draft-model:k=4,draft=mismatch" in blocker.args[0] and "tokenizer" in blocker.args[0]
    assert window.engine.calls == [] and not compare.running


def test_presets_load_from_assets_with_categories_and_spec_bench_with_a_filter(make_compare):
    window, compare = make_compare()
    assert asset_path("presets.json").is_file()
    kinds = {compare.prompt_box.category.itemData(i) for i in range(1, compare.prompt_box.category.count())}
    assert {"chat", "code editing", "summarisation", "translation", "question answering", "maths"} <= kinds
    compare.set_category("code editing")
    visible = compare.visible_choices()
    assert len(visible) >= 3 and {c.category for c in visible} == {"code editing"}
    compare.choose_preset(1)
    assert compare.prompt.toPlainText() == visible[1].text
    if not SPEC_BENCH.is_file():
        pytest.skip("no Spec-Bench file beside the checkout")
    assert compare.load_prompt_file(SPEC_BENCH) == 480
    compare.set_category("translation")
    visible = compare.visible_choices()
    assert len(visible) == 80 and all(c.category == "translation" for c in visible)
    first = json.loads(next(line for line in SPEC_BENCH.read_text().splitlines()
                            if json.loads(line)["category"] == "translation"))
    compare.choose_preset(0)
    assert compare.prompt.toPlainText() == first["turns"][0]


def test_prompt_choices_keep_preset_titles():
    choices = load_prompt_choices(asset_path("presets.json"))
    assert len(choices) >= 21 and all(c.title and c.text for c in choices)
    assert len({c.id for c in choices}) == len(choices)


def test_sweep_marks_the_best_k_on_canned_figures_and_applies_it_to_the_chat(make_compare):
    window, compare = make_compare()
    points = [SweepPoint(1, 1.20, 0.8, 0.05), SweepPoint(2, 1.55, 0.75, 0.05), SweepPoint(3, 1.71, 0.7, 0.05),
              SweepPoint(4, 1.64, 0.7, 0.05), SweepPoint(5, 1.71, 0.66, 0.05), SweepPoint(6, 1.40, 0.6, 0.05)]
    compare.sweep.setting.set_spec(SpecConfig(method="early-exit", k=4, params={"layers": 6}))
    compare.show_sweep_summary(sweep_summary("early-exit", points))
    assert best_k(points).k == 3  # a tie (k=3, k=5) goes to the smaller k
    assert compare.sweep.plot.marked_k() == 3
    x, y = compare.sweep.plot.measured_curve.getData()
    assert list(x) == [1, 2, 3, 4, 5, 6] and list(y) == pytest.approx([p.speedup for p in points])
    x, y = compare.sweep.plot.theory_curve.getData()
    assert len(x) == 6 and y[0] != y[-1]
    assert compare.sweep.table.item(2, 0).text() == "★ 3"
    assert "Best k for early exit (self-speculative): 3" in compare.sweep.best_label.text()
    assert compare.sweep.apply_button.isEnabled() and compare.sweep.apply_button.text() == "Use k = 3 in the chat"
    assert window.controls.read().spec.label() != "early-exit:k=3,layers=6"
    compare.sweep.apply_button.click()
    assert window.controls.k.value() == 3
    assert window.controls.read().spec.label() == "early-exit:k=3,layers=6"


def test_sweep_runs_plain_once_then_each_k(make_compare, qtbot, tmp_path):
    window, compare = make_compare()
    compare.prompt.setPlainText("Sweep me")
    compare.max_new_tokens.setValue(20)
    compare.sweep.max_k.setValue(4)
    compare.tabs.setCurrentIndex(1)
    session = run_and_wait(qtbot, compare, compare.sweep_finished)
    assert [c.spec.label() for c in window.engine.calls] == ["none"] + [f"prompt-lookup:k={k}" for k in (1, 2, 3, 4)]
    summary = compare.sweep_summary
    assert [p.k for p in summary.points] == [1, 2, 3, 4]
    assert compare.sweep.plot.marked_k() == best_k(sweep_points(session.rows())).k
    compare.sweep.apply_button.click()
    assert window.controls.read().spec == SpecConfig(method="prompt-lookup", k=summary.best.k)
    assert compare.save_sweep_png(tmp_path / "sweep.png") and not QImage(str(tmp_path / "sweep.png")).isNull()


def test_dark_theme_reaches_the_compare_window(make_compare, qtbot):
    window, compare = make_compare(PlantedDifference("prompt-lookup:k=4", at=2))
    compare.set_specs([parse_spec("prompt-lookup:k=4")])
    compare.prompt.setPlainText("x")
    compare.max_new_tokens.setValue(16)
    run_and_wait(qtbot, compare)
    window.set_theme("dark")
    assert compare.sweep.plot.backgroundBrush().color().name() == theme.DARK.surface
    accepted = theme.DARK.status(TokenStatus.ACCEPTED).background
    pane = compare.panes[1]
    assert pane.transcript._palette is theme.DARK  # noqa: SLF001
    assert accepted in pane.transcript.toHtml()
    window.set_theme("light")


def test_the_app_icon_comes_from_the_assets():
    icon = app_icon()
    assert not icon.isNull() and len(icon.availableSizes()) >= 4


def run_gui(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "gui", *args], cwd=ROOT, env=subprocess_env(),
                          capture_output=True, text=True, timeout=timeout)


def test_scripted_compare_prints_one_json_line_and_saves_the_compare_view(tmp_path):
    png = tmp_path / "compare.png"
    # --demo replays recorded greedy runs of the built-in model: every one is plain decoding's text
    result = run_gui("gui", "--demo", "--theme", "light", "--compare", "prompt-lookup:k=3", "early-exit:k=4,layers=26",
                     "--prompt", "Summarise it", "--max-new-tokens", "16", "--screenshot", str(png),
                     "--quit-when-done")
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert len(lines) == 1
    rows = json.loads(lines[0])
    assert [r["label"] for r in rows] == ["none", "prompt-lookup:k=3", "early-exit:k=4,layers=26"]
    assert all(r["identical_to_plain"] is True and r["tokens"] == 16 for r in rows)
    assert rows[0]["speedup"] == pytest.approx(1.0) and rows[1]["acceptance_rate"] > 0
    assert {"tok_per_s", "mean_accepted_length", "theoretical_speedup", "efficiency", "draft_seconds",
            "verify_seconds", "first_difference", "divergence", "equality"} <= set(rows[1])
    assert all(r["divergence"] is None for r in rows)  # identical: nothing to diagnose
    assert QImage(str(png)).width() >= 1000
    assert "QThread" not in result.stderr and "Traceback" not in result.stderr


def test_scripted_compare_refuses_a_bad_spec():
    result = run_gui("--compare", "prompt-lookup:k=0", "--prompt", "x", "--quit-when-done")
    assert result.returncode == 2 and "k must be an integer" in result.stderr


@pytest.mark.model
@pytest.mark.skipif(not default_model_available(), reason="the built-in default model is not installed")
def test_real_comparison_of_two_settings_gives_outputs_identical_to_plain(tmp_path):
    png = tmp_path / "real-compare.png"
    # early exit needs the transformers backend (the built-in runs on llama.cpp by default); float32, where
    # greedy equality is exact (auto is bf16 on CPUs with native bf16)
    result = run_gui("gui", "--theme", "light", "--backend", "transformers", "--dtype", "float32",
                     "--compare", "prompt-lookup:k=4", "early-exit:k=3",
                     "--prompt", "List the days of the week, then list them again in reverse order.",
                     "--max-new-tokens", "32", "--screenshot", str(png), "--quit-when-done", timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads(result.stdout.strip().splitlines()[-1])
    assert [r["method"] for r in rows] == ["none", "prompt-lookup", "early-exit"]
    assert all(r["tokens"] > 10 and r["tok_per_s"] > 0 for r in rows)
    # transformers in auto dtype: bf16 on a CPU that computes it natively, where a near-tie may flip a token;
    # anything else than identical must come diagnosed as a near-tie, never a mismatch
    assert rows[0]["equality"] == "identical" and rows[0]["divergence"] is None
    for row in rows[1:]:
        if row["identical_to_plain"]:
            assert row["text"] == rows[0]["text"] and row["divergence"] is None
        else:
            assert row["equality"] == "near-tie" and row["divergence"]["kind"] == "near-tie", row["divergence"]
            assert row["divergence"]["position"] == row["first_difference"]
            assert row["divergence"]["top2_margin"] <= 2 * row["divergence"]["pass_discrepancy"]
    assert rows[2]["acceptance_rate"] > 0


CLOSE_MID_COMPARISON = """
import sys
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
from gui import theme
from fakes import FakeEngine
from gui.views.main.window import MainWindow

app = QApplication(sys.argv)
engine = FakeEngine(delay=0.01, pause_after=8)  # the plain run never finishes on its own
window = MainWindow(loader=lambda name, progress=None, **options: engine, palette=theme.LIGHT)
window.show()
def start(info):
    compare = window.open_compare()
    compare.prompt.setPlainText("go")
    compare.run_comparison()
window.model_ready.connect(start)
def close_mid_comparison():
    compare = window.tools.compare_window
    if compare is not None and compare.session.runs[0].session.live.accumulator.rounds >= 5:
        poll.stop()
        window.close()  # the worker is inside the comparison's first run
poll = QTimer()
poll.timeout.connect(close_mid_comparison)
poll.start(5)
window.start()
code = app.exec()
print("running", window.worker_thread.thread.isRunning(), "calls", len(engine.calls), flush=True)
sys.exit(code)
"""


def test_closing_the_app_mid_comparison_exits_cleanly():
    result = subprocess.run([sys.executable, "-c", CLOSE_MID_COMPARISON], cwd=ROOT, env=subprocess_env(),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "running False calls 1" in result.stdout  # no run started after the close
    assert "QThread" not in result.stderr and "Traceback" not in result.stderr
