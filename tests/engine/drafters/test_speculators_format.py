"""Eagle heads in other tools' layouts (engine/drafters/eagle_formats.py): a tiny random head written by hand in the
speculators "eagle" layout and in EAGLE-1's loads, drafts what an independent reading of its tensors predicts,
and greedy output equals plain decoding; our own head saved in the speculators layout reloads bit-identically;
a head that doesn't fit the target, an EAGLE-3 head, a corrupt config.json and missing weights each get one
line; through the CLI a bad folder exits 2 with one error line."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

from engine.cli.main import main
from engine.core.config import SpecConfig
from engine.drafters.eagle import EagleDrafter, make_eagle_drafter
from engine.drafters.eagle_head import EagleHead, HeadCard, target_fingerprint
from engine.core.errors import ConfigError
from engine.models.load import load_model
from engine.runtime import local_engine
from engine.drafters.eagle_formats import EAGLE3_MESSAGE, load_speculators, save_speculators
from engine_testkit import check_round_invariants, device_under_test, run, save_tiny_model

HIDDEN, INTERMEDIATE = 64, 96  # the head's own layer is narrower than the tiny target's (128)
VERIFIER = "test-org/tiny-llama"


def layer_config(vocab: int, **overrides) -> dict:
    """A transformer_layer_config as speculators writes it (a diff dict of the verifier's config)."""
    values = {"model_type": "llama", "vocab_size": vocab, "hidden_size": HIDDEN, "intermediate_size": INTERMEDIATE,
              "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-6,
              "rope_theta": 10000.0, "max_position_embeddings": 256}
    return {**values, **overrides}


def speculators_config(vocab: int, **overrides) -> dict:
    """config.json of a speculators eagle checkpoint, as in speculators' tests/unit/models/test_eagle_config.py."""
    config = {
        "speculators_model_type": "eagle", "architectures": ["EagleSpeculator", "LlamaDecoderLayer"],
        "transformer_layer_architecture": "LlamaDecoderLayer", "transformer_layer_config": layer_config(vocab),
        "layernorms": False, "fusion_bias": True, "speculators_version": "0.4.0",
        "speculators_config": {"algorithm": "eagle", "default_proposal_method": "greedy",
                               "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
                               "verifier": {"name_or_path": VERIFIER, "architectures": ["LlamaForCausalLM"]}}}
    config.update(overrides)
    return config


def random_layer(prefix: str, generator: torch.Generator, hidden: int = HIDDEN, norm: bool = False) -> dict:
    """A Llama decoder layer's tensors under `prefix`, random (scaled so the layer stays tame)."""
    def randn(*shape):
        return torch.randn(*shape, generator=generator) * 0.1
    tensors = {"self_attn.q_proj.weight": randn(hidden, hidden), "self_attn.k_proj.weight": randn(hidden // 2, hidden),
               "self_attn.v_proj.weight": randn(hidden // 2, hidden), "self_attn.o_proj.weight": randn(hidden, hidden),
               "mlp.gate_proj.weight": randn(INTERMEDIATE, hidden), "mlp.up_proj.weight": randn(INTERMEDIATE, hidden),
               "mlp.down_proj.weight": randn(hidden, INTERMEDIATE),
               "post_attention_layernorm.weight": 1 + randn(hidden)}
    if norm:
        tensors["input_layernorm.weight"] = 1 + randn(hidden)
    return {prefix + name: tensor for name, tensor in tensors.items()}


def write_head(folder, config: dict, tensors: dict):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    save_file({name: tensor.contiguous() for name, tensor in tensors.items()}, str(folder / "model.safetensors"))
    return folder


def speculators_tensors(vocab: int, seed: int = 0, n_draft: int = 0, hidden: int = HIDDEN) -> dict:
    """fusion_fc (with bias) and transformer.* with no input norm; with `n_draft`, a draft vocabulary (d2t, t2d)
    and a readout of its own (lm_head, n_draft rows), as EAGLE-3 stores them."""
    generator = torch.Generator().manual_seed(seed)
    tensors = {"fusion_fc.weight": torch.randn(hidden, 2 * hidden, generator=generator) * 0.1,
               "fusion_fc.bias": torch.randn(hidden, generator=generator) * 0.1,
               **random_layer("transformer.", generator, hidden)}
    if n_draft:
        ids = torch.randperm(vocab, generator=generator)[:n_draft]
        tensors["d2t"] = ids - torch.arange(n_draft)
        tensors["t2d"] = torch.zeros(vocab, dtype=torch.bool).index_fill_(0, ids, True)
        tensors["lm_head.weight"] = torch.randn(n_draft, hidden, generator=generator)
    return tensors


@pytest.fixture(scope="module")
def vocab(tiny_model) -> int:
    return tiny_model.model.get_output_embeddings().weight.shape[0]


@pytest.fixture(scope="module")
def speculators_dir(tmp_path_factory, vocab):
    return write_head(tmp_path_factory.mktemp("speculators-eagle"), speculators_config(vocab),
                      speculators_tensors(vocab, n_draft=120))


@pytest.fixture(scope="module")
def eagle1_dir(tmp_path_factory, vocab):
    """The original EAGLE-1 layout: a base-like config.json with one layer, fc with bias, layers.0.* with no
    input_layernorm, and an embed_tokens of its own (here random, so it differs from the target's)."""
    generator = torch.Generator().manual_seed(1)
    config = LlamaConfig(**layer_config(vocab), architectures=["LlamaForCausalLM"]).to_dict()
    tensors = {"fc.weight": torch.randn(HIDDEN, 2 * HIDDEN, generator=generator) * 0.1,
               "fc.bias": torch.randn(HIDDEN, generator=generator) * 0.1,
               "embed_tokens.weight": torch.randn(vocab, HIDDEN, generator=generator),
               **random_layer("layers.0.", generator)}
    return write_head(tmp_path_factory.mktemp("eagle1"), config, tensors)


def reference_draft(model, folder, context: list[int], prefix: str, fc: str) -> int:
    """The first drafted id as the checkpoint's own tensors predict it, read here independently of the loader:
    fc over cat[embedding of x_{t+1}, target's last post-norm hidden state f_t], a Llama layer with no input
    norm built from config.json, the readout (own lm_head over d2t, else the target's), argmax."""
    from safetensors.torch import load_file
    tensors, config = load_file(str(folder / "model.safetensors")), json.loads((folder / "config.json").read_text())
    layer_values = config.get("transformer_layer_config", config)
    layer_cfg = LlamaConfig(**{k: v for k, v in layer_values.items() if k != "model_type"})
    layer_cfg._attn_implementation = "sdpa"
    layer = LlamaDecoderLayer(layer_cfg, layer_idx=0)
    layer.input_layernorm = torch.nn.Identity()
    layer.load_state_dict({name[len(prefix):]: t for name, t in tensors.items() if name.startswith(prefix)})
    ids = torch.tensor([context])
    with torch.no_grad():
        features = model(ids, output_hidden_states=True).hidden_states[-1][0, :-1]
        embedding = tensors.get("embed_tokens.weight", model.get_input_embeddings().weight)[ids[0, 1:]]
        x = torch.nn.functional.linear(torch.cat([embedding, features], -1), tensors[fc + ".weight"],
                                       tensors.get(fc + ".bias"))[None]
        positions = torch.arange(x.shape[1])[None]
        out = layer(x, position_ids=positions, position_embeddings=LlamaRotaryEmbedding(layer_cfg)(x, positions))
        out = out[0] if isinstance(out, tuple) else out
        if "d2t" in tensors:
            draft_ids = torch.arange(tensors["d2t"].shape[0]) + tensors["d2t"]
            return int(draft_ids[torch.argmax(out[0, -1] @ tensors["lm_head.weight"].T)])
        return int(torch.argmax(out[0, -1] @ model.get_output_embeddings().weight.T))


@pytest.mark.parametrize("layout", ["speculators", "eagle1"])
def test_a_head_written_elsewhere_drafts_what_its_tensors_predict(layout, speculators_dir, eagle1_dir, tiny_model):
    folder = speculators_dir if layout == "speculators" else eagle1_dir
    prefix, fc = ("transformer.", "fusion_fc") if layout == "speculators" else ("layers.0.", "fc")
    drafter = make_eagle_drafter(SpecConfig(method="eagle", k=1, draft=str(folder)), tiny_model,
                                 tiny_model.new_runner())
    assert isinstance(drafter.head.layer.input_layernorm, torch.nn.Identity) and drafter.head.fc.bias is not None
    assert drafter.head.layer.mlp.down_proj.weight.shape == (HIDDEN, INTERMEDIATE)  # its own layer config
    assert (drafter.head.lm_head is not None) == (layout == "speculators")
    assert (drafter.head.embed_tokens is not None) == (layout == "eagle1")
    expected_name = VERIFIER if layout == "speculators" else "a model it does not name"
    assert drafter.note.startswith(f"this eagle head was trained for {expected_name}")
    for context in ([5, 9, 20, 31, 44, 12], [100, 7, 42, 8]):
        with torch.inference_mode():  # the target's features of the positions before, then the draft
            drafter.target_runner.forward(drafter.target_runner.sync(context[:-1]), 1)
            proposal = drafter.propose(context, 1)
        assert proposal.ids == [reference_draft(tiny_model.model, folder, context, prefix, fc)]
        assert abs(float(proposal.p_draft[0].sum()) - 1) < 1e-5
        drafter.release()


@pytest.mark.parametrize("k", [1, 3])
def test_greedy_output_with_a_speculators_head_equals_plain(speculators_dir, eagle1_dir, tiny_model, k):
    engine = local_engine(tiny_model)
    for folder in (speculators_dir, eagle1_dir):
        spec = SpecConfig(method="eagle", k=k, draft=str(folder))
        for prompt in ([5, 9, 20, 31], [100, 7, 42]):
            _, _, plain = run(engine, prompt, max_new_tokens=40)
            _, rounds, eagle = run(engine, prompt, max_new_tokens=40, spec=spec)
            check_round_invariants(rounds, eagle)
            assert eagle.output_ids == plain.output_ids
            assert eagle.stats.drafted_tokens > 0
        print(f"\n{folder.name} k={k}: accepted {eagle.stats.accepted_tokens}/{eagle.stats.drafted_tokens} (random)")


def our_head(tiny_model, vocab, *, restricted: bool, **options) -> tuple[EagleHead, HeadCard]:
    torch.manual_seed(3)
    draft_vocab = torch.randperm(vocab)[:150] if restricted else torch.arange(vocab)
    head = EagleHead(tiny_model.model, draft_vocab, **options).float()
    with torch.no_grad():  # norms away from their initial ones, so a lost norm would show
        for name, parameter in head.named_parameters():
            if "norm" in name:
                parameter.add_(torch.randn_like(parameter) * 0.1)
    card = HeadCard(tiny_model.label, target_fingerprint(tiny_model.model), HIDDEN, int(draft_vocab.numel()),
                    {"steps": 7})
    return head, card


@pytest.mark.parametrize("restricted, options", [(True, {}), (False, {"fc_bias": False, "input_norm": False})])
def test_our_head_saved_in_speculators_format_reloads_bit_identically(tiny_model, vocab, tmp_path, restricted,
                                                                     options):
    head, card = our_head(tiny_model, vocab, restricted=restricted, **options)
    save_speculators(tmp_path, head, card, tiny_model.model)
    from safetensors import safe_open
    with safe_open(str(tmp_path / "model.safetensors"), framework="pt") as weights:
        names = set(weights.keys())
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["speculators_model_type"] == "eagle" and config["layernorms"] is False
    assert config["fusion_bias"] is (not options) and config["specscope"]["input_layernorm"] is (not options)
    assert config["speculators_config"]["verifier"] == {"name_or_path": tiny_model.label,
                                                        "architectures": ["LlamaForCausalLM"]}
    assert "fusion_fc.weight" in names and "transformer.self_attn.q_proj.weight" in names
    assert ("transformer.input_layernorm.weight" in names) is (not options)
    assert ({"d2t", "t2d"} <= names) is restricted and not any(name.startswith(("fc.", "layer.")) for name in names)
    loaded, loaded_card = load_speculators(tmp_path, tiny_model.model, tiny_model.label)
    saved, again = head.trainable_state(), loaded.trainable_state()
    assert saved.keys() == again.keys()
    assert all(torch.equal(saved[name], again[name]) for name in saved)
    assert loaded_card.fingerprint == card.fingerprint and loaded_card.info == {"steps": 7}
    features, embeddings = torch.randn(1, 5, HIDDEN), torch.randn(1, 5, HIDDEN)
    positions = torch.arange(5)[None]
    with torch.no_grad():
        assert torch.equal(head(features, embeddings, positions), loaded(features, embeddings, positions))


def test_our_speculators_folder_drafts_losslessly_and_is_refused_for_another_target(tiny_model, vocab, tmp_path,
                                                                                    tiny_tokenizer):
    head, card = our_head(tiny_model, vocab, restricted=True)
    save_speculators(tmp_path / "head", head, card, tiny_model.model)
    engine, spec = local_engine(tiny_model), SpecConfig(method="eagle", k=2, draft=str(tmp_path / "head"))
    _, _, plain = run(engine, [5, 9, 20, 31], max_new_tokens=32)
    _, _, eagle = run(engine, [5, 9, 20, 31], max_new_tokens=32, spec=spec)
    assert eagle.output_ids == plain.output_ids and eagle.stats.drafted_tokens > 0
    other = load_model(str(save_tiny_model(tmp_path / "other", tiny_tokenizer, seed=1)), device=device_under_test(),
                       dtype="float32")
    with pytest.raises(ConfigError, match=f"was trained for {tiny_model.label}, not"):
        load_speculators(tmp_path / "head", other.model, other.label)


@pytest.mark.parametrize("change, message", [
    (lambda c, t, v: (speculators_config(v, transformer_layer_config=layer_config(v, hidden_size=32,
                                                                                 num_attention_heads=2)),
                       speculators_tensors(1, hidden=32)),
     r"is for a model with hidden size 32 \(it was trained for test-org/tiny-llama\); .* has 64"),
    (lambda c, t, v: (speculators_config(v, transformer_layer_config=layer_config(v + 5)), t),
     r"is for a model with vocabulary \d+ .*; .* has \d+"),
    (lambda c, t, v: (speculators_config(v, transformer_layer_config=layer_config(v, model_type="qwen2")), t),
     r"has a 'qwen2' layer .*; .* is a 'llama' model"),
    (lambda c, t, v: ({**c, "speculators_config": {**c["speculators_config"], "verifier": {
        "name_or_path": "Qwen/Qwen2-0.5B", "architectures": ["Qwen2ForCausalLM"]}}}, t),
     r"was trained for Qwen/Qwen2-0.5B \(a Qwen2ForCausalLM\); .* is a LlamaForCausalLM"),
    (lambda c, t, v: (c, {**t, "fusion_fc.weight": torch.zeros(HIDDEN, 100)}),
     r"doesn't fit .*: fusion_fc.weight is 64×100, .* needs 64×128"),
    (lambda c, t, v: (c, {**t, "fusion_fc.weight": torch.zeros(HIDDEN, 3 * HIDDEN)}), "EAGLE-3 heads read three"),
    (lambda c, t, v: ({**c, "layernorms": True}, t), r"extra layernorms \(layernorms: true\)"),
    (lambda c, t, v: (c, {**t, "embedding_layernorm.weight": torch.ones(HIDDEN)}),
     "has tensors an eagle head has no place for: embedding_layernorm.weight"),
    (lambda c, t, v: ({**c, "fusion_bias": False}, t), r"weights don't fit .* unexpected \['fc.bias'\]"),
    (lambda c, t, v: (c, {k: x for k, x in t.items() if k != "transformer.mlp.up_proj.weight"}),
     r"weights don't fit .* \(missing \['layer.mlp.up_proj.weight'\]"),
    (lambda c, t, v: (c, {**t, "d2t": torch.tensor([0, -1, 5, 2]), "lm_head.weight": torch.zeros(4, HIDDEN)}),
     r"draft vocabulary \(d2t/t2d\) is not a set of distinct ids"),
    (lambda c, t, v: ({**c, "speculators_model_type": "dflash"}, t), "speculators 'dflash' head; eagle loads"),
])
def test_a_head_that_does_not_fit_is_refused_in_one_line(tiny_model, vocab, tmp_path, change, message):
    config, tensors = change(speculators_config(vocab), speculators_tensors(vocab), vocab)
    folder = write_head(tmp_path / "head", config, tensors)
    with pytest.raises(ConfigError, match=message) as refused:
        load_speculators(folder, tiny_model.model, tiny_model.label)
    assert "\n" not in str(refused.value)
    with pytest.raises(ConfigError, match=message):  # the engine refuses it before the first round
        run(local_engine(tiny_model), [5, 9, 20], max_new_tokens=4, spec=SpecConfig(method="eagle", draft=str(folder)))


def test_eagle3_heads_are_refused_with_the_reason(tiny_model, vocab, tmp_path):
    speculators = write_head(tmp_path / "speculators", speculators_config(vocab, speculators_model_type="eagle3",
                                                                          draft_vocab_size=100),
                             speculators_tensors(vocab))
    generator = torch.Generator().manual_seed(0)
    original = write_head(tmp_path / "original", {**LlamaConfig(**layer_config(vocab)).to_dict(),
                                                  "draft_vocab_size": 100},
                          {"fc.weight": torch.zeros(HIDDEN, 3 * HIDDEN), "d2t": torch.zeros(100, dtype=torch.long),
                           **random_layer("midlayer.", generator)})
    for folder in (speculators, original):
        with pytest.raises(ConfigError) as refused:
            load_speculators(folder, tiny_model.model, tiny_model.label)
        assert str(refused.value) == f"{folder} holds an EAGLE-3 head: {EAGLE3_MESSAGE}"


@pytest.mark.parametrize("damage, message", [
    (lambda f: (f / "config.json").write_text("{not json"), r"config.json is not readable JSON \(JSONDecodeError\)"),
    (lambda f: (f / "config.json").write_text("[1, 2]"), "config.json is not a JSON object"),
    (lambda f: (f / "model.safetensors").unlink(), "has a config.json but no model.safetensors: its head weights"),
    (lambda f: ((f / "model.safetensors").rename(f / "pytorch_model.bin")), "only as a pickle checkpoint"),
    (lambda f: (f / "model.safetensors").write_bytes(b"\x10\x00\x00\x00garbage"),
     "model.safetensors could not be read"),
])
def test_a_corrupt_config_or_missing_weights_gets_one_line(tiny_model, vocab, tmp_path, damage, message):
    folder = write_head(tmp_path / "head", speculators_config(vocab), speculators_tensors(vocab))
    damage(folder)
    with pytest.raises(ConfigError, match=message) as refused:
        load_speculators(folder, tiny_model.model, tiny_model.label)
    assert "\n" not in str(refused.value)


def test_a_model_folder_given_as_a_head_is_refused(tiny_model, tiny_dir):
    with pytest.raises(ConfigError, match="is not an eagle head folder"):
        run(local_engine(tiny_model), [5, 9, 20], max_new_tokens=4, spec=SpecConfig(method="eagle", draft=str(tiny_dir)))


def test_the_cli_refuses_a_bad_head_folder_with_exit_2_and_one_line(tiny_dir, vocab, tmp_path, capsys):
    folder = write_head(tmp_path / "head", speculators_config(vocab, speculators_model_type="eagle3"),
                        speculators_tensors(vocab))
    code = main(["generate", "--model", str(tiny_dir), "--backend", "transformers", "--device", "cpu",
                 "--method", "eagle", "--draft", str(folder), "--max-new-tokens", "4", "hi"])
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, err
    assert EAGLE3_MESSAGE in lines[0]


def test_the_drafter_uses_the_targets_parts_for_our_heads(tiny_model, vocab):
    head, _card = our_head(tiny_model, vocab, restricted=True)
    drafter = EagleDrafter(tiny_model, head, tiny_model.new_runner())
    assert drafter.embed is tiny_model.model.get_input_embeddings() and drafter.note is None
    assert torch.equal(drafter.readout, tiny_model.model.get_output_embeddings().weight[head.draft_vocab])


def test_a_copy_of_the_targets_embedding_is_not_kept_twice(tiny_model, vocab, tmp_path):
    """EAGLE-1 checkpoints carry a copy of the base model's embedding: the head then uses the target's own."""
    tensors = {"fc.weight": torch.zeros(HIDDEN, 2 * HIDDEN),
               "embed_tokens.weight": tiny_model.model.get_input_embeddings().weight.detach().clone(),
               **random_layer("layers.0.", torch.Generator().manual_seed(2), norm=True)}
    folder = write_head(tmp_path / "head", LlamaConfig(**layer_config(vocab)).to_dict(), tensors)
    head, card = load_speculators(folder, tiny_model.model, tiny_model.label)
    assert head.embed_tokens is None and head.lm_head is None and head.fc.bias is None and head.input_norm
    assert card.fingerprint == "" and card.info["format"] == "eagle1"
