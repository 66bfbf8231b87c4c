"""Every kernel compiled for an H100/H200 (sm_90) by Triton's compiler and its bundled ptxas, no GPU
needed, at the engine's shapes (`shapes.SHAPES`) in fp32 and bf16, as the wrappers launch them:
each compiled kernel's registers a thread, spilled bytes and shared memory, one JSON object a line.

    python -m specroll.kernels.sm90

Run it in a process of its own without TRITON_INTERPRET (Triton's interpreter decides at import).
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import get_ptxas
from triton.compiler import ASTSource

from specroll.kernels import add_rms_norm, attention, linear, plans, rms_norm, rotary, rows, silu_mul
from specroll.kernels.shapes import SHAPES, ModelShape

H100 = GPUTarget("cuda", 90, 32)
TYPES = {"fp32": "fp32", "bf16": "bf16"}


@dataclass(frozen=True)
class Build:
    """One kernel to compile: its arguments' types (pointers, scalars) and constants."""

    label: str  # kernel, shape, dtype
    kernel: object
    types: dict  # argument name -> Triton type
    constants: dict  # constexpr name -> value
    options: dict  # num_warps, enable_fp_fusion


@dataclass(frozen=True)
class Resources:
    label: str
    registers: int  # a thread's
    spill_stores: int  # bytes
    spill_loads: int
    shared: int  # bytes of shared memory a program, as Triton launches it
    num_warps: int


def _types(kernel, pointer: str, scalars: dict, pointers: dict, constants: dict) -> dict:
    """Every argument of `kernel`: a constant, a named scalar or pointer type, else `pointer`."""
    types = {}
    for name in kernel.arg_names:
        if name in constants:
            types[name] = "constexpr"
        else:
            default = pointer if name.endswith("_ptr") else "i32"
            types[name] = scalars.get(name) or pointers.get(name) or default
    return types


def linear_builds(shape: ModelShape, dtype: str) -> Iterator[Build]:
    layers = {**shape.linear_layers(), "lm_head": shape.lm_head}
    for (K, N), names in _distinct(layers).items():
        plan = plans.linear_plan(K, N)
        has_bias = shape.has_qkv_bias and bool({"q", "k", "v"} & set(names))
        constants = dict(
            K=K, HAS_BIAS=has_bias, IEEE=dtype == "fp32", SUM_PRODUCTS=False, BLOCK_M=plans.BLOCK_M,
            BLOCK_N=plan.block_n, BLOCK_K=plan.block_k, NUM_SPLITS=plan.num_splits, SPLIT_K=plan.split_k,
        )  # fmt: skip
        workspace = {"part_ptr": "*fp32", "count_ptr": "*i32"}
        types = _types(linear._linear_kernel, f"*{dtype}", {}, workspace, constants)
        label = f"linear {shape.name} {'/'.join(names)} {K}->{N} {dtype}"
        yield Build(label, linear._linear_kernel, types, constants, {"num_warps": plans.LINEAR_WARPS})


def _distinct(layers: dict[str, tuple[int, int]]) -> dict[tuple[int, int], list[str]]:
    by_shape: dict[tuple[int, int], list[str]] = {}
    for name, kn in layers.items():
        by_shape.setdefault(kn, []).append(name)
    return by_shape


def attention_builds(shape: ModelShape, dtype: str) -> Iterator[Build]:
    group_pad = triton.next_power_of_2(shape.group)
    block_n, num_warps = plans.attention_tiles(group_pad, shape.head_dim)
    for chain in (False, True):
        constants = dict(
            G=shape.group, D=shape.head_dim, G_PAD=group_pad, BLOCK_N=block_n, SPLIT=plans.KEY_SPLIT,
            CHAIN_ORDER=chain,
        )  # fmt: skip
        pointers = {"mask_ptr": "*i1", "col_ptr": "*i64", "part_ptr": "*fp32"}
        types = _types(attention._attention_kernel, f"*{dtype}", {"scale": "fp32"}, pointers, constants)
        label = f"attention {shape.name} {'tree' if chain else 'chain'} {dtype}"
        yield Build(label, attention._attention_kernel, types, constants, {"num_warps": num_warps})
    constants = dict(G=shape.group, D=shape.head_dim, G_PAD=group_pad)
    merge = attention._attention_merge_kernel
    types = _types(merge, f"*{dtype}", {}, {"part_ptr": "*fp32"}, constants)
    yield Build(f"attention ranges merged {shape.name} {dtype}", merge, types, constants,
                {"num_warps": num_warps})  # fmt: skip


def elementwise_builds(shape: ModelShape, dtype: str) -> Iterator[Build]:
    H, no_fusion = shape.hidden, {"enable_fp_fusion": False}
    norm = {"H": H, "BLOCK_H": triton.next_power_of_2(H)}
    for kernel in (rms_norm._rms_norm_kernel, add_rms_norm._add_rms_norm_kernel):
        types = _types(kernel, f"*{dtype}", {"eps": "fp32"}, {}, norm)
        yield Build(f"{kernel.fn.__name__[1:-7]} {shape.name} {dtype}", kernel, types, norm, no_fusion)
    heads = dict(
        H=shape.num_heads, H_PAD=triton.next_power_of_2(shape.num_heads), HKV=shape.num_kv_heads,
        HKV_PAD=triton.next_power_of_2(shape.num_kv_heads), HALF=shape.head_dim // 2,
        HALF_PAD=triton.next_power_of_2(shape.head_dim // 2),
    )  # fmt: skip
    types = _types(rotary._rotary_kernel, f"*{dtype}", {}, {}, heads)
    yield Build(f"rotary {shape.name} {dtype}", rotary._rotary_kernel, types, heads, no_fusion)
    block = {"BLOCK": silu_mul.BLOCK}
    types = _types(silu_mul._silu_mul_kernel, f"*{dtype}", {"n": "i32"}, {}, block)
    yield Build(f"silu_mul {shape.name} {dtype}", silu_mul._silu_mul_kernel, types, block, no_fusion)


def row_builds(shape: ModelShape) -> Iterator[Build]:
    """The vocabulary's reductions: softmax and log-softmax in fp32, the CDF's sum in fp64 (their
    only dtypes)."""
    V = shape.vocab
    for log in (False, True):
        constants = {"V": V, "BLOCK_V": rows.BLOCK_V, "LOG": log}
        types = _types(rows._softmax_kernel, "*fp32", {"N": "i32"}, {}, constants)
        yield Build(f"{'log_' * log}softmax {shape.name} fp32", rows._softmax_kernel, types, constants, {})
    constants = {"V": V, "BLOCK_V": rows.BLOCK_V}
    types = _types(rows._cumsum_kernel, "*fp64", {"N": "i32"}, {}, constants)
    yield Build(f"cumsum {shape.name} fp64", rows._cumsum_kernel, types, constants, {})


def builds() -> Iterator[Build]:
    for shape in SHAPES:
        for dtype in TYPES:
            yield from linear_builds(shape, dtype)
            yield from attention_builds(shape, dtype)
            yield from elementwise_builds(shape, dtype)
        yield from row_builds(shape)


def compile_one(build: Build) -> Resources:
    """Triton's PTX for sm_90, then ptxas -v on it (the flags Triton's own ptxas call passes that
    bear on registers) -> what one program holds."""
    source = ASTSource(fn=build.kernel, signature=build.types, constexprs=build.constants)
    compiled = triton.compile(source, target=H100, options=build.options)
    used = _ptxas_usage(compiled.asm["ptx"], build.options.get("enable_fp_fusion", True))
    num_warps = build.options.get("num_warps", 4)
    return Resources(build.label, **used, shared=compiled.metadata.shared, num_warps=num_warps)


def _ptxas_usage(ptx: str, fusion: bool) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "kernel.ptx"
        source.write_text(ptx)
        command = [get_ptxas(90).path, "-v", "--gpu-name=sm_90a", str(source), "-o", str(source) + ".o"]
        command += [] if fusion else ["--fmad=false"]
        log = subprocess.run(command, capture_output=True, text=True, check=True)
    text = log.stderr + log.stdout
    registers = re.search(r"Used (\d+) registers", text)
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", text)
    return {
        "registers": int(registers.group(1)),
        "spill_stores": int(spills.group(1)) if spills else 0,
        "spill_loads": int(spills.group(2)) if spills else 0,
    }


def main() -> None:
    for build in builds():
        try:
            print(json.dumps(asdict(compile_one(build))), flush=True)
        except Exception as error:  # a kernel that does not compile is a row saying so
            failed = {"label": build.label, "error": f"{type(error).__name__}: {error}"[:2000]}
            print(json.dumps(failed), flush=True)


if __name__ == "__main__":
    main()
