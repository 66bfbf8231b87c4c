"""Rounding an fp32 value to the model's dtype to nearest, ties to even, as torch rounds every op's
result: the same bits on a GPU and in Triton's interpreter, whose fp32 -> bf16 cast truncates.

bf16 is fp32's upper 16 bits, so the rounding is integer arithmetic on fp32's bits: add 0x7FFF plus
the lowest kept bit (ties go to the even one), then clear the low 16 bits. (A NaN may come out as
another NaN or an infinity; no model value is one.) The result stays in fp32, exactly representable
in the dtype: a later cast to it is exact in either runtime.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def rounded(x, dtype: tl.constexpr):
    """x (fp32) rounded to `dtype` to nearest even, returned as fp32."""
    if dtype == tl.bfloat16:
        bits = x.to(tl.uint32, bitcast=True)
        bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
        return bits.to(tl.float32, bitcast=True)
    else:
        return x.to(dtype).to(tl.float32)
