"""Exact mode's identity and its price on one device: speculative against plain, request by request.

    python benchmarks/exact_identity.py --model DIR --device cuda --dtypes bfloat16,float32 \
        --batches 1,8,64,128 --max-tokens 128

For each dtype and batch size (all of a batch's requests at once: batch / 8 GSM8K prompts x 8
samples, or one prompt x batch samples below 8), with the device's batch-invariant numerics:
- plain decoding, the reference;
- oracle drafts (plain's own tokens, one in four wrong) verified 4 wide (`fixed-4`): the verification
  path at every batch, however little a random model's drafts would be accepted;
- the suffix drafters under `auto`, trees included, as a user runs them;
each compared to plain request by request, tokens and log-probabilities to the bit; and the price:
plain's tokens/s with the batch-invariant numerics against the fast ones (`--fast-numerics`), paired
in the same process. Prints one markdown table; exits 1 when a request differs.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from specroll.drafting.oracle import OracleDrafter
from specroll.engine_config import EngineConfig
from specroll.model.device import resolve_cuda_graphs
from specroll.rollout import RolloutConfig, RolloutResult, run_rollout


@dataclass(frozen=True)
class Identity:
    same: int  # requests whose tokens and log-probabilities equal plain's to the bit
    total: int
    drafted: int  # draft tokens verified
    accepted: int

    @property
    def holds(self) -> bool:
        return self.same == self.total

    def cell(self) -> str:
        return f"{self.same}/{self.total} (drafted {self.drafted}, accepted {self.accepted})"


def identity(plain: RolloutResult, spec: RolloutResult) -> Identity:
    pairs = zip(sorted(plain.records, key=_id), sorted(spec.records, key=_id), strict=True)
    same = sum(a.token_ids == b.token_ids and a.logprobs == b.logprobs for a, b in pairs)
    drafted = sum(row["num_drafted"] for row in spec.telemetry)
    accepted = sum(row["num_accepted"] for row in spec.telemetry)
    return Identity(same, len(plain.records), drafted, accepted)


def _id(record) -> int:
    return record.request_id


def workload(model: Path, device: str, dtype: str, batch: int, max_tokens: int) -> RolloutConfig:
    graphs = resolve_cuda_graphs("auto", device)
    engine = EngineConfig(max_batch_size=batch, device=device, dtype=dtype, seed=5, cuda_graphs=graphs)
    n = min(batch, 8)
    prompts = max(1, batch // n)
    return RolloutConfig(
        model_dir=model, task="gsm8k", num_prompts=prompts, n=n, max_tokens=max_tokens, engine=engine
    )


def measure(config: RolloutConfig) -> tuple[list[str], list[Identity]]:
    """One table row, and its identities: oracle, suffix/auto and plain again against plain; exact
    numerics against fast, the fast run between the two exact ones and priced against their mean."""
    plain = run_rollout(replace(config, speculate="off"))
    fast = run_rollout(replace(config, speculate="off").with_engine(batch_invariant=False))
    exact_again = run_rollout(replace(config, speculate="off"))  # the pair's second exact run
    outputs = {r.request_id: r.token_ids for r in plain.records}
    drafter = OracleDrafter(outputs, corrupt_every=4, vocab_size=config_vocab(config))
    oracle = run_rollout(replace(config, speculate="suffix", policy="fixed-4"), drafter=drafter)
    suffix = run_rollout(replace(config, speculate="suffix", policy="auto"))
    exact_tps = (plain.summary.tokens_per_second + exact_again.summary.tokens_per_second) / 2
    fast_tps = fast.summary.tokens_per_second
    identities = [identity(plain, oracle), identity(plain, suffix), identity(plain, exact_again)]
    row = [config.engine.dtype, str(config.engine.max_batch_size), *(i.cell() for i in identities)]
    return row + [f"{exact_tps:.0f}", f"{fast_tps:.0f}", f"{fast_tps / exact_tps:.2f}x"], identities


def config_vocab(config: RolloutConfig) -> int:
    from specroll.model.loader import read_config

    return read_config(config.model_dir).vocab_size


HEADER = [
    "dtype", "batch", "oracle fixed-4 = plain", "suffix auto = plain", "plain again = plain",
    "exact tok/s", "fast tok/s", "exact's cost",
]  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--batches", default="1,8,64,128")
    parser.add_argument("--max-tokens", type=int, default=128)
    args = parser.parse_args()
    print("| " + " | ".join(HEADER) + " |")
    print("|" + "---|" * len(HEADER), flush=True)
    every_request_same = True
    for dtype in args.dtypes.split(","):
        for batch in map(int, args.batches.split(",")):
            row, identities = measure(workload(args.model, args.device, dtype, batch, args.max_tokens))
            every_request_same &= all(i.holds for i in identities)
            print("| " + " | ".join(row) + " |", flush=True)
    print("every request equal to plain's, to the bit" if every_request_same else "SOME REQUESTS DIFFER")
    return 0 if every_request_same else 1


if __name__ == "__main__":
    sys.exit(main())
