"""A seeded SmolLM2 rollout on GSM8K in a process of its own, at the automatic thread count, for the
golden records (`test_golden_records.py`): plain or speculative in, every request's tokens and
log-probabilities (as hex, to the bit), the threads, the CPU numerics' family and the drafts out, as
JSON on stdout.

    python tests/model/golden_child.py plain|speculative [bfloat16]   # print a run (fp32 by default)
    python tests/model/golden_child.py --write [bfloat16]             # record this machine's family's file

A bf16 run's family adds oneDNN's bf16 code path (`packed_linear.bf16_kernels`) to the fp32 family's.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from specroll.engine_config import EngineConfig
from specroll.model.blas_mode import describe
from specroll.placement import invariant_kernels
from specroll.rollout import RolloutConfig, run_rollout

GOLDEN = Path(__file__).parent / "golden"
WORKLOAD = dict(model_dir=Path("smollm2"), task="gsm8k", num_prompts=3, n=2, max_tokens=32)
ENGINE = dict(max_batch_size=6, seed=4242)
SYSTEMS = {  # the drafts are verified three tokens wide, whatever they propose
    "plain": dict(speculate="off"),
    "speculative": dict(speculate="suffix", policy="fixed-2"),
}


def family(dtype: str) -> str:
    """fp32: MKL's and ATen's family. bf16 on specroll's CPU kernels: ATen's alone, since no BLAS runs
    (the kernels' bits are the same on every x86 CPU with AVX-512, whatever its vendor); bf16 on
    oneDNN: the fp32 family and oneDNN's bf16 code path."""
    if dtype == "float32":
        return describe().family
    if invariant_kernels("cpu", dtype) == "cpu":
        return f"ATen {describe().aten_capability}; {dtype} on specroll's CPU kernels"
    from specroll.model.packed_linear import bf16_kernels

    return f"{describe().family}; {dtype} on {bf16_kernels()}"


def run(system: str, dtype: str = "float32") -> dict:
    config = RolloutConfig(**WORKLOAD, engine=EngineConfig(**ENGINE, dtype=dtype), **SYSTEMS[system])
    result = run_rollout(config)
    records = [{"tokens": r.token_ids, "logprobs": [x.hex() for x in r.logprobs]} for r in result.records]
    drafted = sum(row["num_drafted"] for row in result.telemetry)
    accepted = sum(row["num_accepted"] for row in result.telemetry)
    return {
        "family": family(dtype),
        "cpu": result.cpu,
        "records": records,
        "forwards": result.summary.forward_passes,
        "drafted": drafted,
        "accepted": accepted,
    }


def golden_path(family: str) -> Path:
    """The file of one CPU numerics family's records, named from the family."""
    return GOLDEN / (re.sub(r"[^A-Za-z0-9.]+", "-", family).strip("-") + ".json")


def write(dtype: str = "float32") -> Path:
    plain, speculative = run("plain", dtype), run("speculative", dtype)
    if plain["records"] != speculative["records"]:
        raise SystemExit("speculative and plain differ here: no golden records are written")
    path = golden_path(plain["family"])
    golden = {"family": plain["family"], "cpu": plain["cpu"], "workload": WORKLOAD | ENGINE}
    golden["workload"]["model_dir"] = str(WORKLOAD["model_dir"])
    head = json.dumps(golden, indent=1)[:-2]  # one record a line, so a diff shows which changed
    lines = ",\n  ".join(json.dumps(record) for record in plain["records"])
    path.write_text(f'{head},\n "records": [\n  {lines}\n ]\n}}\n')
    return path


if __name__ == "__main__":
    if sys.argv[1] == "--write":
        print(f"wrote {write(*sys.argv[2:])}")
    else:
        print(json.dumps(run(*sys.argv[1:])))
