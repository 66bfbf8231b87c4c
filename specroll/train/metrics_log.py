"""One line of `metrics.jsonl` per training step, and the plot written beside it.

The file's keys are a format of their own, short as RL training logs write them: durations in seconds
end in `_s` there (`rollout_s`, `train_s`, `sync_s`, `plain_rollout_s`), where the code's names end in
`_seconds`; `FILE_KEYS` is the one place that maps them.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class StepMetrics:
    step: int
    reward_mean: float
    rollout_seconds: float  # wall time of the step's rollout (speculative when --speculate is on)
    train_seconds: float  # the optimizer step: log-probabilities, backward, AdamW
    sync_seconds: float  # new weights copied into the running engine(s)
    output_tokens: int
    mean_acceptance_length: float  # tokens per request per verification forward (1.0: none)
    forward_passes: int
    weights_sha256: str  # of the weights after this step
    loss: float
    clip_fraction: float  # tokens whose importance ratio was clipped
    kl: float  # mean per-token KL estimate to the reference (0 without one)
    # largest |log pi_trainer - log pi_rollout| of a token before the update: 0 with batch-invariant
    # numerics (the trainer's forward is the engine's), rounding only with fast ones
    max_log_ratio: float
    num_problems: int
    accepted_per_draft: dict[str, float] = field(default_factory=dict)  # tokens accepted a draft, by drafter
    plain_rollout_seconds: float | None = None  # the same rollout without speculation (--shadow-plain)
    same_as_plain: bool | None = None  # its tokens and log-probabilities equal the speculative ones
    drift_kl: float | None = None  # KL(rollout policy || initial policy) per token (--track-drift)
    head_updates: int = 0  # online draft-head updates so far (--online-head)
    head_swaps: int = 0  # head weights swapped into the drafter so far
    head_positions: int = 0  # positions in the online head's buffer
    head_seconds: float = 0.0  # this step's head training between rollouts (--head-between-steps)


FILE_KEYS = {
    "rollout_seconds": "rollout_s",
    "train_seconds": "train_s",
    "sync_seconds": "sync_s",
    "plain_rollout_seconds": "plain_rollout_s",
}


def append_metrics(path: str | Path, metrics: StepMetrics) -> None:
    row = {FILE_KEYS.get(name, name): value for name, value in asdict(metrics).items()}
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")


def read_metrics(path: str | Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def keep_metrics_before(path: str | Path, next_step: int) -> int:
    """Drop the lines of steps >= `next_step` (a resumed run redoes them), and a last line a kill cut
    short; the file is replaced whole (written beside it, then renamed). Returns the lines dropped."""
    path = Path(path)
    if not path.exists():
        return 0
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    kept = [line for i, line in enumerate(lines) if _is_before(line, next_step, is_last=i == len(lines) - 1)]
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text("".join(line + "\n" for line in kept))
    os.replace(partial, path)
    return len(lines) - len(kept)


def _is_before(line: str, next_step: int, is_last: bool) -> bool:
    try:
        return json.loads(line)["step"] < next_step
    except json.JSONDecodeError:
        if is_last:  # appending it was cut short by a kill
            return False
        raise


def plot_metrics(rows: list[dict], path: str | Path) -> Path:
    """Reward, rollout time (with plain beside it when measured) and acceptance per step, as a PNG;
    `rows` as `read_metrics` returns them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in rows]
    fig, axes = plt.subplots(3, 1, figsize=(7, 8), sharex=True)
    axes[0].plot(steps, [r["reward_mean"] for r in rows], marker="o")
    axes[0].set_ylabel("mean reward")
    axes[1].plot(steps, [r["rollout_s"] for r in rows], marker="o", label="rollout")
    if any(r.get("plain_rollout_s") is not None for r in rows):
        axes[1].plot(steps, [r.get("plain_rollout_s") for r in rows], marker="s", label="plain rollout")
    axes[1].set_ylabel("seconds")
    axes[1].legend()
    axes[2].plot(steps, [r["mean_acceptance_length"] for r in rows], marker="o", label="tokens a forward")
    for name in sorted({k for r in rows for k in r.get("accepted_per_draft", {})}):
        axes[2].plot(
            steps,
            [r.get("accepted_per_draft", {}).get(name) for r in rows],
            marker=".",
            label=f"{name}: accepted a draft",
        )
    axes[2].set_ylabel("tokens")
    axes[2].set_xlabel("training step")
    axes[2].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)
