"""`python -m specroll.cpu_kernels`: compile specroll's CPU kernels now (`make install` runs it), or say
in one line why this machine runs torch's kernels instead."""

from __future__ import annotations

import sys

from specroll.cpu_kernels.build import load


def main() -> int:
    module, reason = load()
    if module is None:
        print(f"specroll's CPU kernels are not used here: {reason}; exact bf16 runs torch's kernels")
        return 0
    from specroll.cpu_kernels.ops import native_bf16

    pair_steps = "VDPBF16PS" if native_bf16() else "VDPBF16PS's definition in AVX-512F"
    print(f"specroll's CPU kernels are ready (linear pair steps on {pair_steps})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
