"""Where one decode or verification step's time goes: the forward and the verification, timed apart,
then a torch-profiler table of the kernels (and, with --trace, a Chrome trace).

    python benchmarks/step_trace.py --model smollm2 --device cuda --dtype bfloat16 --batch 64 --width 5
    python benchmarks/step_trace.py --batch 8 --width 1                      # the bundled policy, CPU

A step here is what the engine runs for `--batch` requests after `--context` cached positions, each
verifying `--width` - 1 drafts in exact mode, with its one copy to the host: with --cuda-graphs on
(the default on CUDA) one recorded graph of forward, LM head and verification
(`engine.captured_step`), else `ModelRunner.forward` and `verify_on_device`, timed apart with a
device synchronisation between them. The cache holds zeros: the work does not depend on its values.
Then what a warm step asks of the device, counted from torch's dispatch (`engine.step_counters`, the
same counts on any device): reads back to the host, ops launched from Python and inside the recorded
step, tensors allocated; and the kernels one forward launches, run eagerly: specroll's Triton kernels
by name (`kernels.launches`; on a GPU's batch-invariant kernels) and torch's ops.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))


def main() -> None:
    args = _parse()
    import torch

    from specroll.drafting.protocol import Draft
    from specroll.engine.captured_step import CapturedStep
    from specroll.engine.request import Request, SamplingParams
    from specroll.engine.verifier import verify_inputs, verify_on_device
    from specroll.model.catalog import resolve_model_dir
    from specroll.model.device import resolve_cuda_graphs, resolve_device, torch_dtype
    from specroll.model.runner import ModelRunner, SequenceInput
    from specroll.placement import is_batch_invariant

    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    runner = ModelRunner.from_pretrained(
        resolve_model_dir(args.model),
        args.batch,
        args.context + args.width + 1,
        torch_dtype(args.dtype),
        device,
        batch_invariant=is_batch_invariant(device, args.fast_numerics),
    )
    if resolve_cuda_graphs(args.cuda_graphs, device):
        runner.use_static_forwards(args.width)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    requests = [Request(b, b, 0, (1,), SamplingParams(max_tokens=10_000)) for b in range(args.batch)]
    drafts = [Draft(b, [2] * (args.width - 1)) for b in range(args.batch)]
    inputs = [
        SequenceInput(b, args.context, [2] * args.width, num_logits=args.width) for b in range(args.batch)
    ]

    captured = CapturedStep(runner, 0, "exact", "inverse-cdf") if runner.static is not None else None

    def step(timings: dict[str, list[float]] | None = None) -> None:
        started = time.perf_counter()
        if captured is not None:  # as the engine runs it: one recorded graph, one copy back
            captured.verify(requests, drafts, inputs)
            phases = {"captured step": time.perf_counter() - started}
        else:
            logits = runner.forward(inputs).logits
            sync()
            forwarded = time.perf_counter()
            V = logits.shape[-1]
            verify_on_device(
                logits, verify_inputs(requests, drafts, args.width, V, logits.device), 0, "exact"
            ).cpu()
            phases = {"forward": forwarded - started, "verification": time.perf_counter() - forwarded}
        for phase, seconds in phases.items() if timings is not None else ():
            timings.setdefault(phase, []).append(seconds)

    for _ in range(args.warmup):
        step()
    timings: dict[str, list[float]] = {}
    for _ in range(args.steps):
        step(timings)
    print(f"{args.model} {device} {args.dtype} batch {args.batch} width {args.width} context {args.context}")
    for phase, values in timings.items():
        print(f"  {phase:<15} median {statistics.median(values) * 1e3:8.3f} ms over {len(values)} steps")
    if runner.static is not None:
        print(f"  graphs recorded: {runner.static.replayer.num_graphs} (none off CUDA: run eagerly)")
    _count(step, runner, num_steps=3)  # the counts are the same every warm step
    _count_forward_kernels(runner, inputs)
    _profile(step, device, args)


def _count(step, runner, num_steps: int) -> None:
    """What a warm step asks of the device (`engine.step_counters`): the same counts on any device."""
    from specroll.engine.step_counters import count_device_work

    with count_device_work(None if runner.static is None else runner.static.replayer) as counts:
        for _ in range(num_steps):
            step()
    per = counts.per(num_steps)
    print(f"  host reads a step {per['num_host_reads']:g} ({', '.join(counts.reads) or 'none'})")
    launched, recorded = per["num_ops_launched"], per["num_ops_recorded"]
    print(f"  ops a step: {launched:g} launched from Python, {recorded:g} recorded")
    print(
        f"  tensors allocated a step: {per['num_allocations']:g} from Python, "
        f"{per['num_allocations_recorded']:g} recorded (a graph's pool on CUDA)"
    )
    common = ", ".join(f"{name} {n / num_steps:g}" for name, n in counts.ops.most_common(6))
    print(f"  most frequent ops a step: {common}")


def _count_forward_kernels(runner, inputs) -> None:
    """The kernels one forward (LM head included) launches, run eagerly: a recorded graph replays the
    same ones, but launches none from Python."""
    from specroll.engine.step_counters import count_device_work
    from specroll.kernels.launches import count_launches

    batch = runner.prepare(inputs)
    with count_device_work(None) as ops, count_launches() as triton:
        runner.model(batch, runner.cache)
    names = ", ".join(f"{name} {n}" for name, n in triton.most_common()) or "none: not on the Triton kernels"
    print(f"  kernels a forward: {triton.total()} Triton ({names}), {ops.num_ops_launched} torch ops")


def _profile(step, device: str, args: argparse.Namespace) -> None:
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(args.profiled_steps):
            step()
    key = "self_cuda_time_total" if device == "cuda" else "self_cpu_time_total"
    print(prof.key_averages().table(sort_by=key, row_limit=args.rows))
    if args.trace:
        prof.export_chrome_trace(str(args.trace))
        print(f"wrote {args.trace}")


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(REPO_ROOT / "checkpoints" / "policy"))
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    parser.add_argument("--cuda-graphs", default="auto", choices=("auto", "on", "off"))
    parser.add_argument("--fast-numerics", action="store_true")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--width", type=int, default=1, help="tokens a row: the fed token and the drafts")
    parser.add_argument("--context", type=int, default=256, help="cached positions before the step")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--profiled-steps", type=int, default=5)
    parser.add_argument("--rows", type=int, default=25, help="rows of the profiler's table")
    parser.add_argument("--trace", type=Path, default=None, help="write a Chrome trace here")
    return parser.parse_args()


if __name__ == "__main__":
    main()
