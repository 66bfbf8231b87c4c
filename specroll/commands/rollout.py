"""`specroll rollout`: run one rollout with a live progress bar, write JSONL, print a summary."""

from __future__ import annotations

import argparse
import time
from dataclasses import fields
from contextlib import nullcontext
from pathlib import Path

from specroll.commands.progress import ProgressLines, add_progress_flag
from specroll.commands.tables import TextTable, print_table

from specroll.cluster.multi_worker import ClusterConfig
from specroll.engine.choices import EngineChoices
from specroll.engine.spec import EngineSpec
from specroll.engine_config import VERIFY_MODES, EngineConfig
from specroll.model.catalog import resolve_model_dir
from specroll.model.device import (
    DEVICES,
    DTYPE_CHOICES,
    GRAPH_CHOICES,
    resolve_cuda_graphs,
    resolve_device,
    resolve_dtype,
)
from specroll.sampling_rules import SAMPLING_RULES
from specroll.placement import is_batch_invariant
from specroll.rollout import RolloutConfig, RolloutResult, load_problems, run_rollout
from specroll.scheduling.dispatch import DISPATCHES
from specroll.tasks import known_rewards, known_tasks

DEFAULTS = RolloutConfig()


def add_rollout_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags shared by `rollout` and `bench`: the workload and the engine."""
    add_workload_arguments(parser)
    add_engine_arguments(parser)


def add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    """What a rollout samples: the prompts and the sampling settings."""
    parser.add_argument(
        "--task", default=DEFAULTS.task, help=f"a registered task ({', '.join(known_tasks())})"
    )
    parser.add_argument(
        "--prompts",
        type=Path,
        default=None,
        metavar="FILE.jsonl",
        help="prompts from a JSONL file, one object per line, in place of --task",
    )
    parser.add_argument(
        "--prompt-field", default=DEFAULTS.prompt_field, help="the --prompts field holding the prompt"
    )
    parser.add_argument(
        "--answer-field",
        default=DEFAULTS.answer_field,
        help="the --prompts field holding the answer (a record without it gets no reward)",
    )
    parser.add_argument(
        "--reward",
        default=DEFAULTS.reward_name,
        help=f"how --prompts responses are scored against the answer ({', '.join(known_rewards())})",
    )
    parser.add_argument("--num-prompts", type=int, default=DEFAULTS.num_prompts)
    parser.add_argument("--n", type=int, default=DEFAULTS.n, help="samples per prompt (group size)")
    parser.add_argument("--max-tokens", type=int, default=DEFAULTS.max_tokens)
    parser.add_argument("--temperature", type=float, default=DEFAULTS.temperature)
    parser.add_argument("--top-k", type=int, default=DEFAULTS.top_k)
    parser.add_argument("--top-p", type=float, default=DEFAULTS.top_p)


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """How the engine runs: the checkpoint, drafting, verification, batch, numerics, device and cost
    model (also `specroll serve`'s)."""
    parser.add_argument(
        "--model", type=str, default=DEFAULTS.model_dir, help="checkpoint directory or model name"
    )
    parser.add_argument("--draft-model", type=str, default=DEFAULTS.draft_model_dir)
    parser.add_argument(
        "--draft-head",
        type=Path,
        default=None,
        help="a draft head trained for --model (`specroll head train`; default: <model>/draft-head)",
    )
    parser.add_argument("--seed", type=int, default=DEFAULTS.engine.seed)
    parser.add_argument("--policy", default=DEFAULTS.policy, help="speculation policy (none, fixed-K, ...)")
    parser.add_argument("--verify", choices=VERIFY_MODES, default=DEFAULTS.engine.verify)
    parser.add_argument(
        "--sampling-rule",
        choices=SAMPLING_RULES,
        default=DEFAULTS.engine.sampling_rule,
        help="exact mode's draw: inverse-cdf (one uniform, vocabulary order) or gumbel (Gumbel-max over "
        "the top tokens: coupled drafts match the target's samples more often); part of what fixes "
        "the tokens, like --seed",
    )
    parser.add_argument("--max-batch-size", type=int, default=DEFAULTS.engine.max_batch_size)
    parser.add_argument("--max-draft", type=int, default=DEFAULTS.engine.max_draft)
    parser.add_argument("--threads", type=int, default=DEFAULTS.threads, help="CPU threads (0 = auto)")
    parser.add_argument(
        "--cost-model",
        type=Path,
        default=DEFAULTS.cost_model,
        metavar="FILE.json",
        help="a `specroll profile` fit measured on this --device, for the speculation policy and "
        "bench's predictions (default: profiles/<model dir name>.cost.json where one of the device is there)",
    )
    parser.add_argument(
        "--fast-numerics",
        action="store_true",
        help="skip batch-invariant numerics: faster, but exact-mode tokens may then depend on "
        "the batch on large vocabularies (always so off the CPU, where they are not proven)",
    )
    add_device_arguments(parser)


def add_device_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--device",
        choices=DEVICES,
        default="auto",
        help="where the model runs (auto: cuda where torch sees a GPU, else cpu)",
    )
    parser.add_argument(
        "--dtype",
        choices=DTYPE_CHOICES,
        default="auto",
        help="the model's precision (auto: bfloat16 where the device multiplies it natively: a GPU, "
        "or a CPU with AVX512-BF16 or AMX-BF16 for a model of 50 M parameters or more; else float32)",
    )
    parser.add_argument(
        "--cuda-graphs",
        choices=GRAPH_CHOICES,
        default="auto",
        help="replay decode and verification forwards as CUDA graphs at bucketed shapes (auto: on "
        "CUDA; on the CPU, on runs the same static-shape forwards eagerly)",
    )
    parser.add_argument(
        "--overlap",
        choices=("on", "off"),
        default="on",
        help="with CUDA graphs and no drafter, launch each decode step before the previous one is "
        "read back (the host's work beside the device's; tokens unchanged)",
    )


def flag_fields() -> dict[str, str]:
    """The flags (as argparse names them) whose field, of `RolloutConfig` or a config it holds (flat:
    `RolloutConfig.from_flat`), is named otherwise: each such field names its flag in its metadata
    (`flag`; `inverted` where the flag asks for the field's negation, as --fast-numerics does). Every
    other flag a command has names its field, or none."""
    kinds = (RolloutConfig, EngineConfig, ClusterConfig)
    return {f.metadata["flag"]: f.name for kind in kinds for f in fields(kind) if "flag" in f.metadata}


FLAG_FIELDS = flag_fields()


def config_from_args(args: argparse.Namespace, head_is_output: bool = False, **overrides) -> RolloutConfig:
    """The rollout the flags describe. A --draft-head that holds no head is refused, unless the
    command saves a head there (`head_is_output`: `head train`)."""
    values = flag_values(args, RolloutConfig.flat_names(), head_is_output)
    return RolloutConfig.from_flat({**values, **overrides})


def engine_spec_from_args(
    args: argparse.Namespace, max_tokens: int, head_is_output: bool = False
) -> EngineSpec:
    """The engine the flags describe, its responses at most `max_tokens` long: the one way a command
    turns flags into an engine (`rollout` and `bench` through their `RolloutConfig`, whose
    `engine_spec` resolves the same `EngineChoices`; `serve`, which has no workload, directly)."""
    values = flag_values(args, _names(EngineChoices) | _names(EngineConfig), head_is_output)
    engine = EngineConfig(**{k: v for k, v in values.items() if k in _names(EngineConfig)})
    choices = {k: v for k, v in values.items() if k in _names(EngineChoices)}
    return EngineChoices(engine=engine, **choices).spec(max_tokens)


def _names(kind: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(kind))


def flag_values(args: argparse.Namespace, names: frozenset[str], head_is_output: bool = False) -> dict:
    """The flags' values by the field names they fill (of `names`), those that need resolving resolved."""
    if getattr(args, "draft_head", None) is not None and not head_is_output:
        check_head_dir(args.draft_head)
    device = resolve_device(args.device)
    model_dir = resolve_model_dir(args.model)
    named = {FLAG_FIELDS.get(flag, flag): value for flag, value in vars(args).items()}
    values = {name: value for name, value in named.items() if name in names}
    return values | dict(  # the flags whose value is resolved
        model_dir=model_dir,
        draft_model_dir=resolve_model_dir(args.draft_model),
        device=device,
        dtype=_dtype(args.dtype, device, model_dir),
        batch_invariant=is_batch_invariant(device, args.fast_numerics),
        cuda_graphs=resolve_cuda_graphs(args.cuda_graphs, device),
        overlap=args.overlap == "on",
    )


def _dtype(name: str, device: str, model_dir: Path) -> str:
    """`--dtype` resolved for the model (`resolve_dtype`); its config is read only for auto."""
    if name != "auto":
        return resolve_dtype(name, device)
    from specroll.model.loader import read_config

    return resolve_dtype(name, device, read_config(model_dir).num_layer_parameters)


def check_head_dir(directory: Path) -> None:
    from specroll.drafting.head_files import read_head_config

    if read_head_config(directory) is None:
        raise ValueError(
            f"--draft-head {directory} holds no draft head (no config.json of a head saved by "
            "`specroll head train`)"
        )


def add_worker_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of a rollout over several engines (`specroll.cluster`), each defaulting to its
    `ClusterConfig` field's default."""

    def flag(name: str, field: str, help: str, **kind) -> None:
        parser.add_argument(name, default=getattr(DEFAULTS.cluster, field), help=help, **kind)

    flag(
        "--workers",
        "num_workers",
        "engines, each its own process on Ray (local, loopback) when more than one",
        type=int,
    )
    flag(
        "--dispatch",
        "dispatch",
        "with --workers: static groups per worker (veRL), divided rollout (Seer: "
        "chunks to the least-loaded worker) or context-aware (divided, probes first, then longest first)",
        choices=DISPATCHES,
    )
    flag(
        "--chunk-tokens", "chunk_tokens", "divided dispatch: tokens per chunk (0 = max-tokens / 4)", type=int
    )
    flag(
        "--fastest-of-n",
        "fastest_of_n",
        "with --workers: once nothing waits, idle workers run copies of "
        "the stragglers (SpecActor); each request ends with its first copy (same tokens in exact mode)",
        action="store_true",
    )
    flag(
        "--worker-backend",
        "backend",
        "ray: one process per worker; inline: every worker in this process, in turn",
        choices=("ray", "inline"),
    )


def register(parser: argparse.ArgumentParser) -> None:
    """Add this command's arguments to its parser and set `func`."""
    add_rollout_arguments(parser)
    parser.add_argument("--speculate", default="on", help="off | on (default drafter) | a drafter's name")
    add_worker_arguments(parser)
    parser.add_argument("--out", type=Path, default=Path("rollout.jsonl"))
    parser.add_argument(
        "--telemetry",
        default=None,
        metavar="FILE.jsonl|none",
        help="one JSON line per forward: its batch, each request's drafted and accepted tokens, the "
        "drafter and times (default: OUT with .telemetry.jsonl; none: not written)",
    )
    add_progress_flag(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    result = run_with_progress(config, show=not args.no_progress)
    save_rollout(result, config, args.out)
    if args.telemetry != "none":
        result.write_telemetry(args.telemetry or args.out.with_suffix(".telemetry.jsonl"))
    print_summary(result, config, args.out)
    print(speed_hint(config))
    return 0


def speed_hint(config: RolloutConfig) -> str:
    """Where the speed-up is measured: one rollout has no plain run beside it to compare with."""
    flags = "with the same flags (on a shared machine, --repeats 3)"
    if config.speculate == "off":
        return f"what speculation would gain here: `specroll bench --systems plain,speculative` {flags}"
    return (
        "speculation changes the speed, never the tokens; its speed-up over plain decoding: "
        f"`specroll bench --systems plain,speculative` {flags}"
    )


def save_rollout(result: RolloutResult, config: RolloutConfig, path: Path) -> None:
    """The records as JSONL, and beside them what made them (`specroll.provenance`)."""
    from specroll.provenance import RolloutProvenance

    result.write_jsonl(path)
    RolloutProvenance.of(config).write_beside(path)


def run_with_progress(config: RolloutConfig, show: bool = True) -> RolloutResult:
    """The rollout, showing its progress: a bar on a terminal, else a line every interval
    (`commands.progress`)."""
    total = len(load_problems(config)[1]) * config.n  # a prompts file may hold fewer than num_prompts
    progress = ProgressLines("rollout", "requests") if show else None
    if progress is not None:  # loading the model and the first prefills take a while on a CPU
        progress(0, total, f"loading {Path(config.model_dir).name}, then the first prefills")

    def update(engine, finished: int, tokens: int) -> None:
        if progress is not None:
            elapsed = time.perf_counter() - progress.started
            detail = (
                f"{engine.num_running} running, {tokens / max(elapsed, 1e-9):.0f} tokens/s, "
                f"{engine.telemetry.mean_acceptance_length:.2f} tokens a forward"
            )
            progress(finished, total, detail)

    def update_workers(finished: int, tokens: int) -> None:
        if progress is not None:
            elapsed = time.perf_counter() - progress.started
            progress(
                finished,
                total,
                f"{config.cluster.num_workers} workers, {tokens / max(elapsed, 1e-9):.0f} tokens/s",
            )

    with nullcontext() if progress is None else progress.kept_alive():  # the prefills take minutes
        result = run_rollout(config, update, worker_progress=update_workers)
    if progress is not None:
        progress(total, total, "done")
    return result


def print_summary(result: RolloutResult, config: RolloutConfig, out: Path | None = None) -> None:
    s = result.summary
    table = TextTable(
        f"rollout: {s.num_requests // config.n} prompts x {config.n} samples, speculate={config.speculate} "
        f"(drafter {config.drafter_name or 'none'}), policy={config.policy}, verify={config.engine.verify}, "
        f"dtype={config.engine.dtype}",
        ["metric", "value"],
    )
    for name, value in [
        ("makespan (s)", f"{s.makespan_seconds:.2f}"),
        ("output tokens", f"{s.output_tokens}"),
        ("output tokens/s", f"{s.tokens_per_second:.1f}"),
        ("tokens a forward (per request: accepted drafts + 1)", f"{s.mean_acceptance_length:.2f}"),
        ("forward passes", f"{s.forward_passes}"),
        ("time on last 10% of requests (s)", f"{s.tail_seconds:.2f}"),
        ("mean reward", f"{s.mean_reward:.3f}"),
    ]:
        table.add_row(name, value)
    if s.graphs_recorded:
        table.add_row("CUDA graphs recorded (s)", f"{s.graphs_recorded} ({s.graph_recording_seconds:.2f})")
    if result.cluster is not None:
        c = result.cluster
        table.add_row("workers, dispatch", f"{c['workers']}, {c['dispatch']}")
        table.add_row("re-prefills (context tokens)", f"{c['reprefills']} ({c['reprefill_tokens']:.0f})")
        if c["copies"]:
            table.add_row("Fastest-of-N copies (tokens dropped)", f"{c['copies']} ({c['dropped_tokens']})")
        if c["lost_workers"]:
            table.add_row("workers lost (their requests re-dispatched)", str(c["lost_workers"]))
    if result.cpu is not None:
        table.add_row("CPU threads and numerics", result.cpu)
    errors = sum(1 for r in result.records if r.error)
    if errors:
        table.add_row("requests refused", str(errors))
    if out is not None:
        table.caption = f"wrote {len(result.records)} records to {out}"
    print_table(table)
