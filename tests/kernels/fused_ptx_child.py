"""The fused kernels compiled for an H100 (sm_90) by Triton's own compiler and ptxas, no GPU needed,
in a process of its own (Triton's interpreter, which the tests' process runs, decides at import):
the number of fused multiply-adds in each kernel's PTX, fp32 and bf16, launched as the wrappers
launch them (contraction off) and, for rotary and RMSNorm, with Triton's default (on), as JSON.

    python tests/kernels/fused_ptx_child.py
"""

from __future__ import annotations

import json
import os

os.environ.pop("TRITON_INTERPRET", None)

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from specroll.kernels.add_rms_norm import _add_rms_norm_kernel  # noqa: E402
from specroll.kernels.rms_norm import _rms_norm_kernel  # noqa: E402
from specroll.kernels.rotary import _rotary_kernel  # noqa: E402
from specroll.kernels.silu_mul import _silu_mul_kernel  # noqa: E402

H100 = GPUTarget("cuda", 90, 32)
NORM = {"H": 576, "BLOCK_H": 1024}  # SmolLM2's hidden size
ROTARY = {"H": 9, "H_PAD": 16, "HKV": 3, "HKV_PAD": 4, "HALF": 32, "HALF_PAD": 32}  # and its heads
ROTARY_INTS = "T sqb sqh sqt skb skh skt scb sct sqob sqoh sqot skob skoh skot".split()


def _signatures(pointer: str) -> dict:
    """kernel -> (its argument types, its constants), for tensors of type `pointer`."""
    norm = {"H": "constexpr", "eps": "fp32", "BLOCK_H": "constexpr"}
    rotary = {name: pointer for name in ("q_ptr", "k_ptr", "cos_ptr", "sin_ptr", "q_out_ptr", "k_out_ptr")}
    rotary |= {name: "i32" for name in ROTARY_INTS} | {name: "constexpr" for name in ROTARY}
    return {
        "rms_norm": (
            _rms_norm_kernel,
            {"x_ptr": pointer, "w_ptr": pointer, "out_ptr": pointer, **norm},
            NORM,
        ),
        "add_rms_norm": (
            _add_rms_norm_kernel,
            {name: pointer for name in ("x_ptr", "y_ptr", "w_ptr", "sum_ptr", "out_ptr")} | norm,
            NORM,
        ),
        "rotary": (_rotary_kernel, rotary, ROTARY),
        "silu_mul": (
            _silu_mul_kernel,
            {"gate_ptr": pointer, "up_ptr": pointer, "out_ptr": pointer, "n": "i32", "BLOCK": "constexpr"},
            {"BLOCK": 1024},
        ),
    }


def num_fma(kernel, signature: dict, constants: dict, fusion: bool) -> int:
    source = ASTSource(fn=kernel, signature=signature, constexprs=constants)
    compiled = triton.compile(source, target=H100, options={"enable_fp_fusion": fusion})
    return compiled.asm["ptx"].count("fma.")


def main() -> None:
    counts = {}
    for dtype in ("fp32", "bf16"):
        for name, (kernel, signature, constants) in _signatures(f"*{dtype}").items():
            counts[f"{name} {dtype}"] = num_fma(kernel, signature, constants, fusion=False)
    for name in ("rms_norm", "rotary"):
        kernel, signature, constants = _signatures("*fp32")[name]
        counts[f"{name} fp32 contracted"] = num_fma(kernel, signature, constants, fusion=True)
    print(json.dumps(counts))


if __name__ == "__main__":
    main()
