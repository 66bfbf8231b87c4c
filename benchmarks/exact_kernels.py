"""The exact (batch-invariant) kernels against the fast numerics on one device, beside their
predictions (`specroll.kernels.cost`, docs/gpu.md): per layer shape, attention, a sweep of the
linear kernel's tiles and splits, and whole decode forwards, SmolLM2 and a 7B shape (Qwen2-7B's,
random weights), bf16.

    python benchmarks/exact_kernels.py --device cuda --model DIR     # DIR: SmolLM2's shape or weights
    python benchmarks/exact_kernels.py --smoke --model DIR           # tiny shapes on the CPU

On CUDA every timing is a CUDA graph of `CALLS` calls replayed (launch overhead as a recorded
forward pays it), the median of `--rounds` replays. Prints markdown tables, one per part.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

if "--smoke" in sys.argv:  # the kernels run in Triton's interpreter on a CPU; it is chosen at import
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from specroll.kernels.cost import H100, H200, attention_launch, linear_launch, predict_forward  # noqa: E402
from specroll.kernels.plans import BLOCK_K, LinearPlan, cdiv, linear_plan  # noqa: E402
from specroll.kernels.shapes import QWEN2_7B, SMOLLM2, ModelShape  # noqa: E402

CALLS = 10
SMOKE_SHAPE = ModelShape("smoke", 64, 128, 4, 2, 16, 512, 2, False)


def timed(fn, device: str, rounds: int) -> float:
    """Median seconds of one call of `fn`."""
    fn()  # compiles, and makes any buffer a call keeps
    if device != "cuda":
        times = []
        for _ in range(rounds):
            started = time.perf_counter()
            fn()
            times.append(time.perf_counter() - started)
        return statistics.median(times)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(CALLS):
            fn()
    times = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / CALLS)
    return statistics.median(times)


def _device_model(device: str):
    name = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    return H200 if "H200" in name else H100


def layers_table(shapes, batches, device, rounds) -> None:
    from specroll.kernels.linear import invariant_linear

    predicted_on = _device_model(device)
    print(f"\n### Linear layers, bf16 (predicted: {predicted_on.name})\n")
    print("| model | layer | batch | programs | exact µs | fast µs | exact / fast | predicted µs |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for shape in shapes:
        layers = {**{f"{n} {k}->{m}": (k, m) for n, (k, m) in shape.linear_layers().items()}}
        layers[f"lm_head {shape.lm_head[0]}->{shape.lm_head[1]}"] = shape.lm_head
        for name, (K, N) in _distinct(layers).items():
            weight = torch.randn(N, K, device=device, dtype=torch.bfloat16) / K**0.5
            for b in batches:
                x = torch.randn(b, K, device=device, dtype=torch.bfloat16)
                exact = timed(lambda x=x, w=weight: invariant_linear(x, w, None), device, rounds)
                fast = timed(lambda x=x, w=weight: F.linear(x, w), device, rounds)
                launch, _ = linear_launch(name, K, N, b)
                print(
                    f"| {shape.name} | {name} | {b} | {launch.num_programs} | {exact * 1e6:.1f} | "
                    f"{fast * 1e6:.1f} | {exact / fast:.2f} | {launch.seconds(predicted_on) * 1e6:.1f} |",
                    flush=True,
                )
            del weight


def _distinct(layers: dict) -> dict:
    seen, kept = set(), {}
    for name, kn in layers.items():
        if kn not in seen:
            seen.add(kn)
            kept[name] = kn
    return kept


def sweep_table(shapes, batches, device, rounds) -> None:
    """Other tile widths and splits than the plan's, on each model's widest and narrowest layers."""
    from specroll.kernels.linear import invariant_linear

    print("\n### Linear tiles and splits swept, bf16 (the plan's marked *)\n")
    print("| model | layer | batch | BLOCK_N | splits | µs |")
    print("|---|---|---:|---:|---:|---:|")
    for shape in shapes:
        for K, N in (
            shape.linear_layers()["q"],
            shape.linear_layers()["down"],
            shape.linear_layers()["gate"],
        ):
            weight = torch.randn(N, K, device=device, dtype=torch.bfloat16) / K**0.5
            chosen = linear_plan(K, N)
            for b in (batches[0], batches[-1]):
                x = torch.randn(b, K, device=device, dtype=torch.bfloat16)
                for plan in _plans(K, chosen):
                    seconds = timed(
                        lambda x=x, w=weight, p=plan: invariant_linear(x, w, None, p), device, rounds
                    )
                    mark = "*" if plan == chosen else ""
                    print(
                        f"| {shape.name} | {K}->{N} | {b} | {plan.block_n}{mark} | {plan.num_splits} | "
                        f"{seconds * 1e6:.1f} |",
                        flush=True,
                    )
            del weight


def _plans(K: int, chosen: LinearPlan) -> list[LinearPlan]:
    k_tiles = cdiv(K, BLOCK_K)
    plans = [chosen]
    for block_n in (32, 64, 128):
        for splits in sorted({1, chosen.num_splits, min(k_tiles, 2 * chosen.num_splits)}):
            per_split = cdiv(k_tiles, splits)
            plan = LinearPlan(block_n, BLOCK_K, cdiv(k_tiles, per_split), per_split * BLOCK_K)
            if plan not in plans:
                plans.append(plan)
    return plans


def attention_table(shapes, batches, device, rounds, context: int) -> None:
    from specroll.kernels.attention import invariant_attention

    predicted_on = _device_model(device)
    print(f"\n### Attention at a decode, bf16 (predicted: {predicted_on.name})\n")
    print("| model | batch | context | programs | exact µs | fast µs | exact / fast | predicted µs |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    cases = [(b, context) for b in batches] + [(batches[0], 8 * context)]
    for shape in shapes:
        for b, L in cases:
            q = torch.randn(b, shape.num_heads, 1, shape.head_dim, device=device, dtype=torch.bfloat16)
            keys, values = (
                torch.randn(b, shape.num_kv_heads, L, shape.head_dim, device=device, dtype=torch.bfloat16)
                for _ in range(2)
            )
            mask = torch.ones(b, 1, 1, L, dtype=torch.bool, device=device)
            kv = (q, keys, values)
            exact = timed(lambda kv=kv, mask=mask: invariant_attention(*kv, mask), device, rounds)
            fast = timed(lambda kv=kv: F.scaled_dot_product_attention(*kv, enable_gqa=True), device, rounds)
            launch = attention_launch(shape, b, L)
            print(
                f"| {shape.name} | {b} | {L} | {launch.num_programs} | {exact * 1e6:.1f} | "
                f"{fast * 1e6:.1f} | {exact / fast:.2f} | {launch.seconds(predicted_on) * 1e6:.1f} |",
                flush=True,
            )


def forward_table(models, batches, device, rounds, context: int) -> None:
    """Whole decode forwards through `ModelRunner.forward`, exact against fast."""
    predicted_on = _device_model(device)
    print(f"\n### Decode forwards, bf16, context {context} (predicted: {predicted_on.name})\n")
    print(
        "| model | batch | exact ms | fast ms | exact / fast | weights' read ms (predicted) | exact / read |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, shape, build in models:
        times = {}
        for exact in (True, False):
            runner = _runner(build(), max(batches), context, exact, device)
            _prefill(runner, max(batches), context)
            for b in batches:
                times[exact, b] = _forward_seconds(runner, b, context, rounds, device)
            del runner
            if device == "cuda":
                torch.cuda.empty_cache()
        for b in batches:
            read = predict_forward(shape, b, predicted_on, context).weights_seconds
            e, f = times[True, b], times[False, b]
            print(
                f"| {name} | {b} | {e * 1e3:.3f} | {f * 1e3:.3f} | {e / f:.2f} | {read * 1e3:.3f} | "
                f"{e / read:.2f} |"
            )


def _runner(model, batch: int, context: int, exact: bool, device: str):
    from specroll.model.runner import ModelRunner

    runner = ModelRunner(model, batch, context + 64, batch_invariant=exact)
    if device == "cuda":
        runner.use_static_forwards(1)  # recorded as CUDA graphs, as the engine runs a decode
    return runner


def _forward_seconds(runner, batch: int, context: int, rounds: int, device: str) -> float:
    from specroll.model.runner import SequenceInput

    step = [SequenceInput(slot, context, [7]) for slot in range(batch)]
    for _ in range(2):  # the second records the graph
        runner.forward(step)
    times = []
    for _ in range(rounds):
        if device == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        runner.forward(step)
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _prefill(runner, num_rows: int, context: int) -> None:
    """`context` tokens into each of the first `num_rows` slots, eight rows a forward."""
    from specroll.model.runner import SequenceInput

    for first in range(0, num_rows, 8):
        rows = range(first, min(num_rows, first + 8))
        runner.forward([SequenceInput(slot, 0, list(range(1, context + 1))) for slot in rows])


def _random_model(shape: ModelShape, device: str):
    """A model of `shape` with random bf16 weights, built on the device (no checkpoint on disk)."""
    from specroll.model.config import ModelConfig
    from specroll.model.transformer import CausalLM

    config = ModelConfig(
        architecture="qwen2", vocab_size=shape.vocab, hidden_size=shape.hidden,
        intermediate_size=shape.intermediate, num_layers=shape.num_layers, num_heads=shape.num_heads,
        num_kv_heads=shape.num_kv_heads, head_dim=shape.head_dim, max_position_embeddings=32768,
        has_qkv_bias=shape.has_qkv_bias,
    )  # fmt: skip
    with torch.device(device):
        torch.set_default_dtype(torch.bfloat16)
        try:
            model = CausalLM(config)
        finally:
            torch.set_default_dtype(torch.float32)
    for p in model.parameters():
        p.data.normal_(0, 0.02)
    return model.eval()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--model", required=True, help="SmolLM2's checkpoint or its shape's")
    parser.add_argument("--batches", default="1,8,64,128")
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--parts", default="layers,attention,sweep,forward")
    parser.add_argument("--no-7b-forward", action="store_true", help="leave the 7B shape's forward out")
    parser.add_argument(
        "--smoke", action="store_true", help="tiny shapes on the CPU, in Triton's interpreter"
    )
    args = parser.parse_args()
    device = "cpu" if args.smoke else args.device
    batches = [int(b) for b in args.batches.split(",")]
    shapes = (SMOKE_SHAPE,) if args.smoke else (SMOLLM2, QWEN2_7B)
    parts = args.parts.split(",")
    torch.manual_seed(0)
    if "layers" in parts:
        layers_table(shapes, batches, device, args.rounds)
    if "attention" in parts:
        attention_table(shapes, batches, device, args.rounds, args.context)
    if "sweep" in parts:
        sweep_table(shapes, batches, device, args.rounds)
    if "forward" in parts:
        models = [
            (
                "SmolLM2 (" + Path(args.model).name + ")",
                SMOLLM2,
                lambda: _load(args.model, device, args.smoke),
            )
        ]
        if not (args.smoke or args.no_7b_forward):
            models.append(("Qwen2-7B shape, random", QWEN2_7B, lambda: _random_model(QWEN2_7B, device)))
        forward_table(models, batches, device, args.rounds, args.context)
    return 0


def _load(model_dir: str, device: str, smoke: bool):
    """The checkpoint in bf16 (fp32 on the smoke run's CPU, where exact bf16 is probed at length)."""
    from specroll.model.loader import load_model

    return load_model(model_dir, dtype=torch.float32 if smoke else torch.bfloat16, device=device)


if __name__ == "__main__":
    sys.exit(main())
