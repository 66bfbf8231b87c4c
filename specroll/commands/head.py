"""`specroll head train`: warm-start a draft head for a checkpoint, from a rollout JSONL or a rollout
it runs, and save it where `--speculate on` finds it (`<checkpoint>/draft-head` by default).
`specroll head eval`: how often its drafts would equal the target's samples, by coupling and depth.
`specroll head replay`: the tokens a forward its chains and trees would give on a recorded rollout."""

from __future__ import annotations

import argparse
import shutil
import time
from contextlib import nullcontext
from dataclasses import replace
from itertools import count
from pathlib import Path

from specroll.commands.progress import ProgressLines, add_progress_flag
from specroll.commands.rollout import add_rollout_arguments, config_from_args
from specroll.drafting.draft_tree import TreeShape
from specroll.drafting.head_files import TRAINING_DATA_FILE, read_head_config
from specroll.head.training import PRECISIONS, HeadTrainConfig
from specroll.head.warm_start import EPOCHS, WarmStartConfig, WarmStartResult
from specroll.provenance import (
    REPLAY_FIELDS,
    TRAINING_FIELDS,
    RolloutProvenance,
    check_provenance,
    provenance_path,
)


def register(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True)
    _register_train(actions.add_parser("train", help="train a draft head for --model"))
    _register_eval(
        actions.add_parser("eval", help="how often a head's drafts would match the target, by coupling")
    )
    _register_replay(
        actions.add_parser(
            "replay",
            help="tokens a forward of the head's chains and trees on a recorded rollout, without the target",
        )
    )


def _register_train(train: argparse.ArgumentParser) -> None:
    add_rollout_arguments(train)
    _add_training_data_arguments(train)
    _add_shape_arguments(train)
    add_progress_flag(train)
    # a head in one command within minutes on a CPU: 192 responses of up to 256 tokens (SmolLM2 GSM8K:
    # the rollout, features and 20 epochs in 4.9 minutes on 2 cores, held-out overlap 0.48; BENCHMARKS.md)
    train.set_defaults(func=run_train, num_prompts=48, n=4, max_tokens=256, max_batch_size=128)


def _add_training_data_arguments(train: argparse.ArgumentParser) -> None:
    """What the head learns from and where it goes, and the training's two limits."""
    train.add_argument(
        "--rollouts",
        type=Path,
        default=None,
        metavar="FILE.jsonl",
        help="responses to learn from, written by `specroll rollout` with the same workload flags "
        "(default: run that rollout now, without speculation)",
    )
    train.add_argument(
        "--out",
        type=Path,
        default=None,
        help="where to save the head (default: --draft-head, else <checkpoint>/draft-head)",
    )
    train.add_argument(
        "--force",
        action="store_true",
        help="replace a head already saved there; the old one is moved aside to <out>.previous[-N]",
    )
    train.add_argument("--minutes", type=float, default=5.0, help="training budget (> 0)")
    train.add_argument(
        "--max-epochs",
        type=int,
        default=WarmStartConfig.max_epochs,
        help="the second limit: training also ends after this many passes over the responses, where "
        "that comes before --minutes (the output says which limit ended it)",
    )
    train.add_argument("--lr", type=float, default=1e-3)
    train.add_argument(
        "--exclude-seed",
        type=int,
        default=None,
        help="leave out the problems a workload with this seed (and --exclude-prompts) draws, "
        "e.g. a benchmark's, so that the head is measured on problems it never saw",
    )
    train.add_argument("--exclude-prompts", type=int, default=8)
    train.add_argument(
        "--features-cache",
        type=Path,
        default=None,
        metavar="FILE.pt",
        help="keep the teacher-forced features here and reuse them on the next run with the same "
        "checkpoint, prompts and responses (a cache with more layers serves a head with fewer)",
    )


def _add_shape_arguments(train: argparse.ArgumentParser) -> None:
    """The head's shape and how it trains."""
    train.add_argument(
        "--depth",
        type=int,
        default=None,
        help="draft depth the training unrolls (default: by device, 1 on a CPU, 3 on a GPU; "
        "--num-blocks and --draft-vocab too, see specroll/head/shape.py)",
    )
    train.add_argument(
        "--acceptance-weight",
        type=float,
        default=HeadTrainConfig.acceptance_weight,
        help="weight of the Gumbel-max mismatch rate beside the cross-entropy (0: cross-entropy alone)",
    )
    train.add_argument(
        "--draft-vocab",
        type=int,
        default=None,
        help="tokens the head can propose (default: 4096 on a CPU, 8192 on a GPU)",
    )
    train.add_argument(
        "--num-blocks",
        type=int,
        default=None,
        help="residual SwiGLU blocks after the fusion, fewer: faster (default: 1 on a CPU, 2 on a GPU)",
    )
    train.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="auto",
        help="the training's matmuls: bf16 (weights and optimiser stay fp32), fp32, or auto: bf16 where "
        "the device multiplies it natively (a GPU with bf16, a CPU with AVX512-BF16 or AMX)",
    )
    train.add_argument(
        "--feature-layers",
        default="auto",
        metavar="auto|none|I,J,...",
        help="the target's decoder layers whose outputs the head fuses with the final hidden state "
        "(EAGLE-3); auto: a low and a middle one (default; it beat the final state alone in a "
        "paired measurement, BENCHMARKS.md); none: the final hidden state alone",
    )


def _register_eval(evaluate: argparse.ArgumentParser) -> None:
    add_rollout_arguments(evaluate)
    evaluate.add_argument("--rollouts", type=Path, required=True, metavar="FILE.jsonl")
    _add_head_alias(evaluate)
    evaluate.add_argument("--depth", type=int, default=3, help="draft depths to measure")
    add_progress_flag(evaluate)
    evaluate.set_defaults(func=run_eval)


def _register_replay(again: argparse.ArgumentParser) -> None:
    add_rollout_arguments(again)
    again.add_argument(
        "--rollouts",
        type=Path,
        required=True,
        metavar="FILE.jsonl",
        help="recorded in exact mode with the same workload flags, --seed and --sampling-rule",
    )
    _add_head_alias(again)
    again.add_argument("--chains", default="1,2,4", help="comma-separated chain budgets (draft tokens)")
    again.add_argument("--trees", default="8,16,32", help="comma-separated tree budgets (nodes)")
    shape = TreeShape()
    again.add_argument("--tree-depth", type=int, default=shape.depth)
    again.add_argument(
        "--tree-width", type=int, default=shape.width, help="candidates drawn at each expanded node"
    )
    again.add_argument("--tree-beam", type=int, default=shape.beam, help="nodes expanded at each depth")
    add_progress_flag(again)
    again.set_defaults(func=run_replay)


def _add_head_alias(parser: argparse.ArgumentParser) -> None:
    """`--head DIR`, the older spelling of `--draft-head DIR`: the same flag, not listed twice."""
    parser.add_argument("--head", dest="draft_head", type=Path, help=argparse.SUPPRESS)


def _use_threads(config) -> None:
    """torch's threads for a command that runs the target outside an engine: --threads, 0 leaving
    torch's own choice."""
    import torch

    torch.set_num_threads(config.threads or torch.get_num_threads())


def _progress(args: argparse.Namespace, label: str, unit: str) -> ProgressLines | None:
    return None if args.no_progress else ProgressLines(label, unit)


def _kept_alive(lines: ProgressLines | None):
    """`lines.kept_alive()`: a line every interval however long one unit of work takes."""
    return nullcontext() if lines is None else lines.kept_alive()


def _teacher_forced(args: argparse.Namespace, runner, data, temperature: float):
    """The target's features along the responses (`head.features.teacher_forced`), with progress."""
    from specroll.head.features import teacher_forced

    lines = _progress(args, "features", "responses")
    if lines is not None:
        lines(0, len(data.responses), "teacher-forced forwards of the target")
    with _kept_alive(lines):
        return teacher_forced(runner, data.prompts, data.responses, temperature, progress=lines)


def run_train(args: argparse.Namespace) -> int:
    """`head train`: the settings checked first, then the responses, the target's features along
    them, the warm start and the saved head."""
    if not args.minutes > 0:
        raise ValueError(
            f"--minutes must be positive, got {args.minutes}: no training leaves the head untrained"
        )
    config = config_from_args(args, speculate="off", head_is_output=True)
    out = head_destination(args.out, args.draft_head, config.head_dir, args.force)
    warm = _warm_start_config(args, config)  # checked before the rollout and the features, the slow part
    _use_threads(config)
    rollouts, data = _training_data(args, config)
    runner, sequences, layers = _features(args, config, data)
    result = _warm_started(args, config, runner, sequences, replace(warm, feature_layers=layers))
    _save(args, result, out, rollouts)
    return 0


def _warm_start_config(args: argparse.Namespace, config) -> WarmStartConfig:
    """The training's settings: the flags, and a head shape chosen for the device it drafts on."""
    from specroll.head.shape import chosen_shape

    shape = chosen_shape(config.engine.device, args.depth, args.num_blocks, args.draft_vocab)
    warm = WarmStartConfig(
        seconds=args.minutes * 60,
        max_epochs=args.max_epochs,
        draft_vocab_size=shape.draft_vocab_size,
        num_blocks=shape.num_blocks,
        train=HeadTrainConfig(
            depth=shape.depth,
            lr=args.lr,
            acceptance_weight=args.acceptance_weight,
            seed=config.engine.seed,
            precision=args.precision,
        ),
    )
    print(f"head shape: {shape.describe()} (for drafting on {config.engine.device})")
    return warm


def _training_data(args: argparse.Namespace, config):
    """The rollout file (--rollouts, checked to match the workload, else one run now) and its
    responses, less the problems --exclude-seed draws."""
    from specroll.commands.head_data import read_responses
    from specroll.rollout import load_problems

    if args.rollouts is not None:
        check_provenance(args.rollouts, RolloutProvenance.of(config), TRAINING_FIELDS)
    rollouts = args.rollouts or _run_rollout(config, args)
    excluded = frozenset()
    if args.exclude_seed is not None:
        held = replace(config, num_prompts=args.exclude_prompts).with_engine(seed=args.exclude_seed)
        excluded = frozenset(load_problems(held)[1])
    data = read_responses(rollouts, config, excluded)
    if args.exclude_seed is not None:
        print(_exclusion_line(excluded, frozenset(load_problems(config)[1]), args, len(data.responses)))
    return rollouts, data


def _features(args: argparse.Namespace, config, data):
    """The target's runner, and its features along the responses: read from --features-cache where
    it holds them, else teacher-forced (and kept there)."""
    from specroll.head.feature_cache import FeatureSource, checkpoint_fingerprint, sequences_sha256
    from specroll.model.device import torch_dtype
    from specroll.model.runner import ModelRunner

    longest = max(len(p) + len(r) for p, r in zip(data.prompts, data.responses))
    runner = ModelRunner.from_pretrained(
        config.model_dir, 8, longest, torch_dtype(config.engine.dtype), config.engine.device
    )
    layers = parse_feature_layers(args.feature_layers, runner.model.config.num_layers)
    started = time.perf_counter()
    source = FeatureSource(
        checkpoint_fingerprint(config.model_dir),
        sequences_sha256(data.prompts, data.responses),
        config.temperature,
    )
    sequences, how = _cached_or_computed(args, config, data, runner, source, layers)
    positions = sum(s.num_positions for s in sequences)
    seconds = time.perf_counter() - started
    print(f"features: {len(sequences)} responses, {positions} positions {how} in {seconds:.1f} s")
    return runner, sequences, layers


def _cached_or_computed(args: argparse.Namespace, config, data, runner, source, layers):
    """The features and how they came: read from the cache, or computed (and kept in it)."""
    from specroll.head.feature_cache import load_features, save_features

    cache = args.features_cache
    if cache is not None and cache.exists():
        return load_features(cache, source, layers, runner.model.config.hidden_size), f"read from {cache}"
    runner.use_feature_layers(layers)
    sequences = _teacher_forced(args, runner, data, config.temperature)
    if cache is None:
        return sequences, "computed"
    save_features(cache, sequences, source, layers)
    return sequences, f"computed, kept in {cache}"


def _warm_started(args: argparse.Namespace, config, runner, sequences, warm: WarmStartConfig):
    """The warm start over the features, with its progress; refused where no step ran."""
    from specroll.head.warm_start import warm_start

    lines = _progress(args, "training", "s of the budget")
    result = warm_start(
        sequences,
        runner.input_embeddings(),
        runner.lm_head_weight(),
        warm,
        None if lines is None else _progress_bar(lines, warm),
        Path(config.model_dir).name,
    )
    if lines is not None:
        lines.close()
    if result.num_steps == 0:
        raise ValueError(
            f"no training step ran in {args.minutes} minutes: nothing saved (give more --minutes)"
        )
    return result


def _save(args: argparse.Namespace, result: WarmStartResult, out: Path, rollouts: Path) -> None:
    """Save the head (moving one already there aside with --force) beside its training data's record."""
    moved = _move_aside(out) if args.force else None
    out = result.head.save(out)
    shutil.copyfile(provenance_path(rollouts), out / TRAINING_DATA_FILE)  # for `specroll models list`
    if moved is not None:
        print(f"the head that was in {out} is kept in {moved}")
    print(f"{_trained_line(result, args)}; saved {out}")
    if result.held_out is not None:
        overlap = ", ".join(f"{o:.3f}" for o in result.held_out.overlap)
        print(f"held out: loss {result.held_out.loss:.3f}, overlap with the target by depth {overlap}")


def head_destination(out: Path | None, draft_head: Path | None, default: Path, force: bool) -> Path:
    """Where `head train` saves: --out, else --draft-head, else the checkpoint's; a head already there
    is replaced only with --force (checked before the slow part, not after it)."""
    if out is not None and draft_head is not None and Path(out) != Path(draft_head):
        raise ValueError(f"--out {out} and --draft-head {draft_head} name two places: give one")
    destination = Path(out or draft_head or default)
    if read_head_config(destination) is not None and not force:
        raise ValueError(
            f"{destination} already holds a trained head: give --out DIR to save the new one elsewhere, "
            "or --force to replace it (the old one is then moved aside, not deleted)"
        )
    return destination


def _move_aside(directory: Path) -> Path | None:
    """Move the head saved in `directory` to the first free <directory>.previous[-N]; None if none."""
    if read_head_config(directory) is None:
        return None
    names = (f"{directory.name}.previous" + ("" if i == 1 else f"-{i}") for i in count(1))
    candidates = (directory.with_name(name) for name in names)
    aside = next(c for c in candidates if not c.exists())
    directory.rename(aside)
    return aside


def _exclusion_line(
    excluded: frozenset[int], ours: frozenset[int], args: argparse.Namespace, kept: int
) -> str:
    return (
        f"--exclude-seed {args.exclude_seed} (--exclude-prompts {args.exclude_prompts}) draws "
        f"{len(excluded)} problems, {len(excluded & ours)} of them among this rollout's {len(ours)}: "
        f"left out; {kept} responses remain to train on"
    )


def parse_feature_layers(text: str, num_layers: int) -> tuple[int, ...]:
    """--feature-layers: auto, none or a comma-separated list of decoder layers of the target."""
    from specroll.drafting.head_model import default_feature_layers
    from specroll.model.transformer import checked_feature_layers

    if text == "auto":
        return default_feature_layers(num_layers)
    if text == "none":
        return ()
    try:
        return checked_feature_layers(sorted({int(part) for part in text.split(",")}), num_layers)
    except ValueError as error:
        raise SystemExit(f"--feature-layers: expected auto, none or layer numbers like 1,14; {error}")


def _run_rollout(config, args: argparse.Namespace) -> Path:
    from specroll.commands.rollout import run_with_progress, save_rollout

    path = Path(config.model_dir) / "draft-head.rollout.jsonl"
    save_rollout(run_with_progress(config, show=not args.no_progress), config, path)
    print(f"rollout for the draft head written to {path}")
    return path


def _progress_bar(lines: ProgressLines, warm: WarmStartConfig):
    """The training's progress: seconds of the time budget and epochs of `max_epochs`, each its own
    limit, and the loss and overlap of the training batch (the held-out figures come at the end)."""

    def show(spent, metrics) -> None:
        overlap = " ".join(f"{o:.2f}" for o in metrics.overlap)
        epochs = f"epoch {spent.epochs:.1f} of at most {warm.max_epochs}"
        batch = f"training batch: loss {metrics.loss:.3f}, overlap {overlap}"
        lines(int(spent.seconds), int(warm.seconds), f"{epochs}, {batch}")

    return show


def _trained_line(result: WarmStartResult, args: argparse.Namespace) -> str:
    """What trained, and which of the two limits ended it."""
    line = (
        f"trained {result.num_steps} steps ({result.num_epochs:.2f} epochs over {result.num_train_positions} "
        f"positions) in {result.seconds:.0f} s"
    )
    if result.ended_by == EPOCHS:
        return f"{line}: ended by --max-epochs {args.max_epochs}, before --minutes {args.minutes:g} ran out"
    return f"{line}: ended by --minutes {args.minutes:g}"


def run_eval(args: argparse.Namespace) -> int:
    """Teacher-forced coupling rates of a saved head on a rollout's responses, by depth."""
    from specroll.head.evaluation import RATES, coupling_report
    from specroll.drafting.head_model import load_head
    from specroll.commands.head_data import read_responses
    from specroll.model.runner import ModelRunner

    config = config_from_args(args, speculate="off")
    _use_threads(config)
    check_provenance(args.rollouts, RolloutProvenance.of(config), TRAINING_FIELDS)
    data = read_responses(args.rollouts, config)
    longest = max(len(p) + len(r) for p, r in zip(data.prompts, data.responses))
    runner = ModelRunner.from_pretrained(config.model_dir, 8, longest)
    head = load_head(config.head_dir)
    runner.use_feature_layers(head.config.feature_layers)
    sequences = _teacher_forced(args, runner, data, config.temperature)
    lines = _progress(args, "coupling rates", "drafts measured")
    with _kept_alive(lines):
        reports = coupling_report(
            head,
            runner.input_embeddings(),
            runner.lm_head_weight(),
            sequences,
            args.depth,
            config.temperature,
            progress=lines,
        )
    print("| depth | positions | " + " | ".join(RATES) + " |")
    print("|---|---|" + "---|" * len(RATES))
    for r in reports:
        print(f"| {r.depth} | {r.num_positions} | " + " | ".join(f"{r.rates[k]:.3f}" for k in RATES) + " |")
    return 0


def run_replay(args: argparse.Namespace) -> int:
    """Replay a rollout through the head (`specroll.head.head_replay`) at each chain and tree budget."""
    from specroll.drafting.draft_head import DraftHeadDrafter
    from specroll.head.head_replay import ReplayedResponse, replay
    from specroll.commands.head_data import read_responses
    from specroll.model.runner import ModelRunner

    config = config_from_args(args, speculate="off")
    _use_threads(config)
    chains, trees = _budgets(args.chains, "--chains"), _budgets(args.trees, "--trees")
    shape = TreeShape(args.tree_depth, args.tree_width, args.tree_beam)
    check_provenance(args.rollouts, RolloutProvenance.of(config), REPLAY_FIELDS)
    data = read_responses(args.rollouts, config)
    if min(data.request_ids) < 0:
        raise ValueError(f"{args.rollouts}: every record needs its request_id (the noise is keyed by it)")
    longest = max(len(p) + len(r) for p, r in zip(data.prompts, data.responses))
    runner = ModelRunner.from_pretrained(
        config.model_dir, 8, longest, batch_invariant=config.engine.batch_invariant
    )
    embedding = runner.input_embeddings()
    head = DraftHeadDrafter.from_dir(config.head_dir, embedding).head  # loaded once, in its drafting dtype
    runner.use_feature_layers(head.config.feature_layers)
    sequences = _teacher_forced(args, runner, data, config.temperature)
    responses = [
        ReplayedResponse(i, tuple(p), tuple(r), s, config.max_tokens)
        for i, p, r, s in zip(data.request_ids, data.prompts, data.responses, sequences)
    ]
    print("| draft | budget | tokens a forward | request-forwards |")
    print("|---|---|---|---|")
    rule = config.engine.sampling_rule
    for kind, budgets, tree in (("chain", chains, None), ("tree", trees, shape)):
        for budget in budgets:
            drafter = DraftHeadDrafter(head, embedding, seed=config.engine.seed, rule=rule, tree=tree)
            result = replay(drafter, responses, budget, config.temperature)
            print(f"| {kind} | {budget} | {result.tokens_per_forward:.3f} | {result.rows} |")
    return 0


def _budgets(text: str, flag: str) -> list[int]:
    try:
        budgets = [int(b) for b in text.split(",") if b.strip()]
    except ValueError:
        raise ValueError(f"{flag} takes comma-separated whole numbers, got {text!r}") from None
    if any(b < 1 for b in budgets):
        raise ValueError(f"{flag} budgets must be >= 1, got {text!r}")
    return budgets
