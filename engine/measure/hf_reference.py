"""The yardstick of `specscope bench --compare-hf`: transformers' own generate() with the setting each method's
MethodSpec maps itself to (`hf_generate_kwargs`: prompt lookup, an assistant model, early exit, MTP), greedy, on
the same prompt ids as ours, timed as a whole. Touches torch and the transformers target's model; nothing else.
"""

from __future__ import annotations

import time

from engine.core.config import SpecConfig


def _hf_kwargs(spec: SpecConfig, engine) -> dict:
    """transformers generate()'s kwargs for the same setting, as the method's MethodSpec gives them."""
    make = spec.info.hf_generate_kwargs
    return {} if make is None else make(spec, engine)


def hf_generate(engine, prompt_ids: list[int], spec: SpecConfig, max_new_tokens: int) -> tuple[list[int], float]:
    """transformers' own generate() with the equivalent setting (greedy); returns new ids and seconds."""
    import torch
    model = engine.target.model
    input_ids = torch.tensor([prompt_ids], device=engine.target.device)
    kwargs = _hf_kwargs(spec, engine)
    started = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), do_sample=False,
                             max_new_tokens=max_new_tokens, pad_token_id=engine.target.tokenizer.eos_token_id,
                             **kwargs)
    seconds = time.perf_counter() - started
    return out[0, len(prompt_ids):].tolist(), seconds


__all__ = ["hf_generate"]
