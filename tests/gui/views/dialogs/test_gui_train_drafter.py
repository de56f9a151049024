""""Train a drafter…" (gui/views/dialogs/training.py, gui/sessions/training.py): progress, the phase line and the live plot
of held-out acceptance by draft position from a fake trainer; cancel and close mid-run stop it (the trainer sees
the cancel Event, the thread is joined); an error is one line; a saved checkpoint makes Resume say where it
resumes; the Models window's button; "Use eagle now"; the offer to train when a model without a head gets
method eagle (once, remembered when declined, never in a scripted run). One real run: the engine's trainer on
a tiny Llama built here, driven through the dialog."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest


from engine.drafters.eagle_head import HeadCard  # noqa: E402
from engine.core.errors import ConfigError  # noqa: E402
from engine.training.train import STATE_FILE, TrainOptions, TrainProgress  # noqa: E402
from gui import theme  # noqa: E402
from gui.persistence.settings import AppSettings  # noqa: E402
from gui.sessions.training import checkpoint_step, head_for  # noqa: E402
from gui.views.dialogs.training import TrainDialog  # noqa: E402
from test_gui_models import hf_cache, tokenizers  # noqa: E402,F401 -- fixtures: a Hugging Face cache of tiny models

WAIT_MS = 10_000


def words(label) -> str:
    """A label's text as read (the acceptance figures keep each "pos 1: 40%" on one line with no-break spaces)."""
    return label.text().replace("\u00a0", " ")


def write_head(folder: Path, label: str, acceptance=(0.4, 0.2, 0.1), steps: int = 30) -> HeadCard:
    """What the trainer leaves in a head folder, as far as the app reads it: the card, a weights file, the
    checkpoint's state."""
    folder.mkdir(parents=True, exist_ok=True)
    card = HeadCard(label, "f" * 32, 64, 300, {"steps": steps, "held_out_acceptance": list(acceptance)})
    (folder / "head.json").write_text(card.to_json(), encoding="utf-8")
    (folder / "head.safetensors").write_bytes(b"")
    history = [[steps, 12.5, 2.5, *acceptance]]  # the trainer's rows: step, seconds, loss, acceptance…
    (folder / STATE_FILE).write_text(json.dumps({"step": steps, "history": history}), encoding="utf-8")
    return card


class FakeTrainer:
    """`train(options, report, cancel)` with canned progress: loading, replies, then training steps with
    held-out acceptance at each evaluation; it waits at `hold_at` (honouring cancel) until `go` is set. On the
    end, as the real one, it writes the head (also when cancelled during training) and returns (folder, card)."""

    def __init__(self, out: Path, steps: int = 6, hold_at: int | None = None, fail: BaseException | None = None):
        self.out, self.steps, self.hold_at, self.fail = out, steps, hold_at, fail
        self.go, self.holding = threading.Event(), threading.Event()
        self.calls: list[TrainOptions] = []
        self.saw_cancel = False

    def __call__(self, options, report, cancel):
        self.calls.append(options)
        report(TrainProgress("loading", 0.0, "tiny on transformers"))
        if self.fail is not None:
            raise self.fail
        report(TrainProgress("replies", 0.2, "12 replies (480 tokens) written"))
        step, acceptance = 0, ()
        for step in range(1, self.steps + 1):
            acceptance = (0.1 * step, 0.05 * step, 0.02 * step)
            report(TrainProgress("training", 0.3 + 0.1 * step, f"step {step}", step, 3.0 - 0.1 * step, acceptance))
            if step == self.hold_at:
                self.holding.set()
                while not self.go.wait(0.005) and not cancel.is_set():
                    pass
            if cancel.is_set():
                self.saw_cancel = True
                break
        out = Path(options.out) if options.out else self.out
        card = write_head(out, "fake", acceptance, step)
        report(TrainProgress("cancelled" if cancel.is_set() else "done", 1.0, f"head written to {out}", step,
                             3.0 - 0.1 * step, acceptance))
        return out, card


@pytest.fixture
def heads_root(tmp_path, monkeypatch):
    """The head folders live under the test's own cache folder (engine.drafters.eagle_head.default_head_dir)."""
    monkeypatch.setenv("SPECSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "eagle-heads"


@pytest.fixture
def make_dialog(qtbot, tmp_path, heads_root):
    dialogs = []

    def make(trainer, model="fake", label="fake", **kwargs) -> TrainDialog:
        dialog = TrainDialog(model, label, AppSettings(), theme.LIGHT, train=trainer, **kwargs)
        qtbot.addWidget(dialog)
        dialogs.append(dialog)
        dialog.show()
        return dialog

    yield make
    for dialog in dialogs:
        if isinstance(dialog._train, FakeTrainer):
            dialog._train.go.set()
        dialog.shutdown()
        assert not dialog.jobs.thread.isRunning()


def test_progress_and_the_acceptance_plot_follow_the_trainer(make_dialog, qtbot, tmp_path):
    trainer = FakeTrainer(tmp_path / "head", steps=6, hold_at=3)
    dialog = make_dialog(trainer)
    assert dialog.start_button.isEnabled() and not dialog.resume_button.isEnabled()
    assert dialog.start()
    qtbot.waitUntil(trainer.holding.is_set, timeout=WAIT_MS)
    qtbot.waitUntil(lambda: len(dialog.plotted()[0][0]) == 3, timeout=WAIT_MS)
    assert dialog.bar.value() == 600
    assert dialog.phase.text() == "Training: step 3"
    assert "loss 2.700" in words(dialog.figures) and "pos 1: 30%" in words(dialog.figures)
    steps, values = dialog.plotted()[2]
    assert steps == [1.0, 2.0, 3.0] and [round(v, 6) for v in values] == [2.0, 4.0, 6.0]
    assert not dialog.start_button.isEnabled() and dialog.cancel_button.isEnabled()
    assert not dialog.minutes.isEnabled()
    with qtbot.waitSignal(dialog.training_finished, timeout=WAIT_MS) as finished:
        trainer.go.set()
    assert finished.args == ["done"]
    assert len(dialog.plotted()[0][0]) == 6
    assert f"written to {tmp_path / 'head'} after 6 steps" in dialog.result.text()
    assert "pos 1: 60%  pos 2: 30%  pos 3: 12%" in words(dialog.result)
    assert dialog.use_button.isVisibleTo(dialog)
    options = trainer.calls[0]
    assert (options.model, options.minutes, options.from_history, options.out) == ("fake", 20.0, False, None)
    # the folder the run wrote is remembered: a later dialog for this model says Resume continues from it
    assert dialog.settings.eagle_head_folder("fake") == str(tmp_path / "head")
    assert dialog.resume_button.isEnabled() and "resumes from step 6" in dialog.resume_note.text()


def test_cancel_mid_run_stops_the_trainer_and_says_so(make_dialog, qtbot, tmp_path):
    trainer = FakeTrainer(tmp_path / "head", steps=50, hold_at=2)
    dialog = make_dialog(trainer)
    dialog.minutes.setValue(3)
    dialog.from_history.setChecked(True)
    dialog.start()
    qtbot.waitUntil(trainer.holding.is_set, timeout=WAIT_MS)
    with qtbot.waitSignal(dialog.training_finished, timeout=WAIT_MS) as finished:
        dialog.cancel_button.click()
        assert dialog.phase.text().startswith("Cancelling")
        assert not dialog.cancel_button.isEnabled()
    assert finished.args == ["cancelled"] and trainer.saw_cancel
    assert not dialog.running and dialog.phase.text() == "Cancelled"
    assert dialog.bar.value() == 500  # where it got to, not the end
    assert "Cancelled: the head so far was written" in dialog.result.text() and "after 2 steps" in dialog.result.text()
    assert (trainer.calls[0].minutes, trainer.calls[0].from_history) == (3.0, True)
    # Resume is the same call on the same folder
    assert dialog.resume_button.isEnabled() and "resumes from step 2" in dialog.resume_note.text()
    trainer.hold_at = None
    with qtbot.waitSignal(dialog.training_finished, timeout=WAIT_MS):
        dialog.resume_button.click()
    assert trainer.calls[1] == trainer.calls[0]  # the same call: the trainer resumes in the same folder
    dialog.shutdown()
    assert not dialog.jobs.thread.isRunning()


def test_a_cancel_before_training_is_not_an_error(make_dialog, qtbot, tmp_path):
    """The trainer raises (too little time to write replies, or KeyboardInterrupt while reading features) when
    cancelled early: the dialog says it was cancelled, and what is kept."""
    for raised in (ConfigError("too little time to write both training and held-out replies"), KeyboardInterrupt()):
        gate = threading.Event()

        def trainer(options, report, cancel, raised=raised):
            report(TrainProgress("replies", 0.1, "2 replies"))
            gate.set()
            cancel.wait(WAIT_MS / 1000)
            raise raised

        dialog = make_dialog(trainer)
        dialog.start()
        qtbot.waitUntil(gate.is_set, timeout=WAIT_MS)
        with qtbot.waitSignal(dialog.training_finished, timeout=WAIT_MS) as finished:
            dialog.cancel()
        assert finished.args == ["cancelled"]
        assert dialog.phase.text().startswith("Cancelled before training began")
        assert not dialog.problem.isVisibleTo(dialog)


def test_closing_the_dialog_mid_run_cancels_and_the_thread_is_joined(make_dialog, qtbot, tmp_path):
    trainer = FakeTrainer(tmp_path / "head", steps=50, hold_at=1)
    dialog = make_dialog(trainer)
    dialog.start()
    qtbot.waitUntil(trainer.holding.is_set, timeout=WAIT_MS)
    with qtbot.waitSignal(dialog.training_finished, timeout=WAIT_MS) as finished:
        dialog.close()
        assert dialog.cancel_event.is_set()
    assert finished.args == ["cancelled"] and trainer.saw_cancel and not dialog.isVisible()
    dialog.shutdown()
    assert not dialog.jobs.thread.isRunning()


@pytest.mark.parametrize("raised, expected", [
    (ConfigError("--from-history: no chat history at /x/history.sqlite3 yet\n(start a chat first)"),
     "⚠ --from-history: no chat history at /x/history.sqlite3 yet (start a chat first)"),
    (RuntimeError("boom"), "⚠ Unexpected error (RuntimeError: boom)"),
])
def test_an_error_is_one_line(make_dialog, qtbot, tmp_path, raised, expected):
    dialog = make_dialog(FakeTrainer(tmp_path / "head", fail=raised))
    with qtbot.waitSignal(dialog.training_finished, timeout=WAIT_MS) as finished:
        dialog.start()
    assert finished.args == ["failed"]
    assert dialog.problem.text() == expected and "Traceback" not in dialog.problem.text()
    assert dialog.phase.text() == "Stopped" and dialog.start_button.isEnabled()


def test_a_bad_time_budget_is_refused_in_place(make_dialog, tmp_path):
    from dataclasses import replace
    dialog = make_dialog(FakeTrainer(tmp_path / "head"))
    dialog._base = replace(TrainOptions(), minutes=20)
    dialog.minutes.setMinimum(0.1)  # the box itself refuses; the check under it says why
    dialog.minutes.setValue(0.2)
    assert not dialog.start()
    assert dialog.problem.text() == "⚠ Minutes must be from 0.5 to 1440, got 0.2"


def test_a_saved_checkpoint_makes_resume_say_its_step(make_dialog, heads_root, tmp_path):
    write_head(heads_root / ("a" * 32), "fake", steps=42)  # a head trained earlier (the CLI): found by its card
    assert head_for("fake") == heads_root / ("a" * 32) and head_for("other") is None
    assert checkpoint_step(heads_root / ("a" * 32)) == 42 and checkpoint_step(tmp_path / "none") is None
    trainer = FakeTrainer(tmp_path / "unused")
    dialog = make_dialog(trainer)
    note = dialog.resume_note.text()
    assert "resumes from step 42" in note and str(heads_root / ("a" * 32)) in note
    assert dialog.resume_button.isEnabled() and not dialog.start_button.isEnabled()
    assert dialog.plotted()[0] == ([42.0], [40.0])  # the saved run's evaluations are drawn at once
    assert "step 42" in words(dialog.figures) and "pos 1: 40%" in words(dialog.figures)
    dialog.set_model("other", "other")
    assert dialog.plotted()[0] == ([], [])
    assert dialog.resume_note.text() == "" and dialog.start_button.isEnabled()


def test_the_figures_say_when_acceptance_was_last_measured():
    from gui.sessions.training import Snapshot, figures_line
    state = Snapshot(step=50, loss=2.0, acceptance=(0.4, 0.25), points=[(10, (0.4, 0.25))])
    assert figures_line(state).replace("\u00a0", " ") == ("step 50 · loss 2.000 · held-out acceptance (at step 10) "
                                                          "pos 1: 40%  pos 2: 25%")
    assert figures_line(Snapshot()) == ""


# ---------------------------------------------------------------- the main window's side

@pytest.fixture
def fake_front(monkeypatch):
    """`fake_front(window, trainer)`: the main window's training side trains with `trainer` and its offer is
    answered with `window.answer` (False unless the test sets it); returns the questions asked. These are the
    trainer and question TrainingFront falls back to when the window gives it none."""
    import gui.views.dialogs.training as training

    def fake(window, trainer) -> list[str]:
        asked = []
        monkeypatch.setattr(training, "real_train", trainer)
        monkeypatch.setattr(training, "ask_train", lambda parent, title, text: asked.append(text) or parent.answer)
        window.answer = False
        return asked
    return fake


def pick_method(window, method: str) -> None:
    """As the user does: choose it in the list (activated), not through apply()."""
    combo = window.controls.method
    combo.setCurrentIndex(combo.findData(method))
    combo.activated.emit(combo.currentIndex())


def test_the_offer_is_made_once_and_not_now_is_remembered(make_window, qtbot, heads_root, tmp_path, fake_front):
    window = make_window()
    asked = fake_front(window, FakeTrainer(tmp_path / "head"))
    pick_method(window, "prompt-lookup")
    assert asked == []
    pick_method(window, "eagle")
    assert asked == ["fake has no eagle head yet. Train one now? About 20 minutes on this machine (data generation "
                     "included); you can cancel and resume."]
    assert window.settings.training_offer_declined("default")
    assert window.training.dialog is None
    assert "fake has no eagle head yet: train one in" in window.status_label.text()
    pick_method(window, "none")
    pick_method(window, "eagle")
    assert len(asked) == 1  # declined: only the message line
    problem = window.controls.problem.text()
    assert "fake has no eagle head yet: train one in Tools ▸ Models… ▸ Train a drafter…" in problem
    again = make_window()  # the next start of the app: still declined
    asked_again = fake_front(again, FakeTrainer(tmp_path / "head"))
    pick_method(again, "eagle")
    assert asked_again == []


def test_train_opens_the_dialog_and_use_eagle_selects_it(make_window, qtbot, heads_root, tmp_path, fake_front):
    window = make_window()
    asked = fake_front(window, FakeTrainer(tmp_path / "head", steps=3))
    window.answer = True
    pick_method(window, "none")
    pick_method(window, "eagle")
    dialog = window.training.dialog
    assert len(asked) == 1 and dialog is not None and dialog.isVisible() and dialog.model == "default"
    assert not window.settings.training_offer_declined("default")
    with qtbot.waitSignal(dialog.training_finished, timeout=WAIT_MS):
        dialog.start_button.click()
    window.controls.apply(method="none")
    dialog.use_button.click()
    assert window.controls.method_name() == "eagle"
    assert "Method eagle selected for default" in window.status_label.text()
    write_head(heads_root / ("b" * 32), "fake")  # now it has a head: no offer
    pick_method(window, "none")
    pick_method(window, "eagle")
    assert len(asked) == 1
    window.shutdown()
    assert not dialog.jobs.thread.isRunning()


def test_use_eagle_moves_a_llama_cpp_chat_to_transformers(make_window, qtbot, heads_root, tmp_path):
    from fakes import FakeEngine, FakeModel
    window = make_window(FakeEngine(target=FakeModel(backend="llama.cpp")))
    assert window.controls.effective_backend() == "llama.cpp"
    with qtbot.waitSignal(window.model_ready, timeout=WAIT_MS):  # loaded again, on transformers
        window.training.use_eagle("default")
    assert window.controls.method_name() == "eagle" and window.controls.backend_name() == "transformers"
    assert window.load_options().backend == "transformers"


def test_no_offer_in_a_scripted_run(make_window, qtbot, heads_root, tmp_path, fake_front):
    window = make_window(persist=False)  # scripted runs, the demo and benchmarks do not persist, and never ask
    asked = fake_front(window, FakeTrainer(tmp_path / "head"))
    pick_method(window, "eagle")
    window.request_failed.emit("fake has no eagle head yet: train one with `specscope drafter train …`")
    assert asked == [] and window.training.dialog is None
    assert "fake has no eagle head yet" in window.controls.problem.text()


def test_a_reply_refused_for_want_of_a_head_gets_the_offer(make_window, qtbot, heads_root, tmp_path, fake_front):
    window = make_window()
    asked = fake_front(window, FakeTrainer(tmp_path / "head"))
    window.request_failed.emit("could not reach the server")
    assert asked == []
    window.request_failed.emit("fake has no eagle head yet: train one with `specscope drafter train …`")
    window.request_failed.emit("fake has no eagle head yet: train one with `specscope drafter train …`")
    assert len(asked) == 1


def test_closing_the_app_mid_training_cancels_and_waits(make_window, qtbot, heads_root, tmp_path, fake_front):
    window = make_window()
    trainer = FakeTrainer(tmp_path / "head", steps=50, hold_at=1)
    fake_front(window, trainer)
    dialog = window.training.open("default", "fake")
    dialog.start()
    qtbot.waitUntil(trainer.holding.is_set, timeout=WAIT_MS)
    window.close()
    assert trainer.saw_cancel and not dialog.jobs.thread.isRunning()
    assert (tmp_path / "head" / STATE_FILE).is_file()  # nothing lost: the checkpoint stays


def test_the_models_window_trains_the_selected_model(make_window, qtbot, heads_root, tmp_path, hf_cache,
                                                      fake_front):
    window = make_window()
    fake_front(window, FakeTrainer(tmp_path / "head"))
    manager = window.open_models()
    qtbot.waitUntil(lambda: bool(manager.entries), timeout=WAIT_MS)
    manager.table.clearSelection()
    assert not manager.models.train_button.isEnabled()
    usable = next(e for e in manager.entries if e.usable)
    assert manager.select(usable.name) and manager.models.train_button.isEnabled()
    manager.models.train_button.click()
    dialog = window.training.dialog
    assert dialog is not None and dialog.isVisible()
    assert (dialog.model, dialog.label) == (usable.name, usable.label)
    assert dialog.title.text() == f"Train an EAGLE drafter for {usable.label}"


# ---------------------------------------------------------------- the real trainer

def gui_gaps(parent) -> dict:
    """A 10 ms timer on the GUI thread that records the time between its ticks (a printed figure, not a test)."""
    import time

    from PySide6.QtCore import QTimer
    record = {"gaps": [0.0], "last": time.perf_counter(), "timer": QTimer(parent)}

    def tick():
        now = time.perf_counter()
        record["gaps"].append(now - record["last"])
        record["last"] = now
    record["timer"].timeout.connect(tick)
    record["timer"].start(10)
    return record


@pytest.mark.slow
def test_the_real_trainer_on_a_tiny_llama_through_the_dialog(make_dialog, qtbot, tmp_path):
    """engine.training.train.train on a 4-layer random Llama built here, for the dialog's shortest budget (30 s,
    data generation included): progress arrives, held-out acceptance is plotted, the head and its card are
    written where the dialog says."""
    from engine_testkit import build_tiny_tokenizer, save_tiny_model
    model = save_tiny_model(tmp_path / "tiny", build_tiny_tokenizer(), seed=0)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"Tell me about the number {n}."}) + "\n" for n in range(30)),
                       encoding="utf-8")
    base = TrainOptions(out=tmp_path / "head", builtin_prompts=False, prompt_files=(str(prompts),),
                        max_new_tokens=24, window=32, batch=4, held_out_prompts=2, device="cpu", dtype="float32")
    dialog = make_dialog(None, model=str(model), label="tiny", base_options=base)
    dialog.minutes.setValue(0.5)
    seen = set()
    gaps = gui_gaps(dialog)
    with qtbot.waitSignal(dialog.training_finished, timeout=180_000) as finished:
        dialog.start()
        qtbot.waitUntil(lambda: seen.add(dialog.run.snapshot().phase) or dialog.run.snapshot().phase == "training",
                        timeout=120_000)
    assert finished.args == ["done"], dialog.problem.text()
    assert {"replies", "training"} <= seen
    assert (tmp_path / "head" / "head.json").is_file() and (tmp_path / "head" / "head.safetensors").is_file()
    card = json.loads((tmp_path / "head" / "head.json").read_text(encoding="utf-8"))
    assert len(card["held_out_acceptance"]) == 3
    assert len(dialog.plotted()[0][0]) >= 1
    assert f"written to {tmp_path / 'head'}" in dialog.result.text()
    assert dialog.resume_button.isEnabled() and f"resumes from step {card['steps']}" in dialog.resume_note.text()
    gaps["timer"].stop()
    print(f"\ntiny Llama, 30 s: {card['steps']} steps, held-out acceptance {card['held_out_acceptance']}; the GUI "
          f"thread's longest gap while training: {1000 * max(gaps['gaps']):.0f} ms (a 10 ms timer)")
