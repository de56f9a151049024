"""The backend in the settings panel: shown with the model, switching it loads the target again through the worker
on that backend; under auto a method the loaded backend can't serve (early exit on llama.cpp) runs on one that
can, the model loaded there too, and a backend chosen that can't serve it refuses it in place with
engine.backends.resolve_backend's reason; `specscope gui --backend` sets it before the first load."""

from __future__ import annotations

import pytest

from engine.core.config import SpecConfig
from engine.core.errors import ConfigError
from fakes import FakeEngine, FakeModel
from gui import app
from gui.views.main.window import MainWindow

WAIT_MS = 20_000


def backend_loader(calls: list):
    """A loader that records the backend asked for and gives an engine whose target runs on it (auto: llama.cpp,
    as the built-in GGUF would)."""
    def load(name, progress=None, **options):
        calls.append(options.get("backend"))
        backend = options.get("backend") or "auto"
        return FakeEngine(target=FakeModel(name=name, backend="llama.cpp" if backend == "auto" else backend))
    return load


def engines_by_backend(source=None):
    """backend_loader's calls, the engines it made by backend, and the loader (`source`: the targets' model
    source, which the worker's auto resolution reads)."""
    calls: list = []
    engines: dict = {}

    def load(name, progress=None, **options):
        engine = backend_loader(calls)(name, progress, **options)
        if source is not None:
            engine.target.source = source
        engines[engine.target.backend] = engine
        return engine
    return calls, engines, load


def open_window(qtbot, loader) -> MainWindow:
    window = MainWindow(loader=loader, persist=False)
    qtbot.addWidget(window)
    window.show()
    with qtbot.waitSignal(window.model_ready, timeout=WAIT_MS):
        window.start()
    return window


def described(window, qtbot) -> None:
    """Wait until the settings panel has the loaded target's method table (its catalog entry, looked up)."""
    qtbot.waitUntil(lambda: window.controls.method_choice("none") is not None, timeout=WAIT_MS)


def test_auto_runs_early_exit_on_transformers_and_a_chosen_llama_cpp_refuses_it(qtbot):
    """Under auto the built-in GGUF (on llama.cpp) runs early exit on transformers: the worker loads it there too
    (engine.runtime.BackendRouter), the reply runs there with backend= in its setting, and the panel and the
    status line say why and what plain decoding costs on each. Choosing llama.cpp refuses it in place with
    engine.backends.resolve_backend's reason; transformers serves it as loaded."""
    from engine.backends import resolve_backend
    from engine.models.sources import resolve_source
    calls, engines, load = engines_by_backend()
    window = open_window(qtbot, load)
    controls = window.controls
    try:
        assert calls == ["auto"] and "llama.cpp" in controls.model_status.text()  # shown with the model
        described(window, qtbot)
        with qtbot.waitSignal(controls.backend_noted, timeout=WAIT_MS) as noted:
            controls.apply(method="early-exit")
        note = resolve_backend(resolve_source("default"), "early-exit", "auto").note
        assert note and controls.config_problem() is None and controls.routed_backend() == "transformers"
        assert noted.args[0] == window.status_label.text() == controls.backend_note.text()
        assert noted.args[0].startswith(note[:1].upper() + note[1:])
        assert "Plain decoding on llama.cpp: not measured yet; on transformers: not measured yet." in noted.args[0]
        assert controls.read().spec.label() == "early-exit:k=4,backend=transformers"
        with qtbot.waitSignal(window.reply_finished, timeout=WAIT_MS):
            assert window.send("hello")
        assert calls == ["auto", "transformers"]  # the model loaded once more, on transformers, for that method
        assert [c.spec.method for c in engines["transformers"].calls] == ["early-exit"]
        assert engines["llama.cpp"].calls == []
        assert set(window.session.loaded_as) == {"llama.cpp", "transformers"}
        controls.apply(method="prompt-lookup")  # a method llama.cpp serves: as loaded, no note
        assert controls.routed_backend() is None and controls.backend_note.isHidden()

        with qtbot.waitSignal(window.model_ready, timeout=WAIT_MS) as blocker:
            controls.backend.setCurrentIndex(controls.backend.findData("llama.cpp"))
            controls.backend.activated.emit(controls.backend.currentIndex())
        assert calls[-1] == "llama.cpp" and blocker.args[0].backend == "llama.cpp"
        described(window, qtbot)
        controls.apply(method="early-exit")
        try:
            resolve_backend(resolve_source("default"), "early-exit", "llama.cpp")
        except ConfigError as exc:
            reason = str(exc)
        assert controls.problem.isVisible() and controls.problem.text() == f"⚠ {reason}"
        assert "needs the transformers backend" in reason and controls.config_problem() == reason
        assert window.send("hello") is False  # refused in place: nothing sent

        with qtbot.waitSignal(window.model_ready, timeout=WAIT_MS) as blocker:
            controls.backend.setCurrentIndex(controls.backend.findData("transformers"))
            controls.backend.activated.emit(controls.backend.currentIndex())
        assert calls[-1] == "transformers" and blocker.args[0].backend == "transformers"
        described(window, qtbot)
        assert controls.config_problem() is None and controls.routed_backend() is None
        assert not controls.problem.isVisible()
    finally:
        window.shutdown()


def test_gui_backend_option_sets_the_first_load(qtbot):
    calls: list = []
    args = app.build_parser().parse_args(["--backend", "transformers"])
    window = MainWindow(loader=backend_loader(calls), persist=False)
    qtbot.addWidget(window)
    try:
        app.apply_args(window, args)
        window.show()
        with qtbot.waitSignal(window.model_ready, timeout=WAIT_MS) as blocker:
            window.start()
        assert calls == ["transformers"] and blocker.args[0].backend == "transformers"
        assert window.controls.backend_name() == "transformers"
    finally:
        window.shutdown()


def test_the_cost_curve_view_shows_the_engines_figures(qtbot):
    """The built-in model on its default backend: the window shows the verify-cost curve the engine measured
    (engine.measure.verify_cost's cached figures for this model file, backend, device and thread count)."""
    from engine.host import engine_threads
    from engine.measure.verify_cost import verify_cost
    from gui.views.main.window import COST_CURVE_TOKENS
    from gui.worker import load_real_engine

    window = MainWindow(loader=load_real_engine, persist=False)
    qtbot.addWidget(window)
    try:
        window.show()
        with qtbot.waitSignal(window.worker_thread.worker.cost_measured, timeout=120_000) as blocker:
            window.start()
        curve = blocker.args[0]
        view = window.cost_curve
        qtbot.waitUntil(lambda: view.curve is not None, timeout=WAIT_MS)  # the view's queued slot, after ours
        assert view.curve is curve and curve.backend == window.session.model_info.backend
        cached = verify_cost(window.worker_thread.worker._engine.target, COST_CURVE_TOKENS, threads=engine_threads())
        assert curve.cost.seconds == cached.seconds  # the engine's figures, as measured and cached
        assert view.headline.text() == (f"Verifying 4 tokens costs {cached.relative(4):.1f}× one on this machine "
                                        f"({curve.backend}, {curve.device}).")
        assert view.cells[(1, 4)].text() == f"{cached.seconds[3] * 1000:.1f}"
        assert view.cells[(2, 8)].text() == f"{cached.relative(8):.2f}" and view.cells[(2, 1)].text() == "1.00"
        print(f"\nverify cost ({curve.backend}): " + ", ".join(
            f"n={n} {cached.relative(n):.2f}x" for n in range(1, cached.n_max + 1)))
    finally:
        window.shutdown()


def test_compare_puts_the_same_method_on_two_backends_side_by_side(qtbot, tmp_path):
    """A setting row's backend choice: the same method as loaded (llama.cpp) and on transformers; the worker loads
    the model on transformers for that row only, and the table has a row per run with its backend."""
    from engine.core.config import parse_spec

    calls, engines, load = engines_by_backend()
    window = open_window(qtbot, load)
    compare = window.open_compare()
    qtbot.addWidget(compare)
    try:
        compare.set_specs([parse_spec("prompt-lookup:k=3"), parse_spec("prompt-lookup:k=3")])
        row = compare.setting_rows[1]
        row.backend.setCurrentIndex(row.backend.findData("transformers"))
        assert [r.spec().backend for r in compare.setting_rows] == [None, "transformers"]
        assert compare.table.isColumnHidden(9)  # no cross-backend column before there is a second plain run
        compare.prompt.setPlainText("Say it twice: speculative decoding.")
        compare.max_new_tokens.setValue(20)
        with qtbot.waitSignal(compare.comparison_finished, timeout=WAIT_MS) as blocker:
            assert compare.run_comparison()
        session = blocker.args[0]
        assert calls == ["auto", "transformers"]  # the model loaded once more, on transformers, for that row
        assert [c.spec.label() for c in engines["llama.cpp"].calls] == ["none", "prompt-lookup:k=3"]
        # each backend gets its own plain decoding: the transformers row is judged against plain there
        assert [c.spec.label() for c in engines["transformers"].calls] == ["none:backend=transformers",
                                                                           "prompt-lookup:k=3,backend=transformers"]
        table = compare.table
        labels = [table.item(r, 0).text() for r in range(table.rowCount())]
        assert labels == ["plain decoding on llama.cpp · cpu · float32", "plain decoding on transformers · cpu · float32",
                          "prompt-lookup:k=3", "prompt-lookup:k=3,backend=transformers"]
        speedups = [table.item(r, 2) for r in range(table.rowCount())]
        assert speedups[2].text().endswith("× vs llama.cpp") and speedups[3].text().endswith("× vs transformers")
        assert speedups[3].toolTip() == "against plain on transformers · cpu · float32, measured in this run"
        assert not table.isColumnHidden(9) and table.horizontalHeaderItem(9).text() == "vs fastest plain"
        assert [run.state for run in session.runs] == ["done"] * 4
        # the export says which backend each row ran on (the shared one, or the row's own)
        import csv
        from gui.sessions.compare import write_rows_csv
        path = tmp_path / "rows.csv"
        write_rows_csv(session.rows(), path, session)
        with open(path, newline="", encoding="utf-8") as file:
            backends = [record["backend"] for record in csv.DictReader(file)]
        assert backends[1] == backends[3] == "transformers" and backends[0] == backends[2] != "transformers", backends
        # a method the other backend can't serve is refused in the row, with the method table's reason
        row.method.setCurrentIndex(row.method.findData("early-exit"))
        row.backend.setCurrentIndex(row.backend.findData("llama.cpp"))
        try:
            row.spec()
        except ConfigError as exc:
            assert "needs the transformers backend" in str(exc)
        else:
            raise AssertionError("early exit on llama.cpp was not refused")
    finally:
        window.shutdown()


def test_the_compile_box_loads_the_target_again_compiled_and_gui_compile_sets_it(qtbot):
    """Compile (issue 22: torch.compile'd runners, transformers) is a load option: ticking it loads the target again
    with compile=True, unticking it without; `specscope gui --compile` ticks it before the first load."""
    calls: list = []

    def load(name, progress=None, **options):
        calls.append(options.get("compile", False))
        return FakeEngine(target=FakeModel(name=name, backend="transformers"))

    args = app.build_parser().parse_args(["--compile"])
    window = MainWindow(loader=load, persist=False)
    qtbot.addWidget(window)
    try:
        app.apply_args(window, args)
        window.show()
        with qtbot.waitSignal(window.model_ready, timeout=WAIT_MS):
            window.start()
        assert calls == [True] and window.controls.compile_enabled()
        with qtbot.waitSignal(window.model_ready, timeout=WAIT_MS):
            window.controls.compile_box.setChecked(False)
        assert calls == [True, False]
    finally:
        window.shutdown()


def test_compare_under_auto_runs_a_method_where_the_chat_would(qtbot):
    """A compared (or swept) early exit on the built-in GGUF under auto runs on transformers, as the chat's does:
    the worker fills in resolve_backend's choice instead of refusing "needs the transformers backend"."""
    from engine.core.config import parse_spec
    from engine.models.sources import resolve_source

    calls, engines, load = engines_by_backend(resolve_source("default"))  # the built-in GGUF: on llama.cpp
    window = open_window(qtbot, load)
    compare = window.open_compare()
    qtbot.addWidget(compare)
    try:
        compare.set_specs([parse_spec("early-exit:k=2,layers=4"), parse_spec("prompt-lookup:k=3")])
        assert [r.spec().backend for r in compare.setting_rows] == [None, None]  # "as loaded"
        compare.prompt.setPlainText("Say it twice: speculative decoding.")
        compare.max_new_tokens.setValue(12)
        with qtbot.waitSignal(compare.comparison_finished, timeout=WAIT_MS) as blocker:
            assert compare.run_comparison()
        session = blocker.args[0]
        assert [run.state for run in session.runs] == ["done"] * 4
        assert calls == ["auto", "transformers"]
        assert [c.spec.label() for c in engines["transformers"].calls] == ["none:backend=transformers",
                                                                           "early-exit:k=2,layers=4,backend=transformers"]
        assert [c.spec.label() for c in engines["llama.cpp"].calls] == ["none", "prompt-lookup:k=3"]
        # the moved row is judged against plain decoding on transformers, never llama.cpp's (issue 31)
        early = next(row for row in session.rows() if row.spec.method == "early-exit")
        plain_there = next(row for row in session.rows() if row.spec == SpecConfig(backend="transformers"))
        assert early.baseline.startswith("plain on transformers") and early.equality == "identical"
        assert early.speedup == pytest.approx(early.tok_per_s / plain_there.tok_per_s)
        assert [pane.run.label for pane in compare.panes][:2] == ["plain decoding on llama.cpp",
                                                                  "plain decoding on transformers"]
        assert "MISMATCH" not in compare.status_label.text()
    finally:
        window.shutdown()
