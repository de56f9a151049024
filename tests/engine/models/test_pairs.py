"""Known-good target/draft pairs (engine.models.pairs): matched by hub id, file or folder name; the built-in model is
itself a known draft."""

from engine.models.pairs import KNOWN_PAIRS, known_pairs_table, pairs_drafted_by, pairs_for, suggestion


def test_families_match_by_id_file_and_folder():
    assert [p.draft for p in pairs_for("Qwen/Qwen3-32B")] == ["Qwen/Qwen3-0.6B"]
    assert [p.draft for p in pairs_for("/models/qwen3-8b-q4_k_m.gguf")] == ["Qwen/Qwen3-0.6B"]
    assert [p.draft for p in pairs_for("C:\\m\\Llama-3.1-8B-Instruct")] == ["meta-llama/Llama-3.2-1B-Instruct"]
    assert [p.draft for p in pairs_for("HuggingFaceTB/SmolLM2-1.7B-Instruct")] == \
        ["HuggingFaceTB/SmolLM2-135M-Instruct"]
    assert [p.draft for p in pairs_for("google/gemma-4-E4B-it")] == ["google/gemma-4-E4B-it-assistant"]


def test_a_draft_is_not_its_own_target():
    assert pairs_for("Qwen/Qwen3-0.6B") == []
    assert pairs_for("google/gemma-4-E4B-it-assistant") == []
    assert pairs_for("some/unknown-model") == [] and suggestion("some/unknown-model") == ""


def test_suggestions_name_the_draft_or_the_bigger_target():
    assert suggestion("Qwen3-8B") == "Known-good draft: Qwen/Qwen3-0.6B for Qwen3."
    assert "licence" in suggestion("meta-llama/Llama-3.1-8B-Instruct")
    built_in = "SmolLM2-135M-Instruct (built-in)"
    assert pairs_drafted_by(built_in)[0].family == "SmolLM2"
    assert "load HuggingFaceTB/SmolLM2-1.7B-Instruct as the target" in suggestion("default", built_in)


def test_table_is_json_ready():
    table = known_pairs_table()
    assert len(table) == len(KNOWN_PAIRS) and {"family", "targets", "draft", "note"} <= set(table[0])
