"""A competing process: torch multiplies matrices on the CPU until killed or `--seconds` pass.

    python benchmarks/matmul_load.py --threads 1 --seconds 600 &

The load an RL node's other work puts on the cores a rollout runs on (the thread-choice tests and
the never-slower matrix run beside it)."""

from __future__ import annotations

import argparse
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--size", type=int, default=512)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    a = torch.randn(args.size, args.size)
    deadline = time.monotonic() + args.seconds
    print("busy", flush=True)
    while time.monotonic() < deadline:
        a = torch.tanh(a @ a)


if __name__ == "__main__":
    main()
