"""`make gpu-check`: specroll's CUDA path on a bare GPU machine, offline, in at most ten minutes.

    python3 scripts/gpu_check.py                  # on a CUDA machine: the full check
    python3 scripts/gpu_check.py --smoke          # anywhere: the same parts, tiny, on the CPU
    PARTS=bench-64 python3 scripts/gpu_check.py   # rerun one part (a comma-separated list)

Nothing is installed or downloaded: the machine's own `python3` runs the project from this checkout,
with pip and Hugging Face offline and an empty model cache. The model is built on the machine:
SmolLM2-135M-Instruct's exact shape (`scripts/gpu_check/smollm2/`: its config, tokenizer and chat
template, Apache-2.0) with seeded random weights, since the real weights (257 MiB in bf16) exceed what
one call carries. Random weights accept no draft, so the oracle (all drafts right) is the speculation
figure. Part `exact` runs first: speculative (oracle drafts, the suffix drafters under `auto`) against
plain in bf16 and fp32 at batch 1 to 128, request by request to the bit, and the batch-invariant
numerics' price against the fast ones (`benchmarks/exact_identity.py`). Part `kernels` then times
the exact kernels against the fast numerics per layer shape, attention and whole decode forward
(SmolLM2 and a 7B shape of random weights, batch 1 to 128, bf16) with a sweep of the linear kernel's
tiles and splits, beside docs/gpu.md's predictions (`benchmarks/exact_kernels.py`).

The real weights travel apart, one piece a call (`scripts/gpu_weights.py`: SmolLM2 in bf16 and its
draft head where one is installed, pieces of at most 48 MiB, every hash checked on the machine).
Rebuilt where part `model` would build, they replace the random weights for every other part:

    python scripts/gpu_weights.py --pack          # here, once
    python scripts/gpu_weights.py --piece N       # here, for N = 0, 1, ..., each followed at once by
    python3 scripts/gpu_weights.py --receive      # there, in a call carrying runs/gpu-weights/outgoing
    # the last call: rebuild where part `model` builds, then every other part
    python3 scripts/gpu_weights.py --receive --assemble runs/gpu-check-work/smollm2-shape &&
    PARTS=exact,profile,tests,bench-128,bench-64,trace python3 scripts/gpu_check.py --work runs/gpu-check-work

Each part runs in its own process under its own time cap (the caps sum to ten minutes) and
writes one file to $OUT (default runs/gpu-check); `summary.txt` lists every part's outcome. A part
that needs CUDA says so in its file on a machine without it: it does not pass for it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
SHAPE_DIR = Path(__file__).resolve().parent / "gpu_check" / "smollm2"
OFFLINE = {
    "PIP_NO_INDEX": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
}
SMOKE_SHAPE = dict(  # SmolLM2's vocabulary and tokenizer, two small layers: seconds on a CPU
    num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
    head_dim=16,
)  # fmt: skip


@dataclass(frozen=True)
class Sizes:
    """What the bench and trace parts run: the full check's sizes on a GPU, the smoke's on a CPU."""

    device: str
    dtype: str
    large_batch: int  # bench and profile: prompts x n = this, all in one batch
    small_batch: int
    max_tokens: int
    repeats: int
    trace_batch: int
    shape: dict
    exact: tuple[str, str, int]  # part `exact`: dtypes, batch sizes, tokens a request
    cap_scale: float = 1.0  # the smoke run's caps are looser: a shared CPU is slow and noisy


FULL = Sizes("cuda", "bfloat16", 128, 64, 256, 2, 64, {}, ("bfloat16,float32", "1,8,64,128", 64))
SMOKE = Sizes("cpu", "float32", 8, 4, 8, 1, 4, SMOKE_SHAPE, ("float32", "1,4", 8), cap_scale=3.0)


@dataclass(frozen=True)
class Part:
    name: str
    cap_seconds: int  # the full check's caps sum to 600
    needs_cuda: bool = False
    needs_model: bool = True  # runs the model the part "model" builds


PARTS = (
    Part("model", 30, needs_model=False),
    Part("exact", 120),  # first: exact mode's identity to the bit in bf16 and fp32, and its price
    Part("kernels", 150),  # the exact kernels against the fast ones, per layer and forward, and the sweep
    Part("profile", 40),
    Part("tests", 60, needs_cuda=True, needs_model=False),
    Part("bench-128", 90),
    Part("bench-64", 70),
    Part("trace", 40),
)
TESTS = ("tests/gpu", "tests/engine/test_device_placement.py")
BENCH_SYSTEMS = "plain,plain-serial,plain-eager,oracle:fixed-4,hf-generate"


def commands(part: str, sizes: Sizes, work: Path) -> list[list[str]]:
    """The processes one part runs, in order, each given the rest of the part's time."""
    py, model, profile = sys.executable, str(work / "smollm2-shape"), str(work / "profile.json")
    device = ["--device", sizes.device, "--dtype", sizes.dtype]
    if part == "model":
        shape = [f"{k}={v}" for k, v in sizes.shape.items()]
        return [[py, __file__, "--build-model", model, "--device", sizes.device, *shape]]
    if part == "exact":
        dtypes, batches, tokens = sizes.exact
        return [[py, "benchmarks/exact_identity.py", "--model", model, "--device", sizes.device,
                 "--dtypes", dtypes, "--batches", batches, "--max-tokens", str(tokens)]]  # fmt: skip
    if part == "kernels":
        kernels = [py, "benchmarks/exact_kernels.py", "--model", model, "--device", sizes.device]
        return [
            kernels
            + (["--smoke", "--batches", "1,4", "--rounds", "1", "--context", "64"] if sizes is SMOKE else [])
        ]
    if part == "profile":
        # widths to 17: a tree of 16 nodes priced at every batch size, as `auto` weighs one
        grid = ["--max-batch-size", str(sizes.large_batch), "--max-draft", "16"]
        grid += ["--context-lengths", "64,512"]
        return [[py, "-m", "specroll.cli", "profile", "--model", model, *device, *grid, "--out", profile]]
    if part == "tests":
        return [[py, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS]]
    if part.startswith("bench-"):
        return [bench_command(int(part.split("-")[1]) if sizes is FULL else _smoke_batch(part), sizes, work)]
    if part == "trace":
        trace = [py, "benchmarks/step_trace.py", "--model", model, *device, "--batch", str(sizes.trace_batch)]
        return [trace + ["--width", "1"], trace + ["--width", "5"]]
    raise ValueError(f"unknown part {part!r}; parts: {', '.join(p.name for p in PARTS)}")


def _smoke_batch(part: str) -> int:
    return SMOKE.large_batch if part == "bench-128" else SMOKE.small_batch


def bench_command(batch: int, sizes: Sizes, work: Path) -> list[str]:
    """All of the part's requests in one batch: `batch` / 8 GSM8K prompts, 8 responses each."""
    profile = work / "profile.json"
    cost = ["--cost-model", str(profile)] if profile.is_file() else []  # else priced on the device
    return [
        sys.executable, "-m", "specroll.cli", "bench", "--model", str(work / "smollm2-shape"),
        "--device", sizes.device, "--dtype", sizes.dtype, "--fast-numerics", "--task", "gsm8k",
        "--num-prompts", str(max(1, batch // 8)), "--n", "8", "--max-tokens", str(sizes.max_tokens),
        "--max-batch-size", str(batch), "--repeats", str(sizes.repeats), "--systems", BENCH_SYSTEMS, *cost,
    ]  # fmt: skip


def run_part(part: Part, sizes: Sizes, work: Path, out: Path) -> str:
    """Run one part's processes into out/<part>.txt; its outcome in a few words."""
    log = out / f"{part.name}.txt"
    deadline = time.monotonic() + part.cap_seconds * sizes.cap_scale
    with open(log, "w") as f:
        if part.needs_cuda and sizes.device != "cuda":
            f.write(f"needs CUDA: this part runs on {sizes.device} as a smoke run; it does not pass here\n")
        for command in commands(part.name, sizes, work):
            f.write(f"$ {' '.join(command)}\n")
            f.flush()
            outcome = _run(command, f, deadline - time.monotonic())
            if outcome != "passed":
                return outcome
    return "needs CUDA" if part.needs_cuda and sizes.device != "cuda" else "passed"


def _run(command: list[str], log, seconds_left: float) -> str:
    if seconds_left <= 0:
        return "timed out"
    env = {**os.environ, **OFFLINE, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    env["SPECROLL_HOME"] = str(Path(tempfile.gettempdir()) / "specroll-gpu-check-home")  # nothing pulled
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    try:
        done = subprocess.run(
            command, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=seconds_left
        )
    except subprocess.TimeoutExpired:
        log.write(f"\ntimed out: the part's cap ran out after {command[:4]}\n")
        return "timed out"
    return "passed" if done.returncode == 0 else f"failed (exit {done.returncode})"


def build_model(out: Path, device: str, overrides: dict[str, int], seed: int = 0) -> None:
    """SmolLM2's config (with `overrides`) and tokenizer, weights drawn from `seed`, saved to `out`."""
    import torch
    import transformers

    config = transformers.AutoConfig.from_pretrained(SHAPE_DIR, **overrides)
    torch.manual_seed(seed)
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
        shutil.copy(SHAPE_DIR / name, out / name)
    count = sum(p.numel() for p in model.parameters())
    print(f"built {out}: {config.num_hidden_layers} layers, {count / 1e6:.1f} M parameters, seed {seed}")


def environment(sizes: Sizes) -> str:
    import platform

    import torch
    import transformers

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    return (
        f"{platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}, "
        f"torch {torch.__version__}, transformers {transformers.__version__}, GPU {gpu}; "
        f"{'smoke run on ' + sizes.device if sizes is SMOKE else 'full check'}"
    )


def main() -> int:
    args = _parse()
    if args.build_model:
        build_model(Path(args.build_model), args.device, {k: int(v) for k, v in args.overrides})
        return 0
    sizes = SMOKE if args.smoke else FULL
    if sizes is FULL and not _has_cuda():
        print("gpu-check: torch sees no CUDA device; run `scripts/gpu_check.py --smoke` on a CPU")
        return 2
    unknown = set(args.parts) - {p.name for p in PARTS}
    if unknown:
        raise SystemExit(f"unknown parts {sorted(unknown)}; parts: {', '.join(p.name for p in PARTS)}")
    chosen = [p for p in PARTS if not args.parts or p.name in args.parts]
    is_built = (args.work / "smollm2-shape" / "config.json").is_file()
    if chosen[0].name != "model" and any(p.needs_model for p in chosen) and not is_built:
        chosen.insert(0, PARTS[0])  # every other part runs the model built here
    return check(chosen, sizes, args.out, args.work)


def check(parts: list[Part], sizes: Sizes, out: Path, work: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    lines = [environment(sizes)]
    print(lines[0], flush=True)
    for part in parts:
        started = time.monotonic()
        outcome = run_part(part, sizes, work, out)
        cap = part.cap_seconds * sizes.cap_scale
        lines.append(f"{part.name:<10} {outcome:<20} {time.monotonic() - started:6.1f} s (cap {cap:.0f} s)")
        print(lines[-1], flush=True)
        (out / "summary.txt").write_text("\n".join(lines) + "\n")
    return 0 if all(_ok(line) for line in lines[1:]) else 1


def _ok(line: str) -> bool:
    return " passed " in line or " needs CUDA " in line


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU (CI)")
    parser.add_argument(
        "--out", type=Path, default=Path(os.environ.get("OUT") or REPO_ROOT / "runs" / "gpu-check")
    )
    parser.add_argument(
        "--work", type=Path, default=None, help="where the model is built (default: a temp dir)"
    )
    parser.add_argument("--parts", default=os.environ.get("PARTS", ""), help="comma-separated; default all")
    parser.add_argument("--build-model", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", type=lambda s: s.split("=", 1), help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.parts = [p for p in args.parts.split(",") if p]
    mode = "smoke" if args.smoke else "full"
    args.work = args.work or Path(tempfile.gettempdir()) / f"specroll-gpu-check-{mode}"
    return args


if __name__ == "__main__":
    sys.exit(main())
