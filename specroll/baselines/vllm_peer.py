"""The peer engine an RL framework already runs: vLLM's offline engine, on the same workload.

vLLM is never a dependency of specroll: it lives in its own environment (`make vllm-peer` builds
`.venv-vllm/`; `SPECROLL_VLLM_PYTHON` names another Python) and runs in a child process
(`baselines/vllm_child.py`), given the prompts as token ids after the chat template, the same sampling
settings, stop tokens, samples a prompt, batch size and CPU threads. The child keeps its engine: one
start-up (building the engine, compiling, one short warm-up generation) serves every later workload
with the same engine settings, and is measured apart from the makespans, which cover generation alone.
The seed is vLLM's global one: its CPU build fails on seeded requests with n > 1.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import specroll

CHILD = Path(__file__).with_name("vllm_child.py")
DEFAULT_VENV = Path(specroll.__file__).resolve().parent.parent / ".venv-vllm"
METHODS = ("ngram", "suffix")  # vLLM's model-free speculative methods, as `vllm:<method>`
LOOKAHEAD = 32  # room past the longest request for a speculative step's drafts (suffix drafts up to 24)


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

    def settings(self, method: str) -> VllmSettings:
        """The engine this workload needs under `method` ("" for plain decoding)."""
        longest = max(map(len, self.prompts)) + self.max_tokens
        return VllmSettings(
            str(self.model_dir),
            method,
            self.max_batch_size,
            longest + LOOKAHEAD,
            self.seed,
            self.dtype,
            self.threads,
        )

    def message(self) -> dict:
        """One generation, as the child reads it."""
        return {
            "prompts": self.prompts,
            "n": self.n,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "top_k": self.top_k,
            "top_p": self.top_p,
            "stop_token_ids": self.stop_token_ids,
        }


@dataclass(frozen=True)
class VllmSettings:
    """What a vLLM engine is built with; one engine serves any workload whose settings it covers."""

    model_dir: str
    method: str  # "" or one of METHODS
    max_batch_size: int
    max_model_len: int
    seed: int
    dtype: str
    threads: int

    def covers(self, other: VllmSettings) -> bool:
        """Whether an engine built with these settings runs `other`'s workload as its own would."""
        same = replace(self, max_model_len=other.max_model_len) == other
        return same and self.max_model_len >= other.max_model_len


@dataclass(frozen=True)
class VllmRun:
    makespan_seconds: float  # the generation alone
    startup_seconds: float  # the engine's construction and a warm-up generation, paid once an engine
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


class VllmEngine:
    """One vLLM engine in a child process: built once, then one generation after another.

    The child reads one JSON line a message from its stdin (the settings and a warm-up first, then a
    generation each) and answers one JSON line each on its stdout; vLLM's own log goes to stderr."""

    def __init__(self, settings: VllmSettings, warmup: dict, python: Path | None = None) -> None:
        python = python or vllm_python()
        if python is None:
            raise RuntimeError(f"vLLM's environment is missing: `make vllm-peer` builds {DEFAULT_VENV}")
        self.settings = settings
        self._child = subprocess.Popen(
            [str(python), str(CHILD)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=_child_env(settings.threads),
            text=True,
        )
        started = self._ask({"settings": asdict(settings), "warmup": warmup})
        self.startup_seconds = float(started["startup_seconds"])

    def generate(self, workload: VllmWorkload) -> VllmRun:
        return _parse(self._ask(workload.message()), self.startup_seconds)

    def close(self) -> None:
        if self._child.poll() is None:
            self._child.stdin.close()  # the child ends at the end of its input
            try:
                self._child.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self._child.kill()
                self._child.wait()

    def _ask(self, message: dict) -> dict:
        self._child.stdin.write(json.dumps(message) + "\n")
        self._child.stdin.flush()
        answer = self._child.stdout.readline()
        if not answer:
            self._child.wait()
            raise RuntimeError(f"vLLM's child ended (exit status {self._child.returncode}); its log is above")
        return json.loads(answer)


class VllmEngines:
    """The engines kept between runs: at most one a method, so that rounds and workloads with the same
    settings pay vLLM's start-up once; a workload the kept engine does not cover replaces it."""

    def __init__(self) -> None:
        self._engines: dict[str, VllmEngine] = {}

    def run(self, workload: VllmWorkload, method: str = "", python: Path | None = None) -> VllmRun:
        settings = workload.settings(method)
        engine = self._engines.get(method)
        if engine is None or not engine.settings.covers(settings):
            if engine is not None:
                engine.close()
            warmup = replace(workload, prompts=workload.prompts[:1], n=2, max_tokens=8).message()
            engine = self._engines[method] = VllmEngine(settings, warmup, python)
        return engine.generate(workload)

    def close(self) -> None:
        while self._engines:
            self._engines.popitem()[1].close()


ENGINES = VllmEngines()  # this process's, closed as it exits
atexit.register(ENGINES.close)


def vllm_python() -> Path | None:
    """The vLLM environment's Python, or None where it is not built."""
    named = os.environ.get("SPECROLL_VLLM_PYTHON")
    python = Path(named) if named else DEFAULT_VENV / "bin" / "python"
    return python if python.exists() else None


def run_vllm(
    workload: VllmWorkload, method: str = "", python: Path | None = None, engines: VllmEngines = ENGINES
) -> VllmRun:
    """`workload` through vLLM, plain (`method` "") or with a speculative method such as "ngram", on the
    engine `engines` keeps for it (its start-up in the run's `startup_seconds`, paid by the first)."""
    return engines.run(workload, method, python)


def _child_env(threads: int) -> dict[str, str]:
    """vLLM's CPU backend pins its OpenMP threads to cores: as many as specroll runs with."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    env["VLLM_CPU_OMP_THREADS_BIND"] = "0" if threads == 1 else f"0-{threads - 1}"
    env.pop("PYTHONPATH", None)  # the child sees only its own environment
    return env


def _parse(result: dict, startup_seconds: float) -> VllmRun:
    outputs = result["outputs"]
    counters = result.get("speculative") or {}
    drafts = counters.get("num_drafts")
    return VllmRun(
        result["makespan_seconds"],
        startup_seconds,
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
