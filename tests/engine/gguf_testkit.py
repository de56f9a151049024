"""Tiny GGUF files built in the tests (no download): a tiny Hugging Face Llama written as a GGUF with the
`gguf` package, as llama.cpp's converter would write it (q/k rows permuted for its rope layout, byte-level
BPE vocabulary with merges, the chat template), then optionally re-quantized by llama.cpp itself; and a tiny
random Mamba, whose recurrent state can't be rolled back."""

from __future__ import annotations

import ctypes
import json
from pathlib import Path

import numpy as np


def _permute_for_rope(weight: np.ndarray, n_head: int) -> np.ndarray:
    """HF stores q/k rows with the rotary halves apart; llama.cpp wants them interleaved in pairs."""
    rows = weight.shape[0]
    return weight.reshape(n_head, 2, rows // n_head // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def _tensors(model) -> dict[str, np.ndarray]:
    config = model.config
    state = {name: t.detach().float().numpy() for name, t in model.state_dict().items()}
    out = {"token_embd.weight": state["model.embed_tokens.weight"],
           "output_norm.weight": state["model.norm.weight"]}
    if "lm_head.weight" in state and not config.tie_word_embeddings:
        out["output.weight"] = state["lm_head.weight"]
    names = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down"}
    for i in range(config.num_hidden_layers):
        for hf_name, gguf_name in names.items():
            weight = state[f"model.layers.{i}.{hf_name}.weight"]
            if hf_name == "self_attn.q_proj":
                weight = _permute_for_rope(weight, config.num_attention_heads)
            elif hf_name == "self_attn.k_proj":
                weight = _permute_for_rope(weight, config.num_key_value_heads)
            out[f"blk.{i}.{gguf_name}.weight"] = np.ascontiguousarray(weight)
    return out


def _add_vocabulary(writer, tokenizer) -> None:
    import gguf
    vocab = {i: t for t, i in tokenizer.get_vocab().items()}
    tokens = [vocab[i] for i in range(len(vocab))]
    # added tokens are matched in text: special ones as control tokens, the others as user-defined
    added = {i: gguf.TokenType.CONTROL if t.special else gguf.TokenType.USER_DEFINED
             for i, t in tokenizer.added_tokens_decoder.items()}
    merges = json.loads(tokenizer.backend_tokenizer.to_str())["model"]["merges"]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types([added.get(i, gguf.TokenType.NORMAL) for i in range(len(tokens))])
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    writer.add_bos_token_id(tokenizer.bos_token_id)
    writer.add_eos_token_id(tokenizer.eos_token_id)
    writer.add_add_bos_token(False)
    if tokenizer.chat_template:
        writer.add_chat_template(tokenizer.chat_template)


def write_tiny_gguf(path: Path, model, tokenizer, *, architecture: str = "llama",
                    context_length: int | None = None) -> Path:
    """Write the tiny HF Llama `model` with `tokenizer` as an F32 GGUF at `path`. `architecture` may name
    one llama.cpp doesn't know (for the error test); `context_length` overrides the trained length."""
    import gguf
    config = model.config
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_name("tiny-llama")
    writer.add_context_length(context_length or config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_dimension_count(config.hidden_size // config.num_attention_heads)
    writer.add_rope_freq_base(float(config.rope_parameters["rope_theta"]))
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_vocab_size(config.vocab_size)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    _add_vocabulary(writer, tokenizer)
    for name, tensor in _tensors(model).items():
        writer.add_tensor(name, tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def write_tiny_mamba_gguf(path: Path, tokenizer, seed: int = 0) -> Path:
    """A random 2-layer Mamba (a recurrent state instead of a KV cache, so it can't be rolled back) with
    `tokenizer`'s vocabulary, as an F32 GGUF."""
    import gguf
    n_embd, d_inner, d_state, d_conv, dt_rank, n_layer, vocab = 32, 64, 8, 4, 4, 2, len(tokenizer)
    rng = np.random.default_rng(seed)

    def weight(*shape):
        return (rng.standard_normal(shape) * 0.1).astype(np.float32)

    writer = gguf.GGUFWriter(str(path), "mamba")
    writer.add_context_length(1024)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(0)
    writer.add_head_count(0)
    writer.add_ssm_conv_kernel(d_conv)
    writer.add_ssm_inner_size(d_inner)
    writer.add_ssm_state_size(d_state)
    writer.add_ssm_time_step_rank(dt_rank)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    _add_vocabulary(writer, tokenizer)
    tensors = {"token_embd.weight": weight(vocab, n_embd), "output_norm.weight": np.ones(n_embd, np.float32),
               "output.weight": weight(vocab, n_embd)}
    for i in range(n_layer):  # numpy shapes: ggml's dimensions reversed
        tensors.update({
            f"blk.{i}.attn_norm.weight": np.ones(n_embd, np.float32),
            f"blk.{i}.ssm_in.weight": weight(2 * d_inner, n_embd),
            f"blk.{i}.ssm_conv1d.weight": weight(d_inner, d_conv), f"blk.{i}.ssm_conv1d.bias": weight(d_inner),
            f"blk.{i}.ssm_x.weight": weight(dt_rank + 2 * d_state, d_inner),
            f"blk.{i}.ssm_dt.weight": weight(d_inner, dt_rank), f"blk.{i}.ssm_dt.bias": weight(d_inner),
            f"blk.{i}.ssm_a": -np.exp(weight(d_inner, d_state)), f"blk.{i}.ssm_d": np.ones(d_inner, np.float32),
            f"blk.{i}.ssm_out.weight": weight(n_embd, d_inner)})
    for name, tensor in tensors.items():
        writer.add_tensor(name, tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def quantize(source: Path, target: Path, ftype_name: str) -> Path:
    """Re-quantize a GGUF with llama.cpp itself (`ftype_name`: "Q8_0", "Q4_0", …)."""
    from engine.backends.llama_cpp import library
    lib = library()
    params = lib.llama_model_quantize_default_params()
    params.ftype = getattr(lib, f"LLAMA_FTYPE_MOSTLY_{ftype_name}")
    status = lib.llama_model_quantize(str(source).encode(), str(target).encode(), ctypes.byref(params))
    if status != 0:
        raise RuntimeError(f"llama_model_quantize failed ({status})")
    return target
