"""Host syncs of a round on the transformers backend, counted as benchmarks/host_syncs.py counts them (a count, not
a time): a plain round and an early-exit round on the tiny model, on the eager runner and on --compile's static
cache (uncompiled, and with its compiled widths standing in for CUDA graphs), make no more than the decision
needs, so a change that adds a sync per pass or per drafted token fails here; and a token fed as a device tensor
(forward_unread, what early exit drafts with) is the same pass as one fed from the host.
`python -m benchmarks.host_syncs` prints the figures for every method."""

from __future__ import annotations

import pytest
import torch

from benchmarks.host_syncs import RUNNERS, SyncCounter, count_rounds, twin, watch_engine
from engine.backends.transformers import TransformersRunner
from engine.core.config import SamplingConfig, SpecConfig
from engine.models.load import load_model
from engine.runtime import local_engine

ROUNDS = 4
PROMPT = "the lazy dog. the lazy dog. the lazy"
# Per phase, the most a round may need. Plain decoding: the verdict read once. Early exit: its k drafted ids read
# once, at the end of its draft (each pass takes the token before as a device tensor), and the verdict; the
# decision's second read counted here is the drafter's rows read in numpy on a CPU (host memory: no sync there);
# on a GPU they go in the verdict's one transfer (engine.core.verify.verify_greedy_drafted).
NEEDED = {"plain": ({}, {"draft": 0, "verify forward": 0, "decision": 1, "rollback": 0, "events": 0}),
          "early-exit": ({"method": "early-exit", "k": 3, "params": {"layers": 1}},
                         {"draft": 1, "verify forward": 0, "decision": 2, "rollback": 0, "events": 0})}


def test_the_counter_counts_each_kind_of_sync_in_its_phase_and_puts_torch_back():
    counter = SyncCounter()
    x = torch.arange(4.0)
    with counter.counting():
        with counter.phase("draft"):
            int(x[1])
            x.tolist()
            bool(x[0] > 0)
            x[x > 1]
            torch.nonzero(x)
            torch.tensor([1, 2], device=x.device)  # a copy from the host's pageable memory on a GPU
            x.to("cpu")
            x.to(x.device)  # where it already is: no sync
            torch.tensor([], device=x.device)  # nothing to copy
        float(x.sum())
    assert counter.counts == {"draft": 7, "events": 1}
    assert "item" not in torch.Tensor.__dict__ and "__bool__" not in torch.Tensor.__dict__
    int(x[1])
    assert counter.total() == 8


@pytest.mark.parametrize("runner_name", list(RUNNERS))
@pytest.mark.parametrize("setting", list(NEEDED))
def test_a_round_makes_no_more_syncs_than_its_decision_needs(tiny_model, runner_name, setting):
    options, needed = NEEDED[setting]
    spec = SpecConfig(**options)
    counter = SyncCounter()
    engine = local_engine(twin(tiny_model, runner_name, counter),
                          draft_loader=lambda name, **kw: twin(load_model(name, **kw), runner_name, counter))
    watch_engine(engine, counter)
    per_round, sites, output = count_rounds(engine, engine.prompt_ids(PROMPT), spec, SamplingConfig(), ROUNDS,
                                            counter)
    assert len(output) > ROUNDS  # the rounds counted ran
    over = {phase: count for phase, count in per_round.items() if count > needed[phase]}
    assert not over, f"{setting} on {runner_name}: {over} syncs a round; from {dict(sites)}"
    assert per_round["decision"] >= 1  # the counter sees the verdict's read: it is watching
    if setting == "early-exit":
        assert per_round["draft"] == 1


@pytest.mark.parametrize("runner_name", ["eager", "static"])
def test_ids_fed_unread_give_the_logits_of_ids_fed_read_and_must_be_named(tiny_model, runner_name):
    """What early exit drafts with: a token fed as a device tensor (forward_unread) is the same pass as the id fed
    from the host; `ids` learns it from read_unread, and a rollback before that is refused."""
    model = twin(tiny_model, runner_name, SyncCounter())
    read, unread = model.new_runner(), model.new_runner()
    with torch.inference_mode():
        want = [read.forward([5, 6, 7], 1), read.forward([8], 1), read.forward([9], 1)]
        got = [unread.forward([5, 6, 7], 1), unread.forward_unread(torch.tensor([8]), 1),
               unread.forward_unread(torch.tensor([9]), 1)]
        with pytest.raises(RuntimeError, match="read_unread"):
            unread.rollback(2)
        with pytest.raises(ValueError):
            unread.read_unread([8])
        unread.read_unread([8, 9])
        assert unread.ids == read.ids == [5, 6, 7, 8, 9]
        for got_logits, want_logits in zip(got, want):
            torch.testing.assert_close(got_logits, want_logits, atol=0, rtol=0)
        unread.rollback(4)
        torch.testing.assert_close(unread.forward([11], 1), TransformersRunner(tiny_model.model).forward(
            [5, 6, 7, 8, 11], 1), atol=1e-4, rtol=0)
