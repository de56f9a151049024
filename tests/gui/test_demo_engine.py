"""The --demo engine: the recorded stream of the built-in model, replayed through the engine's generate()."""

import subprocess
import sys
import threading

import pytest

from engine.core.config import SpecConfig, parse_spec
from engine.core.errors import ConfigError
from engine.core.events import GenerationFinished, GenerationStarted, RoundVerified, TokenStatus
from gui.demo_engine import RECORDED_SPECS, DemoEngine, load_recording
from gui.resources import asset_path

FAST = float("inf")  # no waiting between rounds


def replay(engine, spec, **kwargs):
    return list(engine.generate([{"role": "user", "content": "anything"}], spec=spec, **kwargs))


def test_the_recording_holds_every_setting_and_greedy_speculation_kept_plain_text():
    header, recordings = load_recording(asset_path("demo_stream.jsonl"))
    assert list(recordings) == list(RECORDED_SPECS) and header["model"] and header["n_layers"]
    plain = recordings["none"].finished
    for label, recording in recordings.items():
        assert recording.started.spec_label == label and recording.started.greedy
        assert recording.finished.output_ids == plain.output_ids, label  # lossless: plain decoding's tokens
        committed = sum(len(r.committed_ids) for r in recording.rounds)
        assert committed == len(recording.finished.output_ids) == recording.finished.stats.committed_tokens
    statuses = {r.target_status for r in recordings["prompt-lookup:k=4"].rounds}
    assert statuses == {TokenStatus.PLAIN, TokenStatus.SUBSTITUTED, TokenStatus.BONUS}


def test_a_replay_is_the_recorded_generation_cut_at_the_token_budget():
    engine = DemoEngine(pace=FAST)
    spec = parse_spec("prompt-lookup:k=4")
    events = replay(engine, spec, max_new_tokens=50)
    started, rounds, finished = events[0], events[1:-1], events[-1]
    assert isinstance(started, GenerationStarted) and started.spec_label == "prompt-lookup:k=4"
    assert started.model == engine.target.label and "(recorded)" in started.model
    assert all(isinstance(r, RoundVerified) for r in rounds) and isinstance(finished, GenerationFinished)
    assert finished.stop_reason == "max-new-tokens" and finished.stats.committed_tokens == 50
    assert len(finished.output_ids) == 50 and rounds[-1].n_committed_total == 50
    assert finished.text == "".join(p for r in rounds for p in r.committed_pieces)
    recorded = engine.recordings["prompt-lookup:k=4"]
    assert finished.output_ids == recorded.finished.output_ids[:50]
    assert 0 < finished.stats.acceptance_rate < 1


def test_a_replay_honours_cancel_between_rounds():
    cancel = threading.Event()
    cancel.set()
    events = replay(DemoEngine(pace=FAST), SpecConfig(), cancel=cancel)
    assert events[-1].stop_reason == "cancelled" and len(events) == 2


def test_the_demo_refuses_what_it_has_no_recording_of():
    engine = DemoEngine(pace=FAST)
    with pytest.raises(ConfigError, match="the demo replays recordings of none, prompt-lookup:k=1"):
        engine.validate(parse_spec("draft-model:k=4,draft=default"))
    with pytest.raises(ConfigError, match="prompt-lookup:k=9 needs a real model"):
        replay(engine, parse_spec("prompt-lookup:k=9"))


def test_a_missing_or_broken_recording_is_one_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot be read"):
        DemoEngine(tmp_path / "nothing.jsonl")
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"type": "recording"}\n{"type": "round"}\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="cannot be read"):
        DemoEngine(broken)



def test_a_recorded_server_reply_replays_as_it_was_revised(tmp_path):
    """`specscope generate --json` of a vLLM reply holds its plain rounds and then their revision: the replay shows
    the revised rounds (the server's steps)."""
    import json

    import revised_events
    from engine.core.events import event_to_dict
    path = tmp_path / "server.jsonl"
    lines = [{"type": "recording", "prompt": "hi", "model": "m"}] + [event_to_dict(e) for e in revised_events.events()]
    path.write_text("\n".join(json.dumps(line) for line in lines), encoding="utf-8")
    (recording,) = load_recording(path)[1].values()
    assert recording.rounds == revised_events.revised_rounds()


DEMO_WINDOW = """
import sys
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
app = QApplication(sys.argv)
from gui import app as gui_app
from gui.views.main.window import MainWindow

def peek():
    window = next(w for w in app.topLevelWidgets() if isinstance(w, MainWindow))
    print("BOX:" + window.message_box.toPlainText().replace(chr(10), " "), flush=True)
    window.close()

QTimer.singleShot(300, peek)
sys.exit(gui_app.main(["--demo"]))
"""


def test_the_demo_window_starts_with_the_recorded_question():
    from test_gui_scripted import ROOT, subprocess_env

    result = subprocess.run([sys.executable, "-c", DEMO_WINDOW], cwd=ROOT, env=subprocess_env(),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    header, _ = load_recording(asset_path("demo_stream.jsonl"))
    assert f"BOX:{header['prompt'].replace(chr(10), ' ')}" in result.stdout
