"""Batch-invariant kernels for GPUs, in Triton: every reduction a row goes through has one order,
fixed by the kernel's constant tile sizes, whatever else shares the launch.

On a GPU the fast kernels choose their reduction order by the problem's shape (cuBLAS picks a
kernel and a split of K by the row count; flash-decoding splits the keys by occupancy), so a row's
logits change with the batch, and exact-mode tokens with them. These kernels make each row's bits a
function of the row alone:

- `linear`: a matmul with fixed (64, 64, 64) tiles and no split along K: a row's dot products are
  summed in K's order, tile by tile, in one compiled kernel for every row count (the row count is
  not specialised on); rows past the call's end are zeros in the tile, not other kernels.
- `rms_norm`: one program a row, the sum of squares over the whole row at one fixed width.
- `attention`: one program per (sequence, key head, query token) holding the head's query group;
  keys in fixed blocks of `BLOCK_N` columns in column order, an online softmax whose trailing
  all-masked blocks change nothing (a factor of exactly 1, sums of exact zeros). A decode, a
  verification's k+1 queries and a tree node (reading its path's keys in chain order,
  `model.chain_order`) compute a query the same way.
- `rows`: softmax, log-softmax and the inverse-CDF's running sum over the vocabulary, one program a
  row, chunk by chunk in vocabulary order.

Proven where CI runs by Triton's interpreter (`TRITON_INTERPRET=1`, the kernels executed by numpy
on the CPU: the structure, not the GPU's instructions) and on a GPU by `make gpu-check` part
`exact`. The interpreter multiplies bf16 tiles wrongly (it reads their bits as integers), so there
the matmul's tiles are widened to fp32 first (`DOT_FP32`); on a GPU bf16 tiles go to the tensor cores.
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
