"""The scripted mode's rounds (issue 23, item 7): the JSON line's `rounds` equal the reply's rounds (drafted,
accepted, draft and verify ms) and name the backend; `--panel timeline tree` brings those panels into view and
`--select-round N` picks round N before the screenshot; a round the reply doesn't have is exit 2, in words."""

import json

from PySide6.QtGui import QImage

from gui import app
from gui.views.chat.colouring import MODES
from gui.views.main.live_dock import LIVE_PANELS
from test_gui_scripted import run_gui


def test_the_options_name_what_the_window_has():
    panel_option = next(action for action in app.build_parser()._actions if "--panel" in action.option_strings)
    assert tuple(panel_option.choices) == tuple(panel_class.name for panel_class in LIVE_PANELS)
    assert {"timeline", "tree"} <= set(panel_option.choices) and app.COLOUR_CHOICES == tuple(MODES)


def test_the_json_backend_is_where_the_reply_ran():
    from gui.sessions.chat import reply_backend
    loaded = type("Info", (), {"backend": "llama.cpp"})()
    assert reply_backend("early-exit:k=2,layers=4,backend=transformers", loaded) == "transformers"
    assert reply_backend("prompt-lookup:k=3", loaded) == "llama.cpp"
    assert reply_backend("not a spec:::", loaded) == "llama.cpp" and reply_backend("", None) is None


def test_json_rounds_and_backend_and_the_panels_picked(tmp_path):
    png = tmp_path / "rounds.png"
    result = run_gui("gui", "--demo", "--theme", "dark", "--method", "prompt-lookup", "--k", "4",
                     "--max-new-tokens", "40", "--prompt", "Explain it", "--panel", "timeline", "tree",
                     "--select-round", "2", "--colour-by", "entropy", "--window-size", "1366x768",
                     "--screenshot", str(png),
                     "--quit-when-done")
    assert result.returncode == 0, result.stderr
    record = json.loads([line for line in result.stdout.splitlines() if line.strip()][-1])
    rounds = record["rounds"]
    assert record["backend"] and record["rounds"][0]["index"] == 0
    assert sum(r["committed"] for r in rounds) == record["committed_tokens"] == 40
    assert sum(r["drafted"] for r in rounds) == record["drafted_tokens"]
    assert sum(r["accepted"] for r in rounds) == record["accepted_tokens"]
    assert all(r["accepted"] <= r["drafted"] and r["verify_ms"] > 0 and r["draft_ms"] >= 0 for r in rounds)
    assert sum(r["verify_ms"] + r["rollback_ms"] for r in rounds) / 1000 == \
        __import__("pytest").approx(record["verify_seconds"], rel=1e-3, abs=1e-3)
    image = QImage(str(png))
    assert (image.width(), image.height()) == (1366, 768)


def test_a_round_the_reply_does_not_have_is_refused_in_words(tmp_path):
    result = run_gui("gui", "--demo", "--method", "prompt-lookup", "--k", "4", "--max-new-tokens", "12",
                     "--prompt", "Explain it", "--select-round", "999", "--quit-when-done")
    assert result.returncode == 2
    assert "--select-round 999: this reply has no round 999 (its rounds are 0–" in result.stderr
    bad = run_gui("gui", "--demo", "--prompt", "x", "--panel", "graphs", "--quit-when-done")
    assert bad.returncode == 2 and "invalid choice: 'graphs'" in bad.stderr
