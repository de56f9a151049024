"""The method registry: a method added by registering one MethodSpec (tests/engine/drafters/toy_method.py,
which no file of engine/ or gui/ names) runs through the CLI, the bench and the scripted GUI, with its own
parameter as a CLI option, a SPEC key and a settings control; and the registry's own contract."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from engine.cli.main import main as cli_main  # noqa: E402
from engine.core.config import SpecConfig, parse_spec  # noqa: E402
from engine.core.errors import ConfigError  # noqa: E402
from engine.core.methods import (MethodSpec, method_names, method_spec, methods, plain_method,  # noqa: E402
                                 register, registered)
from engine.drafters import drafter_cache_key, make_drafter  # noqa: E402
from toy_method import METHOD as TOY, FixedTokenDrafter  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent


@pytest.fixture
def toy():
    with registered(TOY) as spec:
        yield spec
    assert TOY.name not in method_names()


def test_every_shipped_method_is_registered_once_with_one_plain_method():
    names = method_names()
    assert len(names) == len(set(names)) >= 7
    assert [m for m in methods() if m.plain] == [plain_method()] and not plain_method().speculative
    assert SpecConfig().method == plain_method().name and not SpecConfig().speculative
    for method in methods():
        assert method.label and method.description and "\n" not in method.description
        assert set(method.cache_params) <= {p.name for p in method.params}
        assert method.backends and set(method.backends) <= {"transformers", "llama.cpp"}


def test_unknown_names_and_taken_names_are_refused():
    with pytest.raises(ConfigError, match=r"unknown method 'medusa'; choose one of .*"):
        method_spec("medusa")
    with pytest.raises(ValueError, match="registered already"):
        register(MethodSpec(name=plain_method().name, label="x", description="x", build=lambda *a: None))
    with pytest.raises(ValueError, match="one plain-decoding method"):
        register(MethodSpec(name="another-plain", label="x", description="x", build=lambda *a: None, plain=True))


def test_an_empty_registry_says_what_to_import():
    code = ("from engine.core.methods import method_spec\n"
            "try:\n    method_spec('x')\nexcept RuntimeError as exc:\n    print(exc)\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert "import engine.drafters first" in result.stdout


def test_the_toy_methods_parameter_is_checked_labelled_and_keys_its_drafter(toy):
    spec = parse_spec("toy-fixed:k=3,toy_token=7")
    assert spec.param("toy_token") == 7 and spec.label() == "toy-fixed:k=3,toy_token=7"
    assert parse_spec(spec.label()) == spec and SpecConfig("toy-fixed").param("toy_token") == 0
    with pytest.raises(ConfigError, match="toy-fixed toy_token must be ≥ 0, got -1"):
        SpecConfig("toy-fixed", params={"toy_token": -1})
    with pytest.raises(ConfigError, match="bad setting 'layers=2'.*keys k, draft, toy_token, adaptive, backend"):
        parse_spec("toy-fixed:layers=2")
    assert SpecConfig("toy-fixed", params={"layers": 2}).warnings == ("--layers is ignored by method toy-fixed",)
    assert drafter_cache_key(spec) != drafter_cache_key(spec.with_params(toy_token=8))
    assert drafter_cache_key(spec) == drafter_cache_key(spec.with_k(5))
    drafter = make_drafter(spec, target=None)
    assert isinstance(drafter, FixedTokenDrafter) and drafter.propose([1, 2], 3).ids == [7, 7, 7]


def test_a_toy_method_runs_through_cli_bench_and_gui(toy, tiny_dir, tmp_path, capsys, qtbot):
    token = 5
    # the CLI: --method lists it, --toy-token is its parameter, and greedy output equals plain decoding's
    common = ["generate", "--model", str(tiny_dir), "--max-new-tokens", "8", "--json", "hello there"]
    assert cli_main([*common[:-1], "--method", "toy-fixed", "--toy-token", str(token), "--k", "3", common[-1]]) == 0
    toy_events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert cli_main(common) == 0
    plain_events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert toy_events[0]["spec_label"] == f"toy-fixed:k=3,toy_token={token}"
    assert toy_events[-1]["text"] == plain_events[-1]["text"]
    assert toy_events[-1]["stats"]["drafted_tokens"] > 0  # it did draft, and verification kept the output

    # the bench: a SPEC with its key, compared with plain decoding on every prompt
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "Say yes."}) + "\n" + json.dumps({"prompt": "Count to three."}))
    out_json = tmp_path / "bench.json"
    label = f"toy-fixed:k=2,toy_token={token}"
    assert cli_main(["bench", "--model", str(tiny_dir), "--prompts", str(prompts), "--max-new-tokens", "6",
                     "--config", label, "--json", str(out_json)]) == 0
    configs = json.loads(out_json.read_text())["configs"]
    assert set(configs) == {SpecConfig().label(), label}
    assert configs[label]["all"]["identical_to_none"] == 2

    # the GUI: the settings panel lists it and shows its parameter's control (and only for it)
    from gui.views.chat.controls import ControlsPanel
    from gui.views.compare.parts import SettingRow
    panel = ControlsPanel()
    qtbot.addWidget(panel)
    assert "toy-fixed" in [panel.method.itemData(i) for i in range(panel.method.count())]
    control = panel.param_controls["toy_token"]
    panel.apply(method="toy-fixed", toy_token=token, k=2)
    assert control.isEnabled() and not control.isHidden()
    assert panel.read().spec.label() == f"toy-fixed:k=2,toy_token={token}"
    panel.apply(method=plain_method().name)
    assert not control.isEnabled() and control.isHidden()
    row = SettingRow(parse_spec(label))
    qtbot.addWidget(row)
    assert row.spec() == parse_spec(label) and not row.param_controls["toy_token"].isHidden()


def test_the_scripted_gui_runs_a_method_registered_by_a_plugin(tiny_dir, tmp_path):
    """`specscope gui --prompt … --quit-when-done` with the toy method registered before the window opens
    (toy_method.py run as a script): its option is accepted, the reply runs with it and equals plain's."""
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", SPECSCOPE_DATA_DIR=str(tmp_path / "data"),
               SPECSCOPE_SETTINGS_DIR=str(tmp_path / "settings"))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    result = subprocess.run([sys.executable, str(HERE / "toy_method.py"), "--model", str(tiny_dir), "--backend",
                             "transformers", "--method", "toy-fixed", "--toy-token", "5", "--k", "2",
                             "--max-new-tokens", "6", "--prompt", "hello there", "--quit-when-done"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    record = json.loads(result.stdout.strip().splitlines()[-1])
    assert record["spec"] == "toy-fixed:k=2,toy_token=5" and record["drafted_tokens"] > 0


def other_value(param):
    """A value of `param` other than its default, within its range (a switch flipped)."""
    if param.type is bool:
        return not param.default
    if param.default is None:
        return (param.min or 1) + 1
    if param.max is None or param.default + 1 <= param.max:
        return param.default + 1
    return param.default - 1 if param.type is int else param.default - (param.default - (param.min or 0)) / 2


@pytest.mark.parametrize("method", [m for m in methods() if m.cache_params], ids=lambda m: m.name)
def test_a_changed_cache_parameter_needs_a_new_drafter_and_k_does_not(method):
    spec = SpecConfig(method.name, draft="default" if method.needs_draft else None)
    assert drafter_cache_key(spec.with_k(spec.k + 1)) == drafter_cache_key(spec)
    for name in method.cache_params:
        param = method.param(name)
        other = other_value(param)
        if name == "ngram_min":  # it stays ≤ ngram_max
            spec_other = spec.with_params(ngram_max=other + 1, ngram_min=other)
        else:
            spec_other = spec.with_params(**{name: other})
        assert drafter_cache_key(spec_other) != drafter_cache_key(spec)
