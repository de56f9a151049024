"""`specscope gui`'s options (gui.app): the engine's own (--dtype auto included), no abbreviations, a method
parameter that the method asked for, or the window's method, doesn't take ends in one line, exit 2; --compile
on a backend that doesn't compile is a note on the ready line, as on the command line."""

from __future__ import annotations

import pytest

from gui import app as gui_app
from gui import theme
from fakes import FakeEngine, FakeModel

LAYERS_FOR_PROMPT_LOOKUP = "--layers is early-exit's parameter; prompt-lookup takes --ngram-max, --ngram-min"


def test_dtype_auto_and_every_name_generate_takes():
    assert gui_app.parse_args(["gui", "--dtype", "auto"]).dtype == "auto"
    assert gui_app.parse_args(["--dtype", "bf16"]).dtype == "bfloat16"
    assert gui_app.parse_args([]).dtype is None  # not given: the window keeps the last one chosen
    assert gui_app.parse_args(["--tree", "8"]).tree == 8 and gui_app.parse_args([]).tree is None


@pytest.mark.parametrize("argv, line", [
    (["--tree-dep", "8"], "specscope gui: error: unrecognized arguments: --tree-dep 8"),  # not --tree-depth
    (["--dtype", "fp8"], "specscope gui: error: argument --dtype: expected auto, float32, bf16 or fp16, got 'fp8'"),
])
def test_abbreviations_and_bad_values_are_refused_by_the_parser(capsys, argv, line):
    with pytest.raises(SystemExit) as exit_:
        gui_app.parse_args(argv)
    assert exit_.value.code == 2 and capsys.readouterr().err.splitlines() == [line]
    from gui.benchmark import build_parser as bench_gui_parser
    assert not gui_app.build_parser().allow_abbrev and not bench_gui_parser().allow_abbrev


@pytest.mark.parametrize("argv, fragment", [
    (["--method", "prompt-lookup", "--layers", "8"], LAYERS_FOR_PROMPT_LOOKUP),
    (["--method", "ngram-mod+early-exit"], "--method ngram-mod+early-exit is not in the window's method menu ("),
])
def test_a_method_option_that_does_not_apply_is_refused_before_the_window_opens(capsys, argv, fragment):
    assert gui_app.main([*argv, "--prompt", "x", "--quit-when-done"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specscope gui: error: ") and fragment in err and len(err.splitlines()) == 1, err


def test_a_parameter_without_method_is_checked_against_the_windows_method(qtbot):
    from gui.views.main.window import MainWindow

    window = MainWindow(loader=lambda name, progress=None, **options: FakeEngine(), palette=theme.LIGHT)
    qtbot.addWidget(window)
    try:
        gui_app.apply_args(window, gui_app.parse_args(["--method", "prompt-lookup"]))
        args = gui_app.parse_args(["--layers", "8"])
        gui_app.check_settings(args)  # the window's method is not known before it opens
        gui_app.apply_args(window, args)
        assert gui_app.held_problem(window, args) == LAYERS_FOR_PROMPT_LOOKUP
        own = gui_app.parse_args(["--ngram-max", "5"])
        gui_app.apply_args(window, own)
        assert gui_app.held_problem(window, own) is None
    finally:
        window.shutdown()


@pytest.mark.parametrize("backend, said", [("llama.cpp", True), ("transformers", False)])
def test_compile_where_the_model_runs_uncompiled_is_said_on_the_ready_line(qtbot, backend, said):
    from gui.views.main.window import MainWindow

    window = MainWindow(loader=lambda name, progress=None, **options: FakeEngine(target=FakeModel(backend=backend)),
                        palette=theme.LIGHT)
    qtbot.addWidget(window)
    try:
        gui_app.apply_args(window, gui_app.parse_args(["--compile"]))
        with qtbot.waitSignal(window.model_ready, timeout=20_000):
            window.start()
        status = window.status_label.text()
        assert status.startswith("Ready · ")
        assert ("· --compile is unused on llama.cpp: it compiles runners on transformers only" in status) is said
    finally:
        window.shutdown()
