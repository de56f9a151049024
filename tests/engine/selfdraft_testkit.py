"""Tiny models that carry their own drafter, built here (no download): a DeepSeek-V3 with chained MTP layers
saved in the checkpoint layout DeepSeek ships (`model.layers.{N+i}.*`), and a Gemma 4 target with a Gemma 4
assistant. Both use the engine suite's tiny tokenizer, so engine.models.load.load_model loads them as folders."""

from __future__ import annotations

import json
from pathlib import Path

import torch

MTP_LAYERS = 4


def mtp_weight_patterns(n_layers: int, n_mtp: int) -> list[str]:
    """transformers finds a DeepSeek-V3 checkpoint's MTP weights by the layer index of the released model
    (`model\\.layers\\.61.*`); a tiny model keeps them right after its own layers."""
    return [rf"model\.layers\.{n_layers + i}\..*" for i in range(n_mtp)]


def deepseek_config(tokenizer, n_layers: int = 2, n_mtp: int = MTP_LAYERS):
    from transformers import DeepseekV3Config
    return DeepseekV3Config(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
        num_hidden_layers=n_layers, num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=16,
        q_lora_rank=None, qk_rope_head_dim=8, v_head_dim=16, qk_nope_head_dim=16, n_routed_experts=4,
        num_experts_per_tok=2, n_group=1, topk_group=1, first_k_dense_replace=8, num_mtp_layers=n_mtp,
        max_position_embeddings=256, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False)


def save_mtp_model(folder: Path, tokenizer, seed: int = 0, n_mtp: int = MTP_LAYERS,
                   with_mtp_weights: bool = True) -> Path:
    """A float32 tiny DeepSeek-V3 whose checkpoint also holds `n_mtp` MTP layers (random, fixed seed). The
    MTP layers are built by transformers' MtpModel and renamed to the released layout, so loading them back
    goes through MtpModel.from_pretrained's own conversion (MTP layers are mixture-of-experts layers, kept
    one tensor per expert as released)."""
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForCausalLM
    from transformers.modeling_layers import MtpModel
    torch.manual_seed(seed)
    config = deepseek_config(tokenizer, n_mtp=n_mtp)
    model = AutoModelForCausalLM.from_config(config).eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    if not with_mtp_weights:
        return folder
    mtp = MtpModel(model, n_mtp)
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():  # MtpModel leaves its experts' fused tensors as allocated (torch.empty): fill them
        for name, parameter in mtp.named_parameters():
            if ".experts." in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.02)
    weights = load_file(str(folder / "model.safetensors"))
    n_layers = config.num_hidden_layers
    for key, value in mtp.state_dict().items():
        if not key.startswith("layers."):
            continue  # embedding and head are the main model's
        index, rest = key.split(".", 2)[1:]
        prefix = f"model.layers.{n_layers + int(index)}."
        rest = rest.replace("mtp_block.", "")
        if rest.endswith("mlp.experts.gate_up_proj"):  # the released layout keeps one tensor per expert
            gate, up = value.chunk(2, dim=1)
            for e in range(value.shape[0]):
                weights[f"{prefix}mlp.experts.{e}.gate_proj.weight"] = gate[e].contiguous()
                weights[f"{prefix}mlp.experts.{e}.up_proj.weight"] = up[e].contiguous()
        elif rest.endswith("mlp.experts.down_proj"):
            for e in range(value.shape[0]):
                weights[f"{prefix}mlp.experts.{e}.down_proj.weight"] = value[e].contiguous()
        else:
            weights[prefix + rest] = value.contiguous()
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def gemma4_text_config(tokenizer, **overrides):
    from transformers import Gemma4TextConfig
    values = dict(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=4,
        num_attention_heads=2, num_key_value_heads=1, head_dim=32, global_head_dim=32,
        num_kv_shared_layers=2, layer_types=["sliding_attention", "full_attention"] * 2, sliding_window=16,
        hidden_size_per_layer_input=8, vocab_size_per_layer_input=len(tokenizer), max_position_embeddings=256,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=0)
    values.update(overrides)
    return Gemma4TextConfig(**values)


def save_gemma4_pair(root: Path, tokenizer, seed: int = 0) -> tuple[Path, Path]:
    """A tiny Gemma 4 target and a tiny Gemma 4 assistant for it (random, fixed seed), each a folder with the
    tokenizer. Returns (target folder, assistant folder)."""
    from transformers import Gemma4AssistantConfig, Gemma4AssistantForCausalLM, Gemma4ForCausalLM
    torch.manual_seed(seed)
    target_config = gemma4_text_config(tokenizer)
    target = Gemma4ForCausalLM(target_config).eval()
    target_dir, assistant_dir = root / "gemma4-tiny", root / "gemma4-tiny-assistant"
    target.save_pretrained(target_dir)
    tokenizer.save_pretrained(target_dir)
    assistant_text = gemma4_text_config(tokenizer, num_hidden_layers=2, num_kv_shared_layers=2,
                                        layer_types=["sliding_attention", "full_attention"],
                                        hidden_size_per_layer_input=0, vocab_size_per_layer_input=0,
                                        use_double_wide_mlp=False)
    assistant_config = Gemma4AssistantConfig(text_config=assistant_text.to_dict(),
                                             backbone_hidden_size=target_config.hidden_size,
                                             use_ordered_embeddings=False)
    assistant = Gemma4AssistantForCausalLM(assistant_config).eval()
    assistant.save_pretrained(assistant_dir)
    tokenizer.save_pretrained(assistant_dir)
    return target_dir, assistant_dir


def read_config(folder: Path) -> dict:
    return json.loads((folder / "config.json").read_text())
