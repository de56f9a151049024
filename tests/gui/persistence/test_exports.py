"""Exports carry every setting of the run (prompt, model, backend, device, dtype, method, k, layers, draft,
temperature, seed, budget) on every row; plain decoding claims no k; default names say what is inside; one
default folder."""

import csv
import json

from engine.measure.compare import comparison_events
from engine.core.config import SamplingConfig, parse_spec
from fakes import FakeEngine
from gui.sessions.compare import SWEEP, ComparisonSession, export_name, write_rows_csv, write_rows_json, \
    write_sweep_csv
from gui.persistence.settings import export_folder


def run(specs, kind="compare"):
    sampling = SamplingConfig(temperature=0.0, seed=7)
    session = ComparisonSession(specs, "Translate it", sampling, max_new_tokens=12, kind=kind, model="default")
    for index, event in comparison_events(FakeEngine(), "Translate it", specs, max_new_tokens=12, sampling=sampling):
        session.apply(index, event)
    session.finish()
    return session


def test_every_row_says_how_it_was_made_and_plain_claims_no_k(tmp_path):
    session = run([parse_spec("early-exit:k=3,layers=2"), parse_spec("draft-model:k=5,draft=small")])
    write_rows_csv(session.rows(), tmp_path / "rows.csv", session)
    with open(tmp_path / "rows.csv", newline="", encoding="utf-8") as file:
        rows = list(csv.DictReader(file))
    assert [r["label"] for r in rows] == ["none", "early-exit:k=3,layers=2", "draft-model:k=5,draft=small"]
    assert rows[0]["k"] == "" and rows[1]["k"] == "3" and rows[2]["k"] == "5"
    assert rows[1]["layers"] == "2" and rows[2]["draft"] == "small"
    for row in rows:
        assert (row["prompt"], row["model"], row["device"], row["dtype"]) == ("Translate it", "default", "cpu",
                                                                             "float32")
        assert (row["temperature"], row["seed"], row["max_new_tokens"]) == ("0.0", "7", "12")
        assert row["backend"] in ("transformers", "llama.cpp")
    write_rows_json(session, tmp_path / "rows.json")
    document = json.loads((tmp_path / "rows.json").read_text(encoding="utf-8"))
    assert document["seed"] == 7 and document["dtype"] == "float32" and document["rows"][0]["k"] is None


def test_sweep_rows_and_default_names(tmp_path):
    session = run([parse_spec("prompt-lookup:k=2"), parse_spec("prompt-lookup:k=4")], kind=SWEEP)
    write_sweep_csv(session.sweep_summary(), tmp_path / "sweep.csv", session)
    with open(tmp_path / "sweep.csv", newline="", encoding="utf-8") as file:
        rows = list(csv.DictReader(file))
    assert [(r["method"], r["k"]) for r in rows] == [("prompt-lookup", "2"), ("prompt-lookup", "4")]
    assert rows[0]["prompt"] == "Translate it" and rows[0]["seed"] == "7"
    assert export_name("csv", session, "csv", when=0).startswith("specscope-compare-default-")
    assert export_name("sweep-png", session, "png", when=0).endswith(".png")
    assert "specscope-csv" not in export_name("csv", session, "csv")
    assert export_folder().is_dir()


def test_every_methods_parameters_have_a_csv_column(tmp_path):
    from engine.core.methods import all_params

    session = run([parse_spec("prompt-lookup:k=2,ngram_max=4")])
    write_rows_csv(session.rows(), tmp_path / "rows.csv", session)
    with open(tmp_path / "rows.csv", newline="", encoding="utf-8") as file:
        rows = list(csv.DictReader(file))
    assert {p.name for p in all_params()} <= set(rows[0])  # a parameter added later gets its column
    assert rows[1]["ngram_max"] == "4" and rows[1]["ngram_min"] == "1" and rows[0]["ngram_max"] == ""
