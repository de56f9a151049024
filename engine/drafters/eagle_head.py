"""An EAGLE-style drafting head (Li et al., arXiv 2401.15077) for a transformers target, its files and its card.

The head is one decoder layer of the target's own architecture. At position t it reads the target's last
(post-norm) hidden state f_t and the embedding of the token at t+1, fused by `fc` (2H → H), and predicts the
features f_{t+1}; they are read out through the target's frozen output head, restricted (as EAGLE-3 does) to
a draft vocabulary of the most frequent tokens so that the readout costs |draft vocab| / |vocab| of the
target's. Drafting is autoregressive from its own predicted features.

Files (a head folder): `head.safetensors` (fc, the layer, `draft_vocab`: target ids of the draft vocabulary)
and `head.json`, the card: the target's name and the fingerprint of its weights (a head is refused for any
other target), the head's shape, the data and steps it was trained on and its held-out acceptance. Heads in
other tools' layouts (speculators, EAGLE-1) are read and written by engine/drafters/eagle_formats.py.
Touches torch, the target's modules read-only (embedding, output head, config) and the head folder.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from engine.core.errors import ConfigError

WEIGHTS_FILE = "head.safetensors"
CARD_FILE = "head.json"
CARD_FORMAT = "specscope.eagle-head"
CARD_VERSION = 1
_FINGERPRINT_ELEMENTS = 4096  # per tensor: its first and last elements, rounded to bf16


def target_fingerprint(model: nn.Module) -> str:
    """A fingerprint of a target's weights: names, shapes and the first and last elements of every tensor,
    rounded to bf16 (so the same weights loaded in float32 or bf16 give the same fingerprint)."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        flat = tensor.detach().reshape(-1)
        sample = torch.cat([flat[:_FINGERPRINT_ELEMENTS], flat[-_FINGERPRINT_ELEMENTS:]])
        digest.update(f"{name}:{tuple(tensor.shape)}".encode())
        if sample.is_floating_point():
            sample = sample.to("cpu", torch.bfloat16).view(torch.int16)
        digest.update(sample.to("cpu").numpy().tobytes())
    return digest.hexdigest()[:32]


def heads_root() -> Path:
    """The folder every target's default head folder lives in."""
    from engine.host import cache_root
    return cache_root() / "eagle-heads"


def default_head_dir(fingerprint: str) -> Path:
    """Where `specscope drafter train` puts a target's head by default, and where `eagle` looks for it."""
    return heads_root() / fingerprint


def decoder_parts(model: nn.Module) -> tuple[nn.Module, nn.Module, nn.Module, nn.Module]:
    """The target's (decoder layer, rotary embedding, token embedding, output head); ConfigError for an
    architecture without them (EAGLE heads are built from the target's own layer class)."""
    base = getattr(model, getattr(model, "base_model_prefix", "model"), None)
    layers = getattr(base, "layers", None)
    rotary = getattr(base, "rotary_emb", None)
    head = model.get_output_embeddings()
    if not isinstance(layers, nn.ModuleList) or rotary is None or head is None:
        raise ConfigError(f"eagle needs a decoder with layers, rotary embeddings and an output head; "
                          f"{type(model).__name__} lacks one of them")
    return layers[0], rotary, model.get_input_embeddings(), head


def head_config(model: nn.Module):
    """The target's text config cut to one layer, with sdpa attention (what the head's layer is built from)."""
    return one_layer_config(model.config.get_text_config())


def one_layer_config(config):
    """A copy of a text config cut to one layer, with sdpa attention."""
    config = copy.deepcopy(config)
    config.num_hidden_layers = 1
    if isinstance(getattr(config, "layer_types", None), list):
        config.layer_types = config.layer_types[:1]
    config._attn_implementation = "sdpa"
    return config


class EagleHead(nn.Module):
    """fc + one decoder layer; heads trained here use the target's embedding and output head (never owned or saved).

    Heads trained elsewhere (engine.drafters.eagle_formats) may differ in three ways, each an option that a head
    trained here never sets: no bias in `fc` (EAGLE-1/2), no input norm in the layer (EAGLE-1's layer 0 feeds
    the fused input to attention unnormalized), a layer config of their own; and, set after construction, an
    embedding (`embed_tokens`) or readout (`lm_head`, rows in `draft_vocab` order) of their own."""

    def __init__(self, model: nn.Module, draft_vocab: torch.Tensor, *, fc_bias: bool = True,
                 input_norm: bool = True, layer_config=None) -> None:
        super().__init__()
        layer, rotary, _, _ = decoder_parts(model)
        self.config = head_config(model) if layer_config is None else one_layer_config(layer_config)
        hidden = int(self.config.hidden_size)
        self.fc = nn.Linear(2 * hidden, hidden, bias=fc_bias)
        self.layer = type(layer)(self.config, layer_idx=0)
        if not input_norm:
            if not isinstance(getattr(self.layer, "input_layernorm", None), nn.Module):
                raise ConfigError(f"{type(self.layer).__name__} has no input_layernorm to leave out")
            self.layer.input_layernorm = nn.Identity()
        self.rotary = type(rotary)(self.config)
        self.register_buffer("draft_vocab", draft_vocab.to(torch.long).clone(), persistent=True)
        self.embed_tokens: nn.Embedding | None = None  # None: the target's
        self.lm_head: nn.Linear | None = None  # None: the target's output head, rows draft_vocab

    @property
    def input_norm(self) -> bool:
        """Whether the layer normalizes its input (heads trained here do; EAGLE-1's don't)."""
        return not isinstance(getattr(self.layer, "input_layernorm", None), nn.Identity)

    def forward(self, features: torch.Tensor, token_embeddings: torch.Tensor, position_ids: torch.Tensor,
                cache=None, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """(batch, n, H) features f_t and embeddings of x_{t+1} → predicted features f_{t+1} (batch, n, H).
        Without a mask the layer attends causally within the n positions (and to all of `cache`)."""
        x = self.fc(torch.cat([token_embeddings, features], dim=-1))
        position_embeddings = self.rotary(x, position_ids)
        out = self.layer(x, attention_mask=attention_mask, position_ids=position_ids, cache=cache,
                         use_cache=cache is not None, position_embeddings=position_embeddings)
        return out[0] if isinstance(out, tuple) else out

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """What the head file holds: every weight of the head and its draft vocabulary (contiguous copies)."""
        return {name: tensor.detach().contiguous().clone() for name, tensor in self.state_dict().items()
                if not name.startswith("rotary.")}


def readout_weight(output_head: nn.Module, draft_vocab: torch.Tensor) -> torch.Tensor:
    """The rows of the target's output head for the draft vocabulary (V_draft, H)."""
    return output_head.weight.detach()[draft_vocab.to(output_head.weight.device)]


@dataclass(frozen=True)
class HeadCard:
    """What a head folder says about itself (head.json)."""

    target: str  # the target's label when trained
    fingerprint: str  # target_fingerprint of the target it was trained for
    hidden_size: int
    draft_vocab_size: int
    info: dict  # data, steps, losses, held-out acceptance by position…

    def to_json(self) -> str:
        return json.dumps({"format": CARD_FORMAT, "version": CARD_VERSION, "target": self.target,
                           "fingerprint": self.fingerprint, "hidden_size": self.hidden_size,
                           "draft_vocab_size": self.draft_vocab_size, **self.info}, indent=2)


def save_head(folder: str | Path, head: EagleHead, card: HeadCard) -> Path:
    """Write head.safetensors and head.json into `folder` (each atomically: written aside, then moved)."""
    from safetensors.torch import save_file
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    weights = folder / (WEIGHTS_FILE + ".partial")
    save_file(head.trainable_state(), str(weights), metadata={"format": CARD_FORMAT})
    os.replace(weights, folder / WEIGHTS_FILE)
    card_path = folder / (CARD_FILE + ".partial")
    card_path.write_text(card.to_json(), encoding="utf-8")
    os.replace(card_path, folder / CARD_FILE)
    return folder


def read_card(folder: str | Path) -> HeadCard:
    """The card of a head folder; ConfigError saying what is missing or wrong."""
    folder = Path(folder)
    path = folder / CARD_FILE
    if not (folder / WEIGHTS_FILE).is_file() or not path.is_file():
        raise ConfigError(f"{folder} is not an eagle head folder (it needs {WEIGHTS_FILE} and {CARD_FILE}, or a "
                          "speculators or EAGLE-1 config.json and model.safetensors)")
    return parse_card(path)


def parse_card(path: Path) -> HeadCard:
    """A head card file (head.json); ConfigError when it is unreadable or not a SpecScope card."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        info = {key: value for key, value in data.items() if key not in
                ("format", "version", "target", "fingerprint", "hidden_size", "draft_vocab_size")}
        card = HeadCard(str(data["target"]), str(data["fingerprint"]), int(data["hidden_size"]),
                        int(data["draft_vocab_size"]), info)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{path} is not a readable head card ({type(exc).__name__})") from None
    if data.get("format") != CARD_FORMAT:
        raise ConfigError(f"{path} is not a SpecScope eagle head card (format {data.get('format')!r})")
    return card


def load_head(folder: str | Path, model: nn.Module, target_label: str = "this model") -> tuple[EagleHead, HeadCard]:
    """Load a head folder for `model`; ConfigError when it was trained for another target (the fingerprint
    of the weights differs) or its weights don't fit."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file
    card = read_card(folder)
    if card.fingerprint != target_fingerprint(model):
        raise ConfigError(f"the eagle head in {folder} was trained for {card.target}, not {target_label} (the "
                          "weights' fingerprints differ); train one for this model with `specscope drafter "
                          "train`")
    try:
        state = load_file(str(Path(folder) / WEIGHTS_FILE))
    except (SafetensorError, OSError) as exc:
        raise ConfigError(f"{Path(folder) / WEIGHTS_FILE} could not be read ({exc})") from None
    head = EagleHead(model, state.get("draft_vocab", torch.zeros(0, dtype=torch.long)))
    try:
        missing, unexpected = head.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # a shape that doesn't fit
        raise ConfigError(f"{folder}'s weights don't fit an eagle head for {target_label} "
                          f"({str(exc).splitlines()[-1].strip()[:160]})") from None
    missing = [name for name in missing if not name.startswith("rotary.")]
    if missing or unexpected or "draft_vocab" not in state:
        raise ConfigError(f"{folder}'s weights don't fit an eagle head for {target_label} (missing "
                          f"{missing[:3]}, unexpected {unexpected[:3]})")
    return head, card
