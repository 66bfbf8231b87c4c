"""The kernels' tiles, pure functions of a layer's shape, never of the row count: so one compiled
kernel per layer serves every call and a row's reduction order is its own. No torch, no Triton: the
predictions (`kernels.cost`) and the checks read them anywhere.

- `linear_plan(K, N)`: BLOCK_N output columns and a split of K (`LinearPlan`). At a decode (a few
  rows) one program per column tile leaves most of a GPU idle (SmolLM2's q projection in 64-column
  tiles: 9 programs against an H100's 132 SMs), so K is cut into runs summed apart and added in
  split order (`kernels.linear`).
- `attention_tiles(G_PAD, D)`: key columns a block and warps, so that a block's G x BLOCK_N x D
  products fit a program's registers (sm_90 compiles the 7B shape's without spills); KEY_SPLIT key
  columns a program, whatever the read length.
"""

from __future__ import annotations

from dataclasses import dataclass

BLOCK_M, LINEAR_WARPS = 16, 4  # a decode-sized row tile: 64 rows spill a 7B layer's registers on sm_90
BLOCK_K = 64
TARGET_PROGRAMS = 256  # a decode's programs a layer: about two per SM of an H100/H200 (132)
MIN_SPLIT_TILES = 2  # a split sums at least this many BLOCK_K tiles of K
MAX_BLOCK_N, MIN_BLOCK_N = 32, 16  # attention's key columns a block
VALUES_PER_THREAD = 64  # of one attention block's G x BLOCK_N x D product
KEY_SPLIT = (
    256  # attention's chain columns a program reads (`kernels.attention`): a multiple of every BLOCK_N
)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class LinearPlan:
    """How a (K, N) layer is tiled: BLOCK_N output columns and BLOCK_K columns of K a step, K cut
    into `num_splits` runs of `split_k` columns (the last one may be shorter)."""

    block_n: int
    block_k: int
    num_splits: int
    split_k: int

    def __post_init__(self):
        if self.split_k % self.block_k or self.num_splits < 1:
            raise ValueError(f"a split is whole BLOCK_K tiles: {self}")

    def num_programs(self, M: int, N: int) -> int:
        """Programs launched for M rows."""
        return cdiv(M, BLOCK_M) * cdiv(N, self.block_n) * self.num_splits


def linear_plan(K: int, N: int) -> LinearPlan:
    """The tiles and split for a (K, N) layer, from K and N only: 64 columns a tile where that alone
    gives TARGET_PROGRAMS programs at a decode, else 32 and K split into runs of equal whole tiles of
    64 (the last one shorter), as many as bring a decode's programs to TARGET_PROGRAMS, each run at
    least MIN_SPLIT_TILES tiles."""
    if cdiv(N, 64) >= TARGET_PROGRAMS:
        return LinearPlan(64, BLOCK_K, 1, cdiv(K, BLOCK_K) * BLOCK_K)
    k_tiles, n_tiles = cdiv(K, BLOCK_K), cdiv(N, 32)
    tiles_per_split = min(k_tiles, max(MIN_SPLIT_TILES, cdiv(k_tiles, cdiv(TARGET_PROGRAMS, n_tiles))))
    return LinearPlan(32, BLOCK_K, cdiv(k_tiles, tiles_per_split), tiles_per_split * BLOCK_K)


def attention_tiles(group_pad: int, D: int) -> tuple[int, int]:
    """(BLOCK_N, num_warps) for a key head serving `group_pad` query heads (a power of two) of dim
    D: 32 key columns a block and 4 warps where their products fit, else 16 columns and 8 warps."""
    block_n = max(MIN_BLOCK_N, min(MAX_BLOCK_N, VALUES_PER_THREAD * 128 // (group_pad * D)))
    num_warps = 4 if group_pad * D * block_n <= VALUES_PER_THREAD * 128 else 8
    return block_n, num_warps
