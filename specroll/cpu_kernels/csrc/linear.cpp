#include "linear.h"

#include <immintrin.h>

#include "vec.h"

#ifndef SPECROLL_PREFETCH
#define SPECROLL_PREFETCH 32
#endif

namespace specroll {
namespace {

constexpr int kMaxRows = 6;
constexpr int64_t kPrefetch = SPECROLL_PREFETCH;  // pair steps ahead: one 64-byte line of each block a step  // rows a register tile holds: 6 x 4 accumulators, 4 weights, 1 input

// One pair step of VDPBF16PS, as the instruction (native) or as its definition in AVX-512F FMAs:
// acc += x_odd * w_odd, then acc += x_even * w_even (both products exact in fp32), with DAZ and
// FTZ in force (the caller sets MXCSR for the emulation).
template <bool kNative>
inline __m512 dot_pair(__m512 acc, __m512i x, __m512i w) {
  if constexpr (kNative) {
    return _mm512_dpbf16_ps(acc, (__m512bh)x, (__m512bh)w);
  } else {
    const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
    __m512 x_odd = _mm512_castsi512_ps(_mm512_and_si512(x, high));
    __m512 w_odd = _mm512_castsi512_ps(_mm512_and_si512(w, high));
    __m512 x_even = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
    __m512 w_even = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
    acc = _mm512_fmadd_ps(x_odd, w_odd, acc);
    return _mm512_fmadd_ps(x_even, w_even, acc);
  }
}

// Rows [m0, m0 + R) by blocks [b0, b0 + B): R x B accumulators over every k pair in order.
template <int R, int B, bool kNative>
void tile(const LinearArgs& a, int64_t m0, int64_t b0) {
  const int64_t pairs = a.K / 2;
  __m512 acc[R][B];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < B; ++j) acc[r][j] = _mm512_setzero_ps();
  const uint32_t* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = reinterpret_cast<const uint32_t*>(a.x + (m0 + r) * a.x_stride);
  // the tile's B blocks interleaved pair by pair: one stream of B x 64 bytes a pair step
  const uint32_t* tile_w = a.w + b0 * pairs * 16;
  for (int64_t p = 0; p < pairs; ++p) {
    // the hardware's prefetch alone fell behind where the rows' multiply-adds slow the stream
    for (int j = 0; j < B; ++j)
      _mm_prefetch(reinterpret_cast<const char*>(tile_w + ((p + kPrefetch) * B + j) * 16), _MM_HINT_T0);
    __m512i w[B];
    for (int j = 0; j < B; ++j) w[j] = _mm512_loadu_si512(tile_w + (p * B + j) * 16);
    for (int r = 0; r < R; ++r) {
      __m512i x = _mm512_set1_epi32(static_cast<int>(rows[r][p]));
      for (int j = 0; j < B; ++j) acc[r][j] = dot_pair<kNative>(acc[r][j], x, w[j]);
    }
  }
  for (int j = 0; j < B; ++j) {
    int64_t n0 = (b0 + j) * 16;
    __m512 bias = a.bias ? load_bf16(a.bias + n0) : _mm512_setzero_ps();
    for (int r = 0; r < R; ++r) {
      __m512 out = a.bias ? _mm512_add_ps(acc[r][j], bias) : acc[r][j];
      if (a.fp32_out)
        _mm512_storeu_ps(static_cast<float*>(a.y) + (m0 + r) * a.y_stride + n0, out);
      else
        store_bf16(static_cast<uint16_t*>(a.y) + (m0 + r) * a.y_stride + n0, out);
    }
  }
}

template <int B, bool kNative>
void rows_of_tile(const LinearArgs& a, int64_t b0) {
  int64_t m = 0;
  for (; m + kMaxRows <= a.M; m += kMaxRows) tile<kMaxRows, B, kNative>(a, m, b0);
  switch (a.M - m) {
    case 5: tile<5, B, kNative>(a, m, b0); break;
    case 4: tile<4, B, kNative>(a, m, b0); break;
    case 3: tile<3, B, kNative>(a, m, b0); break;
    case 2: tile<2, B, kNative>(a, m, b0); break;
    case 1: tile<1, B, kNative>(a, m, b0); break;
    default: break;
  }
}

template <bool kNative>
void tiles(const LinearArgs& a, int64_t tile_begin, int64_t tile_end) {
  const int64_t num_blocks = a.N / 16;
  for (int64_t t = tile_begin; t < tile_end; ++t) {
    int64_t b0 = t * kTileBlocks;
    switch (std::min(kTileBlocks, num_blocks - b0)) {
      case 4: rows_of_tile<4, kNative>(a, b0); break;
      case 3: rows_of_tile<3, kNative>(a, b0); break;
      case 2: rows_of_tile<2, kNative>(a, b0); break;
      default: rows_of_tile<1, kNative>(a, b0); break;
    }
  }
}

}  // namespace

int64_t linear_tiles(int64_t N) { return (N / 16 + kTileBlocks - 1) / kTileBlocks; }

void linear_bf16(const LinearArgs& a, int64_t tile_begin, int64_t tile_end, bool native_bf16) {
  if (native_bf16) {
    tiles<true>(a, tile_begin, tile_end);
    return;
  }
  const unsigned int saved = _mm_getcsr();
  _mm_setcsr(saved | 0x8040);  // DAZ | FTZ: the instruction's own handling of denormals
  tiles<false>(a, tile_begin, tile_end);
  _mm_setcsr(saved);
}

}  // namespace specroll
