"""Batch-invariant kernels for GPUs, in Triton: every reduction a row goes through has one order,
fixed by the kernel's constant tile sizes, whatever else shares the launch.

On a GPU the fast kernels choose their reduction order by the problem's shape (cuBLAS picks a
kernel and a split of K by the row count; flash-decoding splits the keys by occupancy), so a row's
logits change with the batch, and exact-mode tokens with them. These kernels make each row's bits a
function of the row alone:

- `linear`: a matmul with tiles and a split of K fixed by the layer's (K, N) (`plans.linear_plan`),
  never by the row count: a row's dot products are summed in K's order tile by tile within a split,
  the splits' fp32 partials added in split order, in one compiled kernel for every row count; rows
  past the call's end are zeros in the tile, not other kernels. The split fills a GPU at a decode.
- `rms_norm`: one program a row, the sum of squares over the whole row at one fixed width.
- `add_rms_norm`: a residual add and the RMSNorm after it in one program a row: the bits of `x + y`
  in torch then `rms_norm` (the same arithmetic, `rms_norm.normed_row`).
- `attention`: one program per (sequence, key head, query token, range of `plans.KEY_SPLIT` key
  columns) holding the head's query group; keys in fixed blocks (of a width set by the group and
  head dim, `plans.attention_tiles`) in column order, an online softmax whose trailing all-masked
  blocks change nothing (a factor of exactly 1, sums of exact zeros); the ranges' partials merged in
  range order by a second kernel, which skips a range the query sees no key of. A decode, a
  verification's k+1 queries and a tree node (reading its path's keys in chain order,
  `model.chain_order`) compute a query the same way.
- `rows`: softmax, log-softmax and the inverse-CDF's running sum over the vocabulary, one program a
  row, chunk by chunk in vocabulary order.
- `rotary` (q and k in one launch, the bits of `model.rope.apply_rotary` in torch) and `silu_mul`
  (SiLU(gate) * up; its exp is Triton's, so the trainer runs it too, `model.differentiable_kernels`):
  elementwise, each element alone.

The model runs them as a fused forward (`CausalLM.use_triton_kernels`): each residual add inside the
norm that reads it (a layer's MLP output added by the next layer's input norm), rotary and SwiGLU's
product in one launch each; 15 kernels a decoder layer at a decode instead of 27
(tests/kernels/test_fused_forward.py). Every launch goes through `launches.launch`, which
`launches.count_launches` counts by kernel name. Elementwise kernels round each op's result to the
model's dtype as torch does (`rounding.rounded`, to nearest even) and launch with floating-point
contraction off, so no product and sum become one fused multiply-add torch would not make.

Proven where CI runs by Triton's interpreter (`TRITON_INTERPRET=1`, the kernels executed by numpy
on the CPU: the structure, not the GPU's instructions) and on a GPU by `make gpu-check` part
`exact`. The interpreter multiplies bf16 tiles wrongly (it reads their bits as integers) and its
fp32 matmul (numpy's, the CPU's BLAS: OpenBLAS's Haswell sgemm sums rows 6-11 of every 12 of a tile
otherwise than rows 0-5) sums a row in an order that depends on the row's place in the tile, so there
the matmul is a sum of fp32 products over each tile's K (`SUM_PRODUCTS`); on a GPU bf16 tiles go to
the tensor cores and fp32 ones to a chain of multiply-adds per output.
Its fp32 -> bf16 cast truncates; `rounding.rounded` rounds to nearest even in integer arithmetic
instead, the GPU's cast's bits.
Triton is the `gpu` extra; nothing here is imported on a CPU run.
"""

from __future__ import annotations

import importlib.util
import os


def available() -> bool:
    """Whether Triton is installed (it comes with torch's CUDA builds on Linux)."""
    return importlib.util.find_spec("triton") is not None


def interpreted() -> bool:
    """Whether Triton runs kernels in its interpreter on the CPU (tests), not compiled for a GPU."""
    return os.environ.get("TRITON_INTERPRET") == "1"
