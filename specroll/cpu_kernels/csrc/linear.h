// A bf16 linear layer whose every output is one fixed sequence of fp32 operations over its row's
// inputs: y[m][n] = bf16(bias[n] + sum over k pairs in ascending order), each pair added as AVX512-BF16's
// VDPBF16PS defines it (the odd element's product, then the even one's, each rounded to fp32; inputs
// denormal in bf16 read as zero, denormal sums flushed to zero). Nothing depends on how many rows the
// call has, which rows share a tile, or which thread computes them.
#pragma once
#include <cstdint>

namespace specroll {

struct LinearArgs {
  const uint16_t* x;     // (M, K) bf16 rows, `x_stride` elements apart; K even (`packed_k`)
  int64_t x_stride;
  const uint32_t* w;     // packed: tiles of kTileBlocks blocks of 16 outputs (the last tile what is left), each
                         // (K/2 pairs, its blocks, 16 lanes) dwords, a lane's pair (even | odd << 16)
  const uint16_t* bias;  // (N,) bf16 or null
  void* y;               // (M, N) bf16, or fp32 sums unrounded with `fp32_out`, `y_stride` elements apart
  int64_t y_stride;
  bool fp32_out;
  int64_t M, K, N;       // K even, N a multiple of 16
};

// Output columns are cut into tiles of `kTileBlocks` blocks of 16; tiles [begin, end) are computed.
constexpr int64_t kTileBlocks = 4;
int64_t linear_tiles(int64_t N);
void linear_bf16(const LinearArgs& a, int64_t tile_begin, int64_t tile_end, bool native_bf16);

}  // namespace specroll
