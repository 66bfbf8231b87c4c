"""Host work beside the device's: with recorded steps and no drafter, the engine launches the next
decode step before the current one is read back (`Engine.iterate`, `CapturedStep.launch`), its fed
token gathered on the device. On this CPU the steps run eagerly, so what is checked is what overlap
may never change (every token, log-probability and finish reason, through admissions, stops,
preemptions, new weights and aborts) and that it does overlap (launches before reads)."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from specroll.drafting.protocol import Draft
from specroll.engine.captured_step import CapturedStep
from specroll.engine.engine import add_requests
from specroll.engine.request import Request, SamplingParams
from specroll.model.runner import ModelRunner, SequenceInput
from helpers import assert_same_rollout, make_engine, workload


def _stopping_workload(temperature: float = 1.0, stops: tuple[int, ...] = (), **params) -> list[Request]:
    """Lengths 12..37 tokens, and `stops` that end requests early, so steps lose rows at different
    times."""
    requests = workload(6, 4, temperature, **params)
    return [
        Request(r.request_id, r.group_id, r.sample_index, r.prompt_token_ids, _with_stops(r.params, stops))
        for r in requests
    ]


def _with_stops(params: SamplingParams, stops: tuple[int, ...]) -> SamplingParams:
    return SamplingParams(params.max_tokens, params.temperature, params.top_k, params.top_p, stops)


def _stops(model_dir, **params) -> tuple[int, ...]:
    """A token that some requests emit past their fourth and a most a third never do: it stops some
    requests early and leaves others to their length."""
    requests, _ = _run(model_dir, _stopping_workload(**params))
    emitted_by = Counter(t for r in requests for t in set(r.output_token_ids[4:]))
    return tuple(t for t, n in emitted_by.most_common() if 2 <= n <= len(requests) // 3)[:1]


def _run(model_dir, requests, between=None, **config) -> tuple[list[Request], object]:
    """Every request run to its end; `between(engine, iteration)` is called after each iteration."""
    engine = make_engine(model_dir, **config)
    assert not add_requests(engine, requests)
    iteration = 0
    while engine.has_unfinished:
        engine.iterate()
        if between is not None:
            between(engine, iteration)
        iteration += 1
    return requests, engine


@pytest.mark.parametrize(
    "settings",
    [
        dict(temperature=1.0),
        dict(temperature=0.0),
        dict(temperature=0.8, top_k=5, top_p=0.9),
        dict(temperature=1.0, sampling_rule="gumbel"),
    ],
    ids=["t1", "greedy", "truncated", "gumbel"],
)
def test_overlapped_decoding_keeps_every_token_and_logprob(qwen2_dir, one_thread, settings):
    params = {k: v for k, v in settings.items() if k in ("temperature", "top_k", "top_p")}
    params["stops"] = _stops(qwen2_dir, **params)
    config = {k: v for k, v in settings.items() if k == "sampling_rule"}
    sequential, _ = _run(qwen2_dir, _stopping_workload(**params), cuda_graphs=True, overlap=False, **config)
    overlapped, engine = _run(qwen2_dir, _stopping_workload(**params), cuda_graphs=True, **config)
    eager, _ = _run(qwen2_dir, _stopping_workload(**params), **config)
    assert_same_rollout(sequential, overlapped)
    assert_same_rollout(eager, overlapped)
    assert {r.finish_reason for r in overlapped} == {"stop", "length"}  # both ends were met
    assert engine.telemetry.steps_launched_ahead > len(engine.telemetry.decode_forwards) / 2
    assert engine.telemetry.rows_wasted > 0  # a request stopped while its next step was in flight


def test_admissions_and_preemptions_interleave_with_overlap(qwen2_dir, one_thread):
    """Four slots for 24 requests, and a KV budget that preempts: the batch changes often, and each
    change waits for the step in flight (`Scheduler.is_steady`)."""
    config = dict(cuda_graphs=True, max_batch_size=4, kv_budget_tokens=90)
    stops = _stops(qwen2_dir)
    sequential, _ = _run(qwen2_dir, _stopping_workload(stops=stops), overlap=False, **config)
    overlapped, engine = _run(qwen2_dir, _stopping_workload(stops=stops), **config)
    assert_same_rollout(sequential, overlapped)
    assert sum(r.num_preemptions for r in overlapped) > 0
    assert engine.telemetry.steps_launched_ahead > 0


def test_new_weights_and_aborts_drop_the_step_in_flight(qwen2_dir, one_thread):
    """New weights at iteration 5 apply from the next step on, as in the sequential engine (the step
    launched with the old ones is dropped unread); an abort at iteration 9 likewise."""

    def between(engine, iteration):
        if iteration == 5:
            torch.manual_seed(0)
            engine.load_weights({k: v + 0.01 * torch.randn_like(v) for k, v in engine.state_dict().items()})
        if iteration == 9:
            engine.abort(next(r for r in requests_of[engine] if r.finish_reason is None))

    requests_of = {}
    results = []
    for overlap in (False, True):
        requests = workload(3, 2, max_tokens=30)
        engine = make_engine(qwen2_dir, cuda_graphs=True, overlap=overlap)
        requests_of[engine] = requests
        assert not add_requests(engine, requests)
        iteration = 0
        while engine.has_unfinished:
            engine.iterate()
            between(engine, iteration)
            iteration += 1
        results.append(requests)
    assert_same_rollout(*results)


def test_the_next_step_is_launched_before_the_current_is_read(qwen2_dir, one_thread):
    engine = make_engine(qwen2_dir, cuda_graphs=True)
    assert engine.overlaps
    calls: list[str] = []
    captured = engine.parts_for_testing().captured
    launch, collect = captured.launch, captured.collect
    captured.launch = lambda *a, **k: calls.append("launch") or launch(*a, **k)
    captured.collect = lambda step: calls.append("collect") or collect(step)
    assert not add_requests(engine, workload(2, 2, max_tokens=20))
    for _ in range(4):  # admission and prefill, then decode steps
        engine.iterate()
    steady = calls[-6:]
    assert steady == ["launch", "collect"] * 3, calls
    assert calls.count("launch") > calls.count("collect")  # one step is always in flight


def test_no_overlap_with_a_drafter_or_without_recorded_steps(qwen2_dir, one_thread):
    from specroll.drafting.oracle import OracleDrafter

    drafter = OracleDrafter({0: [1, 2, 3]}, vocab_size=97)
    assert not make_engine(qwen2_dir, drafter, cuda_graphs=True).overlaps
    assert not make_engine(qwen2_dir).overlaps
    assert not make_engine(qwen2_dir, cuda_graphs=True, overlap=False).overlaps


def test_a_fed_row_reads_the_previous_steps_token_on_the_device(qwen2_dir, one_thread):
    """A step whose fed token is gathered from the previous step's emitted one gives the results of
    the same step with that token packed on the host."""
    runner = ModelRunner.from_pretrained(qwen2_dir, 4, 64, batch_invariant=True)
    runner.use_static_forwards(max_width=5)
    step = CapturedStep(runner, 7, "exact", "inverse-cdf")
    prompts = [(3, 4, 5, 6), (7, 8, 9)]
    requests = [Request(i, i, 0, p, SamplingParams()) for i, p in enumerate(prompts)]
    for r, slot in zip(requests, (0, 2)):
        r.slot = slot
    runner.forward([SequenceInput(r.slot, 0, r.prompt_token_ids[:-1]) for r in requests])
    drafts = [Draft(r.request_id) for r in requests]
    first = [SequenceInput(r.slot, len(r.prompt_token_ids) - 1, r.prompt_token_ids[-1:]) for r in requests]
    emitted = [tokens[0] for tokens in step.verify(requests, drafts, first).token_ids]

    def second(fed: bool):
        sequences = [
            SequenceInput(r.slot, len(r.prompt_token_ids), [0 if fed else token])
            for r, token in zip(requests, emitted)
        ]
        slots = [r.slot for r in requests] if fed else None
        return step.collect(step.launch(requests, drafts, sequences, False, fed_from=slots, ahead=[1, 1]))

    on_device = second(fed=True)  # first: `emitted` still holds the first step's tokens
    on_host = second(fed=False)
    assert on_device == on_host
    garbage = [SequenceInput(r.slot, len(r.prompt_token_ids), [0]) for r in requests]
    assert (
        step.collect(step.launch(requests, drafts, garbage, False, ahead=[1, 1])) != on_host
    )  # 0 is not fed


def test_overlap_under_graph_semantics_keeps_every_token(qwen2_dir, one_thread, monkeypatch):
    """Recorded steps under a graph's semantics (`graph_stand_in`: the recording use runs the step
    a warm-up time, a recording time and a replay, each writing what a step writes): a step fed from
    the device must read the previous step's tokens however often it runs."""
    from graph_stand_in import ReplayedOnCpu

    made = []
    monkeypatch.setattr(
        "specroll.model.static_forward.Replayer", lambda device: made.append(ReplayedOnCpu()) or made[-1]
    )
    stops = _stops(qwen2_dir)
    sequential, _ = _run(qwen2_dir, _stopping_workload(stops=stops), overlap=False)
    overlapped, engine = _run(qwen2_dir, _stopping_workload(stops=stops), cuda_graphs=True)
    assert_same_rollout(sequential, overlapped)
    assert engine.telemetry.steps_launched_ahead > 0 and made[-1].num_replays > 0
