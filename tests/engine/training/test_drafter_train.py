"""The training run of `drafter train` (engine/training/train.py) on the device and in the dtype of its target
(issue 22, item 1): fp16 trains (autocast in fp16 with a GradScaler, float32 master weights) and writes a
float32 head that loads and drafts; the head and every batch go to the target's device (a target on torch's
"meta" device stands in for a GPU); a target that can't have a head beside it fails before any reply is
written; a checkpoint resumes on the same path, its moments placed on the head's device."""

from __future__ import annotations

import json
import math
import threading
import time
import warnings
from dataclasses import fields, replace

import pytest
import torch

import engine.training.train as train_module
from engine.core.config import SpecConfig
from engine.core.errors import ConfigError
from engine.drafters.eagle_head import EagleHead, load_head
from engine.host import limit_torch_threads
from engine.models.load import load_model
from engine.runtime import local_engine
from engine.training.step import Batch
from engine.training.train import STATE_FILE, TrainOptions, load_checkpoint, save_checkpoint, train, train_head
from engine_testkit import run

META = torch.device("meta")


@pytest.fixture(autouse=True, scope="module")
def torch_threads():
    limit_torch_threads()


def options(model_dir, tmp_path, **overrides) -> TrainOptions:
    """A run of ~9 s on the tiny target: 40 short prompts (4 held out), 16-token replies, the whole vocabulary
    as the draft vocabulary (so a second run with more replies keeps it, and resumes)."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"tell me about number {i} " * (1 + i % 3)}) + "\n"
                               for i in range(40)), encoding="utf-8")
    values = dict(model=str(model_dir), out=tmp_path / "head", minutes=0.15, prompt_files=(str(prompts),),
                  builtin_prompts=False, max_new_tokens=16, window=32, batch=4, reply_batch=8, draft_vocab=1024,
                  device="cpu", dtype="float32")
    return TrainOptions(**{**values, **overrides})


def test_fp16_training_on_the_cpu_writes_a_float32_head_that_loads_and_drafts(tiny_dir, tmp_path):
    news = []
    out, card = train(options(tiny_dir, tmp_path, dtype="fp16"), news.append)
    assert any("fp16 autocast with a GradScaler" in n.message for n in news)
    assert card.info["steps"] >= 3 and math.isfinite(card.info["loss"])
    assert len(card.info["held_out_acceptance"]) == 3
    from safetensors.torch import load_file
    weights = load_file(str(out / "head.safetensors"))
    assert {v.dtype for k, v in weights.items() if k != "draft_vocab"} == {torch.float32}
    assert all(torch.isfinite(v).all() for k, v in weights.items() if k != "draft_vocab")
    target = load_model(str(tiny_dir), device="cpu", dtype="fp16")
    head, _ = load_head(out, target.model, target.label)
    assert head.draft_vocab.numel() == target.vocab_size
    _, rounds, finished = run(local_engine(target), [5, 9, 20, 31], max_new_tokens=12,
                              spec=SpecConfig(method="eagle", k=3, draft=str(out)))
    assert 0 < len(finished.output_ids) <= 12 and sum(len(r.draft_ids) for r in rounds) > 0  # it drafted


def synthetic_data(hidden: int, vocab: int, n: int = 96) -> dict[str, torch.Tensor]:
    """What extract_features returns, random: two sequences, the second held out."""
    g = torch.Generator().manual_seed(0)
    sequence = (torch.arange(n) >= n // 2).long()
    return {"features": torch.randn(n, hidden, generator=g), "lse": torch.zeros(n),
            "top": torch.randint(0, vocab, (n,), generator=g), "ids": torch.randint(0, vocab, (n,), generator=g),
            "sequence": sequence, "scored": torch.ones(n, dtype=torch.bool), "held_out": sequence == 1,
            "n_records": torch.tensor(2)}


def test_the_head_and_every_batch_go_to_the_targets_device(tiny_dir, tiny_model, tmp_path, monkeypatch):
    """The target on "meta" (a device other than the CPU's, as a GPU is): the head built on the CPU, the data
    on the CPU, and the training step sees head, readout, embedding and batch all on meta."""
    target = load_model(str(tiny_dir), device="cpu", dtype="float32")
    target.model.to(META)
    seen = []

    class Seen(Exception):
        pass

    def recording(head, embed, readout, batch, steps, regression=0.0):
        seen.append({"head": {t.device for t in [*head.parameters(), *head.buffers()]}, "readout": readout.device,
                     "embed": embed.weight.device,
                     "batch": {getattr(batch, f.name).device for f in fields(Batch)}})
        raise Seen
    monkeypatch.setattr(train_module, "loss_and_hits", recording)
    head = EagleHead(tiny_model.model, torch.arange(64)).float()
    hidden = int(tiny_model.model.config.hidden_size)
    now = time.monotonic()
    with pytest.raises(Seen):
        train_head(target, head, synthetic_data(hidden, 64), options(tiny_dir, tmp_path), tmp_path, (now, now + 60),
                   lambda progress: None, threading.Event())
    assert seen == [{"head": {META}, "readout": META, "embed": META, "batch": {META}}]
    assert train_module.placement(target).device == META
    assert all(p.dtype == torch.float32 for p in head.parameters())


def test_a_target_split_over_devices_fails_before_any_reply(tiny_dir, tmp_path, monkeypatch):
    target = load_model(str(tiny_dir), device="cpu", dtype="float32")
    target.model.get_output_embeddings().to(META)  # the output head elsewhere than the embedding
    monkeypatch.setattr(train_module, "load_target", lambda options, report: target)
    with pytest.raises(ConfigError, match=r"embedding \(on cpu\) and its output head \(on meta\)"):
        train(options(tiny_dir, tmp_path), lambda progress: None)
    assert not (tmp_path / "head" / "replies.jsonl").exists()


def test_a_head_that_cannot_train_there_fails_before_any_reply(tiny_dir, tiny_model, tmp_path, monkeypatch):
    def failing(*args, **kwargs):
        raise RuntimeError("mat1 and mat2 must have the same dtype, but got Half and Float")
    monkeypatch.setattr(train_module, "load_target", lambda options, report: tiny_model)
    monkeypatch.setattr(train_module, "loss_and_hits", failing)
    with pytest.raises(ConfigError, match="can't train beside .* on cpu .*same dtype"):
        train(options(tiny_dir, tmp_path), lambda progress: None)
    assert not (tmp_path / "head" / "replies.jsonl").exists()


def test_a_run_resumes_from_its_checkpoint_on_the_same_path(tiny_dir, tmp_path):
    opts = options(tiny_dir, tmp_path, dtype="fp16", minutes=0.12)
    _, first = train(opts, lambda progress: None)
    state = json.loads((opts.out / STATE_FILE).read_text(encoding="utf-8"))
    assert state["step"] == first.info["steps"] > 0 and state["scaler"]["scale"] > 0
    # The same out folder and draft vocabulary; a budget that leaves time to train after the extra replies
    # (the first run's budget can go on replies and features alone when the CPU is busy).
    _, second = train(replace(opts, minutes=0.2, data_share=0.2), lambda progress: None)
    assert second.info["steps"] > first.info["steps"]  # counted on from the checkpoint, not from 0
    assert second.info["history"][:len(first.info["history"])] == first.info["history"]
    assert second.info["training_seconds"] > first.info["training_seconds"]


def test_a_checkpoint_loads_onto_the_heads_device(tiny_model, tmp_path):
    """Written from a head on the CPU, read into one on another device (meta): the weights and moments go to
    the head's device, AdamW's step count stays a float32 on the CPU (where AdamW keeps it)."""
    head = EagleHead(tiny_model.model, torch.arange(64)).float()
    optimizer = torch.optim.AdamW(head.parameters())
    sum(p.sum() for p in head.parameters()).backward()
    optimizer.step()
    save_checkpoint(tmp_path, head, optimizer, {"step": 1})
    other = EagleHead(tiny_model.model, torch.arange(64)).float().to(META)
    other.draft_vocab = torch.arange(64)  # readable, to be compared with the checkpoint's (meta holds no values)
    again = torch.optim.AdamW(other.parameters())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # copying into a meta parameter is a no-op, and torch says so
        assert load_checkpoint(tmp_path, other, again) == {"step": 1}
    states = [again.state[p] for p in other.parameters()]
    assert states and all(s["exp_avg"].device == META and s["exp_avg_sq"].device == META for s in states)
    assert all(s["step"].device.type == "cpu" and s["step"].dtype == torch.float32 for s in states)


def test_a_budget_spent_before_training_still_trains_one_step_and_measures_it(tiny_dir, tiny_model, tmp_path):
    """Writing the replies can overrun the budget on a busy machine: the head still gets one step and its
    held-out figures, so the card is whole (it was empty, and the run's head had none)."""
    head = EagleHead(tiny_model.model, torch.arange(64)).float()
    hidden = int(tiny_model.model.config.hidden_size)
    now = time.monotonic()
    loop = train_head(tiny_model, head, synthetic_data(hidden, 64), options(tiny_dir, tmp_path), tmp_path,
                      (now - 60, now - 1), lambda progress: None, threading.Event())
    assert loop.step == 1 and len(loop.acceptance) >= 1 and all(0.0 <= a <= 1.0 for a in loop.acceptance)
    stopped = threading.Event()
    stopped.set()  # but a cancelled run stops at once
    (tmp_path / "other").mkdir()
    again = train_head(tiny_model, EagleHead(tiny_model.model, torch.arange(64)).float(),
                       synthetic_data(hidden, 64), options(tiny_dir, tmp_path), tmp_path / "other",
                       (now - 60, now - 1), lambda progress: None, stopped)
    assert again.step == 0
