"""`specroll profile`: time target (and draft model) forwards on this machine and fit the cost model.

The fit is written to `profiles/<model dir name>.cost.json` (relative to the working directory)
unless `--out` says otherwise, with the device type it was measured on (`--device`). `CostModel.load`
reads it back for the engine (a rollout finds it there by the model's directory name, or takes
`RolloutConfig.cost_model`, on that device type only) and for the simulator
(`specroll simulate --cost-model FILE`, where `sim.profiled_cost.ProfiledCost` makes it every
worker's forward cost and the engine's policies in the simulated workers reason with it).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
import platform
from pathlib import Path

from specroll.commands.rollout import add_device_arguments
from specroll.model.catalog import resolve_model_dir
from specroll.policies.cost_model import CostModel, LatencySample


def default_output(model_dir: Path, dtype: str = "float32") -> Path:
    """profiles/<model>.cost.json for fp32, profiles/<model>.<dtype>.cost.json otherwise: a bf16
    forward's prices are not an fp32 one's (`EngineChoices.cost_model_path` looks for both)."""
    suffix = "" if dtype == "float32" else f".{dtype}"
    return Path("profiles") / f"{model_dir.resolve().name}{suffix}.cost.json"


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split(",") if v)


def register(parser: argparse.ArgumentParser) -> None:
    """Add this command's arguments to its parser and set `func`."""
    parser.add_argument("--model", type=str, required=True, help="target checkpoint directory or model name")
    parser.add_argument(
        "--draft-model", type=str, default=None, help="draft checkpoint or model name, for D(b)"
    )
    parser.add_argument("--max-batch-size", type=int, default=32)
    parser.add_argument(
        "--max-draft", type=int, default=16, help="widest draft timed (its forwards are max-draft + 1 wide)"
    )
    parser.add_argument("--context-lengths", type=_ints, default=(64, 512), help="comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    add_device_arguments(parser)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="default: profiles/<model dir name>.cost.json in fp32, "
        "profiles/<model dir name>.<dtype>.cost.json in another dtype",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch

    from specroll.model.device import resolve_cuda_graphs, resolve_device, resolve_dtype, torch_dtype
    from specroll.profiling import ProfileGrid, profile_checkpoint

    if args.threads:
        torch.set_num_threads(args.threads)
    model_dir = resolve_model_dir(args.model)
    draft_dir = None if args.draft_model is None else resolve_model_dir(args.draft_model)
    grid = ProfileGrid.standard(args.max_batch_size, args.max_draft, args.context_lengths, args.repeats)
    device = resolve_device(args.device)
    cuda_graphs = resolve_cuda_graphs(args.cuda_graphs, device)
    dtype = resolve_dtype(args.dtype, device)
    graphs = " cuda-graphs" if cuda_graphs else ""
    threads = f", {torch.get_num_threads()} threads" if device == "cpu" else ""
    source = f"{model_dir.resolve().name} on {platform.machine()} {device} {dtype}{graphs}{threads}"
    model, samples = profile_checkpoint(
        model_dir, grid, draft_dir, device, source, dtype=torch_dtype(dtype), cuda_graphs=cuda_graphs
    )
    out = args.out or default_output(model_dir, dtype)
    model = replace(model, device=model.device, dtype=dtype)
    model.save(out)
    print_fit(model, samples, out)
    return 0


def print_fit(model: CostModel, samples: list[LatencySample], out: Path) -> None:
    print(f"{'batch':>5} {'tokens':>6} {'context':>7} {'measured ms':>11} {'fitted ms':>9}")
    for s in samples:
        fitted = model.forward_seconds(s.batch_size, s.num_tokens, s.context_length)
        print(
            f"{s.batch_size:5d} {s.num_tokens:6d} {s.context_length:7d} "
            f"{s.seconds * 1e3:11.3f} {fitted * 1e3:9.3f}"
        )
    print(
        f"t = {model.c_base * 1e3:.4f} ms + {model.c_row * 1e6:.4f} us * rows"
        f" + {model.c_row_ctx * 1e9:.4f} ns * rows * context + {model.c_tok * 1e6:.4f} us * tokens"
        f" + {model.c_ctx * 1e9:.4f} ns * tokens * context"
    )
    if model.draft_base or model.draft_row:
        print(f"D(b) = {model.draft_base * 1e3:.4f} ms + {model.draft_row * 1e6:.4f} us * b per draft token")
    print(f"mean relative error {model.fit_error:.1%} over {len(samples)} samples; wrote {out}")
