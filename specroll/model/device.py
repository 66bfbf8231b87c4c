"""Where a model runs: `--device cpu|cuda|auto` resolved against what this torch can reach."""

from __future__ import annotations

import torch

from specroll.placement import DTYPES, check_dtype

DEVICES = ("cpu", "cuda", "auto")


def resolve_device(name: str) -> str:
    """ "auto" is cuda where torch sees a GPU, else cpu; "cuda" where it sees none is refused, with why."""
    if name not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {name!r}")
    is_available = torch.cuda.is_available()
    if name == "auto":
        return "cuda" if is_available else "cpu"
    if name == "cuda" and not is_available:
        reason = "this torch is a CPU build" if torch.version.cuda is None else "no CUDA device is visible"
        raise ValueError(f"--device cuda: CUDA is not available ({reason}: torch {torch.__version__})")
    return name


GRAPH_CHOICES = ("auto", "on", "off")


def check_graph_choice(choice: str) -> None:
    if choice not in GRAPH_CHOICES:
        raise ValueError(f"cuda graphs must be one of {', '.join(GRAPH_CHOICES)}, got {choice!r}")


def resolve_cuda_graphs(choice: str, device: str) -> bool:
    """`--cuda-graphs`: auto is on for CUDA; on a CPU, on runs the same static-shape forwards eagerly
    (their results are the dynamic forwards', which is how the path is checked without a GPU)."""
    check_graph_choice(choice)
    return device == "cuda" if choice == "auto" else choice == "on"


DTYPE_CHOICES = ("auto", *DTYPES)
# decoder weights from which `--dtype auto` runs bf16 on a CPU: measured one thread on an AMD EPYC
# with AVX512-BF16, SmolLM2 (~100 M) decoded 2.3x as fast in bf16 as in fp32 at batch 8, while the
# bundled 1 M policy ran as fast in either and its draft model's tokens were accepted less often in
# bf16 (1.78 against 2.42 tokens a forward): a small model is bound by the host, not its weights
BF16_MIN_PARAMETERS = 50_000_000


def resolve_dtype(name: str, device: str, num_parameters: int | None = None) -> str:
    """`--dtype`: auto is bfloat16, the precision RL rollouts run in, where `device` multiplies it
    natively (`fast_bf16`: a GPU with bf16, a CPU with AVX512-BF16 or AMX-BF16; on a CPU, for a
    model of BF16_MIN_PARAMETERS or more decoder weights, `num_parameters`), float32 elsewhere."""
    if name != "auto":
        check_dtype(name)
        return name
    small = device == "cpu" and num_parameters is not None and num_parameters < BF16_MIN_PARAMETERS
    return "bfloat16" if fast_bf16(device) and not small else "float32"


def torch_dtype(name: str) -> torch.dtype:
    """A `placement.DTYPES` name as torch's dtype."""
    check_dtype(name)
    return getattr(torch, name)


_BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")  # x86 instructions that multiply bf16 natively


def fast_bf16(device: torch.device | str) -> bool:
    """Whether `device` multiplies bf16 natively, so that bf16 matmuls beat fp32 ones: a CUDA device
    that supports bf16, or a CPU whose flags (Linux's /proc/cpuinfo) name AVX512-BF16 or AMX-BF16
    (measured on an AMD EPYC with avx512_bf16: a 6,144 x 576 x 8,192 matmul 3.2x faster in bf16)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return device.type == "cpu" and _cpu_has_bf16()


def _cpu_has_bf16() -> bool:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("flags"):
                    return any(flag in line.split() for flag in _BF16_CPU_FLAGS)
    except OSError:
        pass
    return False
