"""`specroll simulate`: one synchronous rollout step of a preset cluster, or the papers' comparisons."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from specroll.policies.cost_model import CostModel
from specroll.sim.roofline import GPUS, MODELS
from specroll.sim.presets import PRESETS, Preset, get_preset
from specroll.sim.systems import SYSTEMS, simulate

OVERRIDES = {  # flag -> (Preset field, type)
    "workers": ("num_gpus", int),
    "prompts": ("num_prompts", int),
    "group_size": ("group_size", int),
    "gpus_per_worker": ("gpus_per_worker", int),
    "model": ("model", str),
    "gpu": ("gpu", str),
    "seed": ("seed", int),
}


def register(parser: argparse.ArgumentParser) -> None:
    """Add this command's arguments to its parser and set `func`."""
    parser.add_argument("--preset", default="DAPO-32B-20K", choices=sorted(PRESETS))
    parser.add_argument(
        "--systems",
        default="verl,vanilla-spec,specactor,divided,divided+context,seer,das,tlt,auto",
        help=f"comma-separated, from: {', '.join(SYSTEMS)}",
    )
    parser.add_argument("--reproduce", action="store_true", help="the papers' headline comparisons")
    parser.add_argument("--best", action="store_true", help="rank every combination of options on the preset")
    parser.add_argument("--json", action="store_true", help="one line of JSON")
    parser.add_argument("--workers", type=int, help="number of workers (each gpus-per-worker GPUs)")
    parser.add_argument("--prompts", type=int, help="prompts per step")
    parser.add_argument("--group-size", type=int, help="requests per prompt")
    parser.add_argument("--gpus-per-worker", type=int, help="GPUs per worker (tensor-parallel degree)")
    parser.add_argument("--max-tokens", type=int, help="response budget")
    parser.add_argument("--median-tokens", type=float, help="median group length")
    parser.add_argument("--model", choices=sorted(MODELS))
    parser.add_argument("--gpu", choices=sorted(GPUS))
    parser.add_argument("--seed", type=int, help="the preset's draw; with --reproduce, the first seed")
    parser.add_argument(
        "--seeds",
        type=int,
        default=1,
        help="with --reproduce: draw each comparison at seeds --seed .. --seed + N - 1 (mean, spread)",
    )
    cost_help = (
        "a `specroll profile` fit: every worker's forwards cost this instead of the preset's roofline, "
        "and the engine's policies reason with it (not with --reproduce)"
    )
    parser.add_argument("--cost-model", type=Path, default=None, metavar="FILE.json", help=cost_help)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.reproduce:
        return _run_reproduce(args)
    preset = _apply_overrides(get_preset(args.preset), args)
    if args.best:
        return _run_best(preset, args)
    return _run_systems(preset, args)


def _apply_overrides(preset: Preset, args: argparse.Namespace) -> Preset:
    changes = {}
    gpus_per_worker = args.gpus_per_worker or preset.gpus_per_worker
    for flag, (field_name, _) in OVERRIDES.items():
        value = getattr(args, flag)
        if value is not None:
            changes[field_name] = value * gpus_per_worker if flag == "workers" else value
    lengths = preset.lengths
    if args.max_tokens is not None:
        lengths = lengths.__class__(**{**lengths.__dict__, "max_tokens": args.max_tokens})
    if args.median_tokens is not None:
        lengths = lengths.__class__(**{**lengths.__dict__, "median_tokens": args.median_tokens})
    if args.cost_model is not None:
        changes["cost_profile"] = CostModel.load(args.cost_model)
    return preset.with_overrides(lengths=lengths, **changes)


def _run_systems(preset: Preset, args: argparse.Namespace) -> int:
    names = [name.strip() for name in args.systems.split(",") if name.strip()]
    unknown = [name for name in names if name not in SYSTEMS]
    if unknown:
        raise ValueError(f"unknown systems {unknown}; known: {', '.join(SYSTEMS)}")
    rows, baseline = [], None
    for name in names:
        start = time.perf_counter()
        metrics = simulate(preset, SYSTEMS[name])[0]
        baseline = baseline or metrics
        rows.append(
            {
                "system": name,
                **metrics.__dict__,
                "speedup": baseline.makespan_seconds / metrics.makespan_seconds,
                "wall_seconds": time.perf_counter() - start,
            }
        )
    _print_rows(preset, rows, args.json, first=names[0])
    return 0


def _print_rows(preset: Preset, rows: list[dict], as_json: bool, first: str) -> None:
    if as_json:
        print(json.dumps({"preset": preset.name, "systems": rows}))
        return
    print(
        f"{preset.name}: {preset.num_workers} workers x {preset.gpus_per_worker} {preset.gpu}, "
        f"{preset.num_requests} requests, max {preset.lengths.max_tokens} tokens (ratios vs {first})"
    )
    print(f"{'system':20} {'makespan s':>10} {'tok/s':>10} {'tail s':>8} {'idle':>6} {'speedup':>8}")
    for row in rows:
        print(
            f"{row['system']:20} {row['makespan_seconds']:10.1f} {row['tokens_per_second']:10.0f} "
            f"{row['tail_seconds']:8.1f} {row['idle_gpu_fraction']:6.2f} {row['speedup']:7.2f}x"
        )


def _run_reproduce(args: argparse.Namespace) -> int:
    from specroll.sim.reproduce import reproduce

    if args.seeds < 1:
        raise ValueError("--seeds must be at least 1")
    first = args.seed if args.seed is not None else 0
    seeds = list(range(first, first + args.seeds))
    checks = reproduce(seeds)
    if args.json:
        fields = ("name", "simulated", "spread", "min", "max", "samples", "paper_low", "paper_high", "within")
        rows = [{k: c.as_dict()[k] for k in fields} for c in checks]
        print(json.dumps({"seeds": seeds, "checks": rows}))
        return 0
    _print_checks(checks, seeds)
    return 0


def _print_checks(checks: list, seeds: list[int]) -> None:
    print(f"seeds {seeds[0]}..{seeds[-1]} ({len(seeds)}): mean, standard deviation and range over seeds")
    print(f"{'comparison':62} {'mean':>7} {'std':>6} {'min-max':>13} {'paper':>11} {'±25%':>5}  source")
    for c in checks:
        paper = (
            f"{c.paper_low:.3g}" if c.paper_low == c.paper_high else f"{c.paper_low:.3g}-{c.paper_high:.3g}"
        )
        span = f"{min(c.samples):.3f}-{max(c.samples):.3f}"
        within = "yes" if c.within else "no"
        print(
            f"{c.name:62} {c.simulated:7.3f} {c.spread:6.3f} {span:>13} {paper:>11} {within:>5}  {c.source}"
        )
    num_within = sum(c.within for c in checks)
    print(f"{num_within} of {len(checks)} means within ±25% of the papers' ranges")


def _run_best(preset: Preset, args: argparse.Namespace) -> int:
    from specroll.sim.reproduce import best_combination

    ranked = best_combination(preset)
    if args.json:
        print(
            json.dumps({"preset": preset.name, "ranking": [{"options": l, **m.__dict__} for l, m in ranked]})
        )
        return 0
    print(f"{preset.name}: all combinations, fastest first")
    for label, metrics in ranked:
        print(
            f"{label:45} {metrics.makespan_seconds:10.1f} s  tail {metrics.tail_seconds:8.1f} s  "
            f"idle {metrics.idle_gpu_fraction:.2f}"
        )
    return 0
