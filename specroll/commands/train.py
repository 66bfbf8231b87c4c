"""`specroll train`: GRPO with specroll rollouts; writes OUT/metrics.jsonl, OUT/metrics.png and OUT/checkpoint."""

from __future__ import annotations

import argparse
from pathlib import Path

from specroll.commands.rollout import add_rollout_arguments, config_from_args


def register(parser: argparse.ArgumentParser) -> None:
    """Add this command's arguments to its parser and set `func`."""
    add_rollout_arguments(parser)
    parser.set_defaults(num_prompts=16, n=8)
    parser.add_argument("--speculate", default="on", help="off | on (default drafter) | a drafter's name")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--dataset-size", type=int, default=0,
                        help="problems drawn once and visited epoch by epoch (default: --num-prompts, so every "
                             "step prompts every problem)")
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--clip-eps", type=float, default=0.2)
    parser.add_argument("--kl-coef", type=float, default=0.0, help="KL penalty to the initial policy (0: none)")
    parser.add_argument("--micro-batch-size", type=int, default=8)
    parser.add_argument("--shadow-plain", action="store_true",
                        help="also run every step's rollout without speculation: its time, and whether it matched")
    parser.add_argument("--out", type=Path, default=Path("runs/train"))
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from specroll.train.metrics import append_metrics, plot_metrics, read_metrics
    from specroll.train.trainer import GRPOTrainer, TrainConfig
    from specroll.train.weights import save_checkpoint

    config = TrainConfig(config_from_args(args), steps=args.steps, dataset_size=args.dataset_size, lr=args.lr,
                         clip_eps=args.clip_eps, kl_coef=args.kl_coef, micro_batch_size=args.micro_batch_size,
                         shadow_plain=args.shadow_plain)
    args.out.mkdir(parents=True, exist_ok=True)
    metrics_path = args.out / "metrics.jsonl"
    metrics_path.unlink(missing_ok=True)
    trainer = GRPOTrainer(config)

    def report(m) -> None:
        append_metrics(metrics_path, m)
        plain = "" if m.plain_rollout_seconds is None else f"  plain {m.plain_rollout_seconds:.2f}s same={m.same_as_plain}"
        print(f"step {m.step}: reward {m.reward_mean:.3f}  rollout {m.rollout_seconds:.2f}s{plain}  train {m.train_seconds:.2f}s  "
              f"tokens {m.output_tokens}  accept {m.mean_acceptance_length:.2f}  weights {m.weights_sha256[:12]}",
              flush=True)

    trainer.run(report)
    plot = plot_metrics(read_metrics(metrics_path), args.out / "metrics.png")
    checkpoint = save_checkpoint(trainer.policy, trainer.rollout.model_dir, args.out / "checkpoint")
    print(f"wrote {metrics_path}, {plot} and {checkpoint} (--model {checkpoint})")
    return 0
