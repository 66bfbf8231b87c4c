"""Compare `specroll train` runs step by step: acceptance, rollout time, reward, drift and weights.

    python scripts/compare_runs.py LABEL=RUN_DIR [LABEL=RUN_DIR ...] --png OUT.png

Prints a markdown table (one row per step, one column group per run), says whether every run's
weights and rewards equal the first's at every step, and plots acceptance and rollout time per step.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from specroll.train.metrics_log import read_metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", metavar="LABEL=RUN_DIR")
    parser.add_argument("--png", type=Path, default=None)
    args = parser.parse_args()
    runs = {}
    for item in args.runs:
        label, _, directory = item.partition("=")
        runs[label] = read_metrics(Path(directory) / "metrics.jsonl")
    labels = list(runs)
    steps = min(len(rows) for rows in runs.values())
    print(
        "| step | "
        + " | ".join(f"{label} accept | {label} rollout s" for label in labels)
        + " | reward | drift KL |"
    )
    print("|---|" + "---|---|" * len(labels) + "---|---|")
    first = runs[labels[0]]
    for i in range(steps):
        cells = " | ".join(
            f"{runs[l][i]['mean_acceptance_length']:.2f} | {runs[l][i]['rollout_s']:.1f}" for l in labels
        )
        drift = next(
            (runs[l][i].get("drift_kl") for l in labels if runs[l][i].get("drift_kl") is not None), None
        )
        drift_text = "" if drift is None else f"{drift:.4f}"
        print(f"| {i} | {cells} | {first[i]['reward_mean']:.3f} | {drift_text} |")
    for label in labels[1:]:
        same_weights = all(
            runs[label][i]["weights_sha256"] == first[i]["weights_sha256"] for i in range(steps)
        )
        same_rewards = all(runs[label][i]["reward_mean"] == first[i]["reward_mean"] for i in range(steps))
        print(f"{label} vs {labels[0]}: weights identical {same_weights}, rewards identical {same_rewards}")
    if args.png:
        plot(runs, labels, steps, args.png)
        print(f"wrote {args.png}")


def plot(runs: dict, labels: list[str], steps: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    for label in labels:
        rows = runs[label][:steps]
        axes[0].plot(range(steps), [r["mean_acceptance_length"] for r in rows], marker="o", label=label)
        axes[1].plot(range(steps), [r["rollout_s"] for r in rows], marker="o", label=label)
    axes[0].set_ylabel("tokens per forward")
    axes[1].set_ylabel("rollout seconds")
    axes[1].set_xlabel("training step")
    for ax in axes:
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    main()
