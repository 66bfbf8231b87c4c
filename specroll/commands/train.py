"""`specroll train`: GRPO with specroll rollouts, in a run directory OUT:

    OUT/metrics.jsonl   one line per step (OUT/metrics.png plots it)
    OUT/train_state/    the training state every --save-every steps and at the end: `--resume OUT` goes on
    OUT/checkpoint/     the final policy, which --model loads
    OUT/draft-head/     with --online-head, the draft head as trained (born with the run where the
                        model has none), which --draft-head loads

A new run refuses an OUT that holds a run: nothing is overwritten or deleted unless --resume asks.
"""

from __future__ import annotations

import argparse
from dataclasses import fields
from pathlib import Path

from specroll.commands.rollout import FLAG_FIELDS, add_rollout_arguments, config_from_args

DEFAULT_OUT = Path("runs/train")
HEAD_DIR = "draft-head"  # OUT's online head


RESUME_HELP = (
    "go on with the run in DIR from its latest training state; flags not given keep the run's values, "
    "--steps may extend it"
)


def register(parser: argparse.ArgumentParser) -> None:
    """Add this command's arguments to its parser and set `func`."""
    add_rollout_arguments(parser)
    parser.set_defaults(num_prompts=16, n=8)
    parser.add_argument("--speculate", default="on", help="off | on (default drafter) | a drafter's name")
    _add_grpo_arguments(parser)
    _add_online_head_arguments(parser)
    _add_run_arguments(parser)
    parser.set_defaults(func=run)


def _add_grpo_arguments(parser: argparse.ArgumentParser) -> None:
    """The training's steps, problems and GRPO's settings, and what it measures beside them."""
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument(
        "--dataset-size",
        type=int,
        default=0,
        help="problems drawn once and visited epoch by epoch (default: --num-prompts, so every "
        "step prompts every problem)",
    )
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--clip-eps", type=float, default=0.2)
    parser.add_argument(
        "--kl-coef", type=float, default=0.0, help="KL penalty to the initial policy (0: none)"
    )
    parser.add_argument("--micro-batch-size", type=int, default=8)
    parser.add_argument(
        "--shadow-plain",
        action="store_true",
        help="also run every step's rollout without speculation: its time, and whether it matched",
    )
    parser.add_argument(
        "--track-drift",
        action="store_true",
        help="keep the initial policy and report each step's KL to it on the rollout's tokens",
    )


def _add_online_head_arguments(parser: argparse.ArgumentParser) -> None:
    """Training the draft head during the run."""
    parser.add_argument(
        "--online-head",
        action="store_true",
        help="train the draft head on the rollouts' hidden states during the run (a spot trainer on "
        "the core the engine leaves idle); a model with no head gets a new one, trained from the "
        "first step and saved in OUT/draft-head",
    )
    parser.add_argument(
        "--head-between-steps",
        type=int,
        default=0,
        metavar="N",
        help="with --online-head: no training during the rollout (give the engine every core); N head "
        "updates once each rollout is done, drafted with from the next one",
    )
    parser.add_argument("--head-lr", type=float, default=3e-4)
    parser.add_argument(
        "--head-reward-weight",
        type=float,
        default=0.0,
        help="ReSpec: a response's head loss weighs 1 + this x its reward",
    )


def _add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The run's directory, its training states, and resuming it."""
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"the run's directory (default {DEFAULT_OUT}); it must not hold a run already",
    )
    parser.add_argument(
        "--save-every",
        type=int,
        default=1,
        metavar="N",
        help="write the training state (weights, optimizer, step) every N steps; 0: at the end only",
    )
    parser.add_argument(
        "--keep-states", type=int, default=1, metavar="K", help="training states kept (the newest)"
    )
    parser.add_argument("--resume", type=Path, metavar="DIR", help=RESUME_HELP)


def run(args: argparse.Namespace) -> int:
    from specroll.train.checkpointing import save_state
    from specroll.train.metrics_log import append_metrics, plot_metrics, read_metrics
    from specroll.train.weights import save_checkpoint

    if args.save_every < 0 or args.keep_states < 1:
        raise ValueError(
            f"need --save-every >= 0 and --keep-states >= 1, got {args.save_every}, {args.keep_states}"
        )
    out, trainer = _resumed(args) if args.resume is not None else _fresh(args)
    metrics_path = out / "metrics.jsonl"
    steps = trainer.config.steps

    def report(m) -> None:
        append_metrics(metrics_path, m)
        plain = (
            ""
            if m.plain_rollout_seconds is None
            else f"  plain {m.plain_rollout_seconds:.2f}s same={m.same_as_plain}"
        )
        print(
            f"step {m.step}: reward {m.reward_mean:.3f}  rollout {m.rollout_seconds:.2f}s{plain}  "
            f"train {m.train_seconds:.2f}s  tokens {m.output_tokens}  "
            f"accept {m.mean_acceptance_length:.2f}  weights {m.weights_sha256[:12]}{_extra(m)}",
            flush=True,
        )
        if args.save_every and trainer.next_step % args.save_every == 0 and trainer.next_step < steps:
            save_state(out, trainer.state(), args.keep_states)
            _save_head(trainer, out)

    trainer.run(report)
    trainer.close()
    state_dir = save_state(out, trainer.state(), args.keep_states)  # also at the end: --steps may extend it
    plot = plot_metrics(read_metrics(metrics_path), out / "metrics.png")
    checkpoint = save_checkpoint(trainer.policy, trainer.rollout.model_dir, out / "checkpoint")
    head = _save_head(trainer, out)
    head_line = "" if head is None else f"; the draft head in {head} (--draft-head {head})"
    print(f"wrote {metrics_path}, {plot}, {state_dir} and {checkpoint} (--model {checkpoint}){head_line}")
    return 0


def _save_head(trainer, out: Path) -> Path | None:
    """The online head as trained so far, in OUT/draft-head; None without one."""
    return None if trainer.online_head is None else trainer.online_head.save(out / HEAD_DIR)


def _extra(m) -> str:
    drift = "" if m.drift_kl is None else f"  drift {m.drift_kl:.4f}"
    head = f"  head updates {m.head_updates} swaps {m.head_swaps}" if m.head_updates else ""
    head += f" ({m.head_seconds:.1f}s between steps)" if m.head_seconds else ""
    return drift + head


def _train_config(args: argparse.Namespace):
    """The run the flags describe: the rollout's flags, and those named as `GRPOConfig`'s fields."""
    from specroll.train.grpo_config import GRPOConfig

    names = {f.name for f in fields(GRPOConfig)} - {"rollout"}
    return GRPOConfig(config_from_args(args), **{name: v for name, v in vars(args).items() if name in names})


def _fresh(args: argparse.Namespace):
    """A new run in --out, which must hold none."""
    from specroll.train.checkpointing import STATE_DIR
    from specroll.train.trainer import GRPOTrainer

    config = _train_config(args)  # bad flags are named before anything is built
    out = args.out or DEFAULT_OUT
    run_files = ("metrics.jsonl", "metrics.png", "checkpoint", STATE_DIR)
    found = [name for name in run_files if (out / name).exists()]
    if found:
        raise ValueError(
            f"{out} already holds a run ({', '.join(found)}): pass --resume {out} to go on "
            f"with it, or another --out"
        )
    out.mkdir(parents=True, exist_ok=True)
    return out, GRPOTrainer(config, head_dir=out / HEAD_DIR)


def _resumed(args: argparse.Namespace):
    """The run in --resume DIR, restored from its latest training state; metrics.jsonl loses the lines
    of the steps that are redone (those after the state)."""
    from specroll.train.checkpointing import latest_state_dir, load_state
    from specroll.train.metrics_log import keep_metrics_before
    from specroll.train.trainer import GRPOTrainer

    out = args.resume
    if args.out is not None and args.out.resolve() != out.resolve():
        raise ValueError(f"--resume {out} goes on in {out}: leave --out out, or give the same directory")
    state_dir = latest_state_dir(out)
    if state_dir is None:
        raise FileNotFoundError(f"{out} holds no training state to resume (no {out / 'train_state'}/step-*)")
    state = load_state(state_dir)
    config = _resumed_config(args, state.config)
    if config.steps <= state.next_step:
        raise ValueError(
            f"the run in {out} has done {state.next_step} steps: pass --steps above that to go on"
        )
    trainer = GRPOTrainer(config, head_dir=out / HEAD_DIR)
    trainer.restore(state)
    dropped = keep_metrics_before(out / "metrics.jsonl", state.next_step)
    redone = f"; dropped {dropped} metrics lines of steps to redo" if dropped else ""
    print(f"resuming {out} at step {state.next_step} of {config.steps} from {state_dir}{redone}", flush=True)
    return out, trainer


def _given_flags(args: argparse.Namespace) -> set[str]:
    """The flags the command line gives, at their default value too (argparse fills in the others)."""
    parser = argparse.ArgumentParser()
    register(parser)
    not_given = object()
    probe = argparse.Namespace(**{name: not_given for name in vars(args)})
    if not hasattr(args, "argv"):
        raise ValueError("--resume needs the command line's flags (args.argv, as `specroll.cli.main` sets)")
    argv = list(args.argv)
    parser.parse_args(argv[argv.index("train") + 1 :] if "train" in argv else argv, namespace=probe)
    return {name for name, value in vars(probe).items() if value is not not_given}


def _resumed_config(args: argparse.Namespace, saved):
    """The run's saved config with what the command line gives: a flag not given keeps the run's value
    (a flag given at its default value is given); a flag that would change the run's future
    (`run_config.future_changes`) is refused."""
    from specroll.train.run_config import config_from_dict, config_to_dict, describe_changes, future_changes

    given = config_to_dict(_train_config(args))
    given_fields = {FLAG_FIELDS.get(flag, flag) for flag in _given_flags(args)} & set(given)
    values = config_to_dict(saved)
    values.update({name: given[name] for name in given_fields})
    config = config_from_dict(values)
    changes = future_changes(saved, config)
    if changes:
        raise ValueError(
            f"cannot resume {args.resume}: {describe_changes(saved, config, changes)} would "
            f"change the run's future (only --steps and speed-only flags may change)"
        )
    return config
