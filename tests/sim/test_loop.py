"""Event-loop invariants and every system option on small seeded cases."""

import numpy as np
import pytest

from specroll.sim.presets import get_preset
from specroll.sim.systems import SYSTEMS, SystemOptions, _topology, simulate
from specroll.sim.workload import LengthDistribution
from specroll.tail import tail_seconds

SMALL = get_preset("DAPO-32B-20K").with_overrides(
    num_gpus=16, num_prompts=8, group_size=8, lengths=LengthDistribution(600, 0.8, 0.4, 4096)
)
SEER_SMALL = get_preset("Qwen2-VL-72B").with_overrides(
    num_gpus=32, num_prompts=8, group_size=8, lengths=LengthDistribution(600, 0.8, 0.4, 4096), chunk_size=512
)
DAS_SMALL = get_preset("DeepScaleR-7B").with_overrides(
    num_gpus=2, num_prompts=8, group_size=8, lengths=LengthDistribution(600, 0.8, 0.4, 4096)
)


@pytest.fixture(scope="module", params=sorted(SYSTEMS))
def run(request):
    name = request.param
    preset = DAS_SMALL if name == "das" else SEER_SMALL if name.startswith(("divided", "seer")) else SMALL
    metrics, trace = simulate(preset, SYSTEMS[name], record_segments=True)
    return name, preset, metrics, trace


def _workload(preset):
    """The requests the simulation ran: the same seeded draw."""
    from specroll.sim.workload import Workload

    rng = np.random.default_rng(preset.seed)
    return Workload.sample(preset.lengths, preset.num_prompts, preset.group_size, preset.prompt_tokens, rng)


def test_every_request_finishes_exactly_once_and_tokens_are_conserved(run):
    name, preset, metrics, trace = run
    assert not np.isnan(trace.finish_seconds).any()
    workload = _workload(preset)
    assert trace.generated.sum() == workload.output_lengths.sum()
    assert (trace.generated == workload.output_lengths).all()


def test_a_worker_runs_one_batch_at_a_time_and_its_segments_are_its_busy_time(run):
    """The recorded segments account for every worker's busy time and end with the last request."""
    name, preset, metrics, trace = run
    topology = _topology(preset, SYSTEMS[name])
    by_worker: dict[int, list[tuple[float, float]]] = {}
    for worker, start, end, running in trace.segments:
        assert running >= 1 and end > start
        by_worker.setdefault(worker, []).append((start, end))
    assert sorted(by_worker) == list(range(topology.num_workers))  # every worker ran something
    for spans in by_worker.values():
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:]):
            assert start >= end - 1e-9
    busy_seconds = sum(end - start for spans in by_worker.values() for start, end in spans)
    assert busy_seconds * topology.gpus_per_worker == pytest.approx(trace.busy_gpu_seconds, rel=1e-9)
    assert max(end for spans in by_worker.values() for _, end in spans) == metrics.makespan_seconds


def test_makespan_never_below_critical_path(run):
    _, preset, metrics, trace = run
    workload = _workload(preset)
    fastest_forward = preset.target_cost(2 * preset.gpus_per_worker).overhead_seconds
    max_tokens_per_forward = 17  # no strategy drafts more than 16 tokens
    bound = workload.output_lengths.max() / max_tokens_per_forward * fastest_forward
    assert metrics.makespan_seconds >= bound
    assert 0.0 <= metrics.idle_gpu_fraction < 1.0
    assert metrics.tail_seconds == tail_seconds(trace.finish_seconds) > 0.0
    output_tokens = workload.output_lengths.sum()
    assert metrics.tokens_per_second == pytest.approx(output_tokens / metrics.makespan_seconds)


def test_no_speculation_respects_the_batch1_latency_bound():
    metrics, _ = simulate(SMALL, SYSTEMS["verl"])
    workload_max = SMALL.lengths.max_tokens
    from specroll.sim.workload import Workload

    lengths = Workload.sample(
        SMALL.lengths,
        SMALL.num_prompts,
        SMALL.group_size,
        SMALL.prompt_tokens,
        np.random.default_rng(SMALL.seed),
    ).output_lengths
    assert lengths.max() <= workload_max
    assert metrics.makespan_seconds >= lengths.max() * SMALL.target_cost().forward_seconds(1, 1, 0)


def test_seeded_runs_are_deterministic():
    first, _ = simulate(SMALL, SYSTEMS["specactor"])
    second, _ = simulate(SMALL, SYSTEMS["specactor"])
    assert first == second


def test_divided_rollout_never_preempts_and_baseline_can():
    tight = SMALL.with_overrides(
        lengths=LengthDistribution(3000, 0.3, 0.2, 4096), num_prompts=64, group_size=16, num_gpus=4
    )
    assert simulate(tight, SYSTEMS["divided"])[0].num_preemptions == 0
    long_prompts = tight.with_overrides(
        prompt_tokens=40000, lengths=LengthDistribution(8000, 0.1, 0.1, 20480)
    )
    assert simulate(long_prompts, SYSTEMS["verl"])[0].num_preemptions > 0


def test_fastest_of_n_adds_copies_on_freed_workers():
    wide = SMALL.with_overrides(num_gpus=72)
    metrics, _ = simulate(wide, SYSTEMS["specactor"])
    assert metrics.num_fon_copies > 0
    assert simulate(wide, SYSTEMS["decoupled+reconfig"])[0].num_fon_copies == 0


def test_speculation_speeds_up_a_lone_high_acceptance_request():
    lone = SMALL.with_overrides(
        num_gpus=4, num_prompts=1, group_size=1, lengths=LengthDistribution(2000, 0.0, 0.0, 4096)
    )
    plain = simulate(lone, SYSTEMS["verl"])[0].makespan_seconds
    assert simulate(lone, SYSTEMS["vanilla-spec"])[0].makespan_seconds < plain


def test_divided_balances_groups_better_than_static():
    skewed = SEER_SMALL.with_overrides(lengths=LengthDistribution(800, 1.2, 0.2, 4096))
    static = simulate(skewed, SYSTEMS["verl"])[0]
    divided = simulate(skewed, SYSTEMS["divided"])[0]
    assert divided.idle_gpu_fraction < static.idle_gpu_fraction


def test_options_validate():
    with pytest.raises(ValueError):
        SystemOptions(dispatch="context")  # the dispatch table's name is context-aware
    with pytest.raises(ValueError):
        SystemOptions(speculation="coupled")  # the registry's name is fixed-K
    with pytest.raises(ValueError):
        SystemOptions(speculation="ladder")  # a copy's drafter is fixed at dispatch: the ladder cannot switch
    with pytest.raises(ValueError):
        SystemOptions(speculation="fixed-4", reconfigure=True)
    assert SystemOptions(dispatch="context-aware", speculation="fixed-3").label == "context-aware/fixed-3"


def test_das_beats_plain_decoding_on_a_small_case():
    das, _ = simulate(DAS_SMALL, SYSTEMS["das"])
    verl, _ = simulate(DAS_SMALL, SYSTEMS["verl"])
    assert das.makespan_seconds < verl.makespan_seconds
