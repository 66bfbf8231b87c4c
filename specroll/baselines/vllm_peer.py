"""The peer engine an RL framework already runs: vLLM's offline engine, on the same workload.

vLLM is never a dependency of specroll: it lives in its own environment (`make vllm-peer` builds
`.venv-vllm/`; `SPECROLL_VLLM_PYTHON` names another Python) and runs in a child process
(`baselines/vllm_child.py`), given the prompts as token ids after the chat template, the same sampling
settings, stop tokens, samples a prompt, batch size and CPU threads. Its start-up (building the engine,
compiling, one short warm-up generation) is measured apart from the makespan, which covers the
generation alone. The seed is vLLM's global one: its CPU build fails on seeded requests with n > 1.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import specroll

CHILD = Path(__file__).with_name("vllm_child.py")
DEFAULT_VENV = Path(specroll.__file__).resolve().parent.parent / ".venv-vllm"
STDERR_FD = 2  # the process's own stderr, even where sys.stderr is replaced (a test's capture)
METHODS = ("ngram", "suffix")  # vLLM's model-free speculative methods, as `vllm:<method>`


@dataclass(frozen=True)
class VllmWorkload:
    """What vLLM is asked to run: `prompts` as token ids, `n` samples each."""

    model_dir: Path
    prompts: list[list[int]]
    n: int
    max_tokens: int
    temperature: float
    top_k: int  # 0: no top-k
    top_p: float
    stop_token_ids: list[int]
    max_batch_size: int
    seed: int
    dtype: str = "float32"
    threads: int = 1


@dataclass(frozen=True)
class VllmRun:
    makespan_seconds: float  # the generation alone
    startup_seconds: float  # the engine's construction and a warm-up generation, apart
    output_tokens: int
    outputs: list[list[list[int]]]  # prompt -> sample -> token ids
    num_drafts: int | None = None  # speculative steps over all requests, where vLLM reports them
    num_accepted_tokens: int | None = None

    @property
    def mean_acceptance_length(self) -> float | None:
        """Tokens a drafting step: accepted drafts + 1, as specroll counts them, over the steps in which
        vLLM drafted (it counts no step without a draft)."""
        if not self.num_drafts:
            return None
        return 1 + (self.num_accepted_tokens or 0) / self.num_drafts


def vllm_python() -> Path | None:
    """The vLLM environment's Python, or None where it is not built."""
    named = os.environ.get("SPECROLL_VLLM_PYTHON")
    python = Path(named) if named else DEFAULT_VENV / "bin" / "python"
    return python if python.exists() else None


def run_vllm(workload: VllmWorkload, method: str = "", python: Path | None = None) -> VllmRun:
    """`workload` through vLLM, plain (`method` "") or with a speculative method such as "ngram"."""
    python = python or vllm_python()
    if python is None:
        raise RuntimeError(f"vLLM's environment is missing: `make vllm-peer` builds {DEFAULT_VENV}")
    with tempfile.TemporaryDirectory(prefix="specroll-vllm-") as scratch:
        request, result = Path(scratch) / "request.json", Path(scratch) / "result.json"
        request.write_text(json.dumps(_request(workload, method)))
        subprocess.run(
            [str(python), str(CHILD), str(request), str(result)],
            check=True,
            env=_child_env(workload.threads),
            stdout=STDERR_FD,  # vLLM's log, beside bench's own lines
        )
        return _parse(json.loads(result.read_text()))


def _request(workload: VllmWorkload, method: str) -> dict:
    longest = max(map(len, workload.prompts)) + workload.max_tokens
    return {
        "model_dir": str(workload.model_dir),
        "prompts": workload.prompts,
        "n": workload.n,
        "max_tokens": workload.max_tokens,
        "temperature": workload.temperature,
        "top_k": workload.top_k,
        "top_p": workload.top_p,
        "stop_token_ids": workload.stop_token_ids,
        "max_batch_size": workload.max_batch_size,
        "max_model_len": longest + 8,  # room for a speculative step's lookahead
        "seed": workload.seed,
        "dtype": workload.dtype,
        "method": method,
    }


def _child_env(threads: int) -> dict[str, str]:
    """vLLM's CPU backend pins its OpenMP threads to cores: as many as specroll runs with."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    env["VLLM_CPU_OMP_THREADS_BIND"] = "0" if threads == 1 else f"0-{threads - 1}"
    env.pop("PYTHONPATH", None)  # the child sees only its own environment
    return env


def _parse(result: dict) -> VllmRun:
    outputs = result["outputs"]
    counters = result.get("speculative") or {}
    drafts = counters.get("num_drafts")
    return VllmRun(
        result["makespan_seconds"],
        result["startup_seconds"],
        sum(len(sample) for samples in outputs for sample in samples),
        outputs,
        None if drafts is None else int(drafts),
        None if drafts is None else int(counters.get("num_accepted_tokens", 0)),
    )


def has_method(method: str, python: Path | None = None) -> bool:
    """Whether vLLM's environment can run `method`: suffix decoding needs arctic-inference there."""
    if method != "suffix":
        return True
    python = python or vllm_python()
    if python is None:
        return False
    return subprocess.run([str(python), "-c", "import arctic_inference"], capture_output=True).returncode == 0
