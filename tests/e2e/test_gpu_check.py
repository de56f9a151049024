"""packaging/gpu_check.py can't rot: its arguments, one real section run through its child process and written
as a report, and which outcomes fail the check (only greedy equality's)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "packaging" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_device_section_runs_and_is_reported(tmp_path, capsys):
    check = gpu_check()
    out = tmp_path / "report.json"
    assert check.main(["--device", "cpu", "--only", "device", "--out", str(out), "--budget", "600"]) == 0
    report = json.loads(out.read_text())
    device = report["sections"]["device"]
    assert report["ok"] is True and list(report["sections"]) == ["device"]
    assert device["status"] == "ok" and device["device"] == "cpu" and isinstance(device["native_bf16"], bool)
    printed = capsys.readouterr().out
    assert "device       ok" in printed and "report:" in printed


def test_only_a_failed_or_missing_equality_fails_the_check():
    check = gpu_check()
    assert check.parse_args([]).device == "cuda" and check.parse_args([]).out == "gpu_check.json"
    near_tie = {"status": "ok", "rows": [{"result": "identical"}, {"result": "near-tie"}]}
    assert check.overall_ok({"equality": near_tie, "train": {"status": "error"}, "llama_cuda": {"status": "skipped"}})
    assert check.overall_ok({"equality": {"status": "timeout", "rows": [{"result": "identical"}]}})
    assert not check.overall_ok({"equality": {"status": "fail", "rows": [{"result": "mismatch"}]}})
    assert not check.overall_ok({"equality": {"status": "timeout", "rows": []}})
    assert not check.overall_ok({"equality": {"status": "error", "error": "boom"}})
    report = {"device": "cpu", "ok": False, "seconds": 1.0, "sections": {"equality": {
        "status": "fail", "seconds": 1.0, "rows": [{"result": "mismatch", "shape": "tiny", "dtype": "bf16",
                                                    "method": "eagle", "explanation": "MISMATCH at token 3"}]}}}
    text = check.summary(report)
    assert "FAILED" in text and "1 mismatch" in text and "✗ tiny bf16 eagle: MISMATCH at token 3" in text
