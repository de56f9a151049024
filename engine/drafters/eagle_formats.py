"""Eagle heads in the formats of other tools: vLLM's `speculators` "eagle" checkpoints and the original EAGLE-1
layout, loaded into an EagleHead (engine/drafters/eagle_head.py), and our own heads written in the speculators layout.

The formats, as read in their sources (read as references; none of their code is used here):
- speculators "eagle" (EAGLE-1/2 and HASS): vllm-project/speculators v0.4.0 `src/speculators/models/eagle.py`
  (EagleSpeculatorConfig, EagleSpeculator; moved to a legacy converter module in v0.5.0, #332, and removed
  with `src/speculators/convert/eagle/eagle_converter.py` in #672, v0.7.0), `src/speculators/config.py` (VerifierConfig,
  SpeculatorsConfig) and `tests/unit/models/test_eagle_config.py`. config.json: `speculators_model_type`
  "eagle", `transformer_layer_config` (the verifier's config, a diff dict), `layernorms`, `fusion_bias`,
  `speculators_config` {algorithm, proposal_methods, default_proposal_method, verifier {name_or_path,
  architectures}}. model.safetensors: `fusion_fc.weight` (+ `.bias` with fusion_bias) over
  cat[token embedding, verifier hidden state], the decoder layer as `transformer.*` with no input norm when
  `layernorms` is false (it is nn.Identity), `embedding_layernorm` / `pre_lm_head_layernorm` only when true;
  embed_tokens and lm_head are the verifier's and not saved.
- EAGLE-1 as published (SafeAILab/EAGLE `eagle/model/cnets1.py`, `ea_model.py`): a config.json like the base
  model's with one layer, weights `fc.weight`, `fc.bias` (bias unless the config says `"bias": false`),
  `layers.0.*` with no `input_layernorm` in layer 0, often a copy of `embed_tokens.weight`; features are the
  base model's last post-norm hidden state, the layer's output goes to the base lm_head with no norm — as
  ours. vLLM reads this layout for `method: eagle` (vllm/model_executor/models/llama_eagle.py:
  `disable_input_layernorm` for layer 0, `fc` without bias); its speculators config reader
  (vllm/transformers_utils/configs/speculators/algos.py), in every version read here, registers eagle3 (later
  peagle, dflash, dspark), not "eagle".
- EAGLE-3 (speculators `models/eagle3/`, EAGLE `eagle/model/cnets.py`): `fc` over three of the target's layers
  (3H → H), a layer whose attention takes 2H, its own norm and lm_head over a draft vocabulary mapped by `d2t`
  (target id = draft id + d2t[draft id]) and `t2d`. Not loaded: the target runner keeps only its last layer's
  hidden state (engine/backends/transformers.py), and that layer is not the target's own class.

What maps 1:1 onto an EagleHead: fc (bias or none), the layer (input norm or none), a layer config of its own,
an embedding and an lm_head of its own, a draft vocabulary as d2t/t2d (EAGLE-3's names). What a head trained
here has that speculators "eagle" has no place for (the layer's input norm, a restricted draft vocabulary) is
written as `transformer.input_layernorm.weight` and EAGLE-3's `d2t`/`t2d` and flagged in config.json's
"specscope" block (a reader that doesn't know the block would miss them), with our card (head.json, the
target's fingerprint) beside it. A checkpoint without our card is accepted when its shapes fit the target,
with a note naming the model it was trained for. Touches the head folder (read, and written by
save_speculators), torch and the target's modules read-only.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from engine.core.config import SpecConfig
from engine.drafters.eagle_head import (CARD_FILE, EagleHead, HeadCard, WEIGHTS_FILE as OWN_WEIGHTS_FILE, decoder_parts,
                               parse_card, target_fingerprint)
from engine.core.errors import ConfigError

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
SPECULATORS_VERSION = "0.4.0"  # the speculators release whose EagleSpeculator layout this follows
EAGLE3_MESSAGE = ("EAGLE-3 heads read three of the target's layers; SpecScope's eagle drafts from the last layer "
                  "only (EAGLE-1 / HASS format)")
# checkpoint name prefix → EagleHead name prefix, per layout; names kept as they are in both
RENAMES = {"speculators": {"fusion_fc.": "fc.", "transformer.": "layer."},
           "eagle1": {"fc.": "fc.", "layers.0.": "layer."}}
KEPT_NAMES = ("embed_tokens.weight", "lm_head.weight", "d2t", "t2d")


@dataclass(frozen=True)
class Layout:
    """What a foreign head folder's config.json and tensor names say about the head."""

    kind: str  # "speculators" | "eagle1"
    layer_config: dict
    verifier: str  # the model it was trained for, as the checkpoint names it ("" when it doesn't)
    architectures: tuple[str, ...]  # the verifier's, where the checkpoint says
    fc_bias: bool
    input_norm: bool
    shapes: dict  # checkpoint tensor name → shape


def is_foreign_head(folder: str | Path) -> bool:
    """Whether `folder` holds a head in another tool's layout (a config.json, no head.safetensors of ours)."""
    folder = Path(folder)
    return (folder / CONFIG_FILE).is_file() and not (folder / OWN_WEIGHTS_FILE).is_file()


def read_json(path: Path) -> dict:
    """A JSON object file; ConfigError in one line when it is unreadable or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path} is not readable JSON ({type(exc).__name__})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} is not a JSON object")
    return data


def tensor_shapes(folder: Path) -> dict[str, tuple[int, ...]]:
    """Name → shape of every tensor in the folder's model.safetensors, from its header (nothing is loaded)."""
    from safetensors import SafetensorError, safe_open
    path = folder / WEIGHTS_FILE
    if not path.is_file():
        if any(folder.glob("*.bin")) or any(folder.glob("*.pt")):
            raise ConfigError(f"{folder} has its head weights only as a pickle checkpoint (.bin/.pt); SpecScope "
                              f"reads eagle heads from {WEIGHTS_FILE} only (convert it with safetensors)")
        raise ConfigError(f"{folder} has a {CONFIG_FILE} but no {WEIGHTS_FILE}: its head weights are missing")
    try:
        with safe_open(str(path), framework="pt") as weights:
            return {name: tuple(weights.get_slice(name).get_shape()) for name in weights.keys()}
    except (SafetensorError, OSError, ValueError) as exc:
        raise ConfigError(f"{path} could not be read ({_reason(exc)})") from None


def _reason(exc: Exception) -> str:
    """An exception's first line, short, for a one-line message."""
    text = str(exc).strip()
    return text.splitlines()[0][:160] if text else type(exc).__name__


def read_layout(folder: str | Path) -> Layout:
    """The layout of a foreign head folder; ConfigError for EAGLE-3 and every other kind of head, or a folder
    that holds no eagle head."""
    folder = Path(folder)
    config = read_json(folder / CONFIG_FILE)
    if "speculators_model_type" in config:
        return _speculators_layout(folder, config)
    return _eagle1_layout(folder, config)


def _speculators_layout(folder: Path, config: dict) -> Layout:
    kind = config.get("speculators_model_type")
    if kind == "eagle3":
        raise ConfigError(f"{folder} holds an EAGLE-3 head: {EAGLE3_MESSAGE}")
    if kind != "eagle":
        raise ConfigError(f"{folder} holds a speculators {kind!r} head; eagle loads speculators \"eagle\" heads "
                          "(EAGLE-1 / HASS) only")
    layer, options = config.get("transformer_layer_config"), config.get("speculators_config")
    verifier = options.get("verifier") if isinstance(options, dict) else None
    if not isinstance(layer, dict) or not isinstance(verifier, dict):
        raise ConfigError(f"{folder / CONFIG_FILE} lacks transformer_layer_config or speculators_config.verifier")
    if config.get("layernorms"):
        raise ConfigError(f"{folder} is a speculators eagle head with extra layernorms (layernorms: true); "
                          "SpecScope loads those without them (EAGLE-1, EAGLE-2, HASS)")
    extension = config.get("specscope") if isinstance(config.get("specscope"), dict) else {}
    architectures = verifier.get("architectures") or ()
    return Layout("speculators", layer, str(verifier.get("name_or_path") or ""), tuple(map(str, architectures)),
                  bool(config.get("fusion_bias", False)), bool(extension.get("input_layernorm", False)),
                  tensor_shapes(folder))


def _eagle1_layout(folder: Path, config: dict) -> Layout:
    shapes = tensor_shapes(folder)
    if "draft_vocab_size" in config or any(name.startswith("midlayer.") for name in shapes):
        raise ConfigError(f"{folder} holds an EAGLE-3 head: {EAGLE3_MESSAGE}")
    if "fc.weight" not in shapes or not any(name.startswith("layers.0.") for name in shapes):
        raise ConfigError(f"{folder} is not an eagle head folder (it needs {OWN_WEIGHTS_FILE} and {CARD_FILE}, a "
                          f"speculators eagle {CONFIG_FILE}, or EAGLE-1's fc and layers.0 in {WEIGHTS_FILE})")
    if config.get("num_hidden_layers", 1) != 1 or any(name.startswith("layers.1.") for name in shapes):
        raise ConfigError(f"{folder} holds an eagle head of {config.get('num_hidden_layers')} layers; SpecScope's "
                          "eagle heads have one")
    return Layout("eagle1", config, str(config.get("_name_or_path") or ""), (), "fc.bias" in shapes,
                  "layers.0.input_layernorm.weight" in shapes, shapes)


def target_sizes(model: nn.Module) -> tuple[int, int]:
    """(hidden size, vocabulary) of a target: what a head's features, embedding and readout must fit."""
    _, _, _, output_head = decoder_parts(model)
    return int(model.config.get_text_config().hidden_size), int(output_head.weight.shape[0])


def layer_config(layout: Layout, model: nn.Module, folder: Path, label: str):
    """The head layer's config from the checkpoint, as the target's config class; ConfigError when it is for
    another architecture, hidden size or vocabulary than the target's."""
    text_config = model.config.get_text_config()
    theirs = layout.layer_config.get("model_type")
    trained_for = f" (it was trained for {layout.verifier})" if layout.verifier else ""
    if theirs != text_config.model_type:
        raise ConfigError(f"the eagle head in {folder} has a {theirs!r} layer{trained_for}; {label} is a "
                          f"{text_config.model_type!r} model")
    if layout.architectures and not set(layout.architectures) & set(model.config.architectures or ()):
        raise ConfigError(f"the eagle head in {folder} was trained for {layout.verifier or 'a model'} (a "
                          f"{'/'.join(layout.architectures)}); {label} is a "
                          f"{'/'.join(model.config.architectures or ('?',))}")
    try:
        config = type(text_config).from_dict(dict(layout.layer_config))
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise ConfigError(f"{folder / CONFIG_FILE}'s layer config is not a valid {theirs} config "
                          f"({type(exc).__name__})") from None
    hidden, vocab = target_sizes(model)
    for what, head_value, target_value in (("hidden size", config.hidden_size, hidden),
                                           ("vocabulary", config.vocab_size, vocab)):
        if head_value != target_value:
            raise ConfigError(f"the eagle head in {folder} is for a model with {what} {head_value}{trained_for}; "
                              f"{label} has {target_value}")
    return config


def check_shapes(layout: Layout, folder: Path, model: nn.Module, label: str) -> None:
    """The tensors that must fit the target (fc, embedding, readout, draft vocabulary); ConfigError otherwise."""
    hidden, vocab = target_sizes(model)
    prefix = "fusion_fc." if layout.kind == "speculators" else "fc."
    fc = layout.shapes.get(prefix + "weight")
    if fc == (hidden, 3 * hidden):
        raise ConfigError(f"{folder} holds an EAGLE-3 head: {EAGLE3_MESSAGE}")
    expected = {prefix + "weight": (hidden, 2 * hidden), "embed_tokens.weight": (vocab, hidden), "t2d": (vocab,)}
    n_draft = layout.shapes.get("d2t", (vocab,))[0]
    expected["lm_head.weight"] = (n_draft, hidden)
    for name, shape in expected.items():
        if name in layout.shapes and layout.shapes[name] != shape:
            raise ConfigError(f"the eagle head in {folder} doesn't fit {label}: {name} is "
                              f"{'×'.join(map(str, layout.shapes[name]))}, {label} needs {'×'.join(map(str, shape))}")
    if fc is None:
        raise ConfigError(f"{folder / WEIGHTS_FILE} has no {prefix}weight: its head weights are missing")


def check_speculators(folder: str | Path, model: nn.Module, label: str = "this model") -> tuple[Layout, HeadCard]:
    """The layout of a foreign head folder and its card, once it is known to fit `model`: our own card when
    one is kept beside it (the fingerprint must match), else one that notes who it was trained for."""
    folder = Path(folder)
    layout = read_layout(folder)
    layer_config(layout, model, folder, label)
    check_shapes(layout, folder, model, label)
    hidden, vocab = target_sizes(model)
    if (folder / CARD_FILE).is_file():
        card = parse_card(folder / CARD_FILE)
        if card.fingerprint != target_fingerprint(model):
            raise ConfigError(f"the eagle head in {folder} was trained for {card.target}, not {label} (the weights' "
                              "fingerprints differ); train one for this model with `specscope drafter train`")
        return layout, card
    n_draft = layout.shapes.get("d2t", (vocab,))[0]
    name = layout.verifier or "a model it does not name"
    note = (f"this eagle head was trained for {name} ({'speculators' if layout.kind == 'speculators' else 'EAGLE-1'} "
            f"format, no SpecScope fingerprint): its shapes fit {label}, how well it drafts depends on how close "
            f"{label} is to that model")
    return layout, HeadCard(name, "", hidden, n_draft, {"format": layout.kind, "note": note})


def load_speculators(folder: str | Path, model: nn.Module, label: str = "this model") -> tuple[EagleHead, HeadCard]:
    """Load a speculators "eagle" or EAGLE-1 head folder into an EagleHead for `model`, honouring its options (fc
    bias, no input norm, its own layer config, embedding, readout and draft vocabulary); ConfigError in one line
    for what doesn't fit."""
    folder = Path(folder)
    layout, card = check_speculators(folder, model, label)
    config = layer_config(layout, model, folder, label)
    state = read_state(folder, layout)
    vocab = target_sizes(model)[1]
    draft_vocab = draft_vocabulary(state.pop("d2t", None), state.pop("t2d", None), vocab, folder)
    own = {name: state.pop(name) for name in ("embed_tokens.weight", "lm_head.weight") if name in state}
    head = EagleHead(model, draft_vocab, fc_bias=layout.fc_bias, input_norm=layout.input_norm, layer_config=config)
    fill_head(head, state, folder, label)
    attach_own_parts(head, own, model)
    return head, card


def read_state(folder: Path, layout: Layout) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors under EagleHead's names; ConfigError for a tensor a head has no place for."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file
    try:
        raw = load_file(str(folder / WEIGHTS_FILE))
    except (SafetensorError, OSError) as exc:
        raise ConfigError(f"{folder / WEIGHTS_FILE} could not be read ({_reason(exc)})") from None
    renames, state, unknown = RENAMES[layout.kind], {}, []
    for name, tensor in raw.items():
        if name.endswith("rotary_emb.inv_freq"):  # a derived buffer that older transformers saved
            continue
        prefix = next((prefix for prefix in renames if name.startswith(prefix)), None)
        if name in KEPT_NAMES:
            state[name] = tensor
        elif prefix is None:
            unknown.append(name)
        else:
            state[renames[prefix] + name[len(prefix):]] = tensor
    if unknown:
        raise ConfigError(f"{folder / WEIGHTS_FILE} has tensors an eagle head has no place for: "
                          f"{', '.join(sorted(unknown)[:3])}")
    return state


def draft_vocabulary(d2t: torch.Tensor | None, t2d: torch.Tensor | None, vocab: int, folder: Path) -> torch.Tensor:
    """Target ids of the draft vocabulary: EAGLE-3's d2t (target id = draft id + d2t[draft id]), checked against
    t2d (True at every target id in it); the whole vocabulary without them."""
    if d2t is None:
        if t2d is not None:
            raise ConfigError(f"{folder / WEIGHTS_FILE} has a t2d but no d2t draft vocabulary")
        return torch.arange(vocab)
    ids = torch.arange(d2t.shape[0]) + d2t.to(torch.long).reshape(-1)
    valid = ids.numel() > 0 and int(ids.min()) >= 0 and int(ids.max()) < vocab and ids.unique().numel() == ids.numel()
    if valid and t2d is not None:
        valid = int(t2d.to(torch.bool).sum()) == ids.numel() and bool(t2d.to(torch.bool)[ids].all())
    if not valid:
        raise ConfigError(f"{folder / WEIGHTS_FILE}'s draft vocabulary (d2t/t2d) is not a set of distinct ids of "
                          f"this model's {vocab}")
    return ids


def fill_head(head: EagleHead, state: dict[str, torch.Tensor], folder: Path, label: str) -> None:
    """Load the renamed weights into `head`; ConfigError naming what is missing, extra or of another shape."""
    try:
        missing, unexpected = head.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # a shape that doesn't fit
        raise ConfigError(f"{folder}'s weights don't fit an eagle head for {label} "
                          f"({str(exc).splitlines()[-1].strip()[:160]})") from None
    missing = [name for name in missing if not name.startswith("rotary.") and name != "draft_vocab"]
    if missing or unexpected:
        raise ConfigError(f"{folder}'s weights don't fit an eagle head for {label} (missing {missing[:3]}, "
                          f"unexpected {unexpected[:3]})")


def attach_own_parts(head: EagleHead, own: dict[str, torch.Tensor], model: nn.Module) -> None:
    """A checkpoint's own embedding and readout, kept only where they differ from the target's (EAGLE-1 ships a
    copy of the base model's embedding: the target's is then used, as it would be after the cast)."""
    _, _, embed, output_head = decoder_parts(model)
    embedding, readout = own.get("embed_tokens.weight"), own.get("lm_head.weight")
    if embedding is not None and not _same(embedding, embed.weight):
        head.embed_tokens = nn.Embedding.from_pretrained(embedding.clone(), freeze=True)
    if readout is not None and not _same(readout, output_head.weight[head.draft_vocab.to(output_head.weight.device)]):
        head.lm_head = nn.Linear(readout.shape[1], readout.shape[0], bias=False)
        head.lm_head.weight = nn.Parameter(readout.clone(), requires_grad=False)


def _same(theirs: torch.Tensor, ours: torch.Tensor) -> bool:
    """Whether a checkpoint's tensor is the target's, in the target's dtype (what the drafter would use)."""
    ours = ours.detach()
    return theirs.shape == ours.shape and torch.equal(theirs.to(device=ours.device, dtype=ours.dtype), ours)


def save_speculators(folder: str | Path, head: EagleHead, card: HeadCard, target: nn.Module) -> Path:
    """Write `head` as a speculators "eagle" checkpoint (config.json, model.safetensors) with our card beside it
    (head.json: the target's fingerprint), each file written aside and then moved. `drafter train` may call it
    next to save_head; the folder loads with `--method eagle --draft FOLDER`."""
    from safetensors.torch import save_file
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = speculators_tensors(head, target_sizes(target)[1])
    config = json.dumps(speculators_config(head, card, target), indent=2)
    _write_aside(folder / WEIGHTS_FILE, lambda path: save_file(tensors, str(path), metadata={"format": "pt"}))
    _write_aside(folder / CONFIG_FILE, lambda path: path.write_text(config, encoding="utf-8"))
    _write_aside(folder / CARD_FILE, lambda path: path.write_text(card.to_json(), encoding="utf-8"))
    return folder


def speculators_tensors(head: EagleHead, vocab: int) -> dict[str, torch.Tensor]:
    """The head's weights under speculators' names, and a restricted draft vocabulary as EAGLE-3's d2t/t2d."""
    tensors: dict[str, torch.Tensor] = {}
    for name, tensor in head.trainable_state().items():
        if name.startswith("fc."):
            tensors["fusion_fc." + name[len("fc."):]] = tensor
        elif name.startswith("layer."):
            tensors["transformer." + name[len("layer."):]] = tensor
        elif name != "draft_vocab":  # an embedding or readout of its own (a head loaded from elsewhere)
            tensors[name] = tensor
    ids = head.draft_vocab.detach().to("cpu", torch.long)
    if not torch.equal(ids, torch.arange(vocab)):
        tensors["d2t"] = (ids - torch.arange(ids.numel())).contiguous()
        tensors["t2d"] = torch.zeros(vocab, dtype=torch.bool).index_fill_(0, ids, True)
    return tensors


def speculators_config(head: EagleHead, card: HeadCard, target: nn.Module) -> dict:
    """config.json of a speculators "eagle" checkpoint (v0.4.0's EagleSpeculatorConfig fields), and a "specscope"
    block for what that format has no field for: the layer's input norm, the draft vocabulary, our card."""
    layer_class = type(head.layer).__name__
    restricted = head.draft_vocab.numel() != target_sizes(target)[1]
    verifier = {"name_or_path": card.target, "architectures": list(target.config.architectures or ())}
    return {
        "speculators_model_type": "eagle",
        "architectures": ["EagleSpeculator", layer_class],
        "transformer_layer_architecture": layer_class,
        "transformer_layer_config": json.loads(head.config.to_json_string(use_diff=True)),
        "layernorms": False,
        "fusion_bias": head.fc.bias is not None,
        "draft_vocab_size": int(head.draft_vocab.numel()),
        "speculators_version": SPECULATORS_VERSION,
        "speculators_config": {"algorithm": "eagle", "default_proposal_method": "greedy", "verifier": verifier,
                               "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": SpecConfig().k}]},
        "specscope": {"card": CARD_FILE, "input_layernorm": head.input_norm,
                      "draft_vocab": "d2t/t2d (target id = draft id + d2t)" if restricted else "all target ids"},
    }


def _write_aside(path: Path, write) -> None:
    """Write a file beside its place, then move it there (a crash never leaves half a file under its name)."""
    partial = path.with_name(path.name + ".partial")
    write(partial)
    os.replace(partial, path)
