#include "rotary.h"

#include <immintrin.h>

#include <cstring>

#include "vec.h"

namespace specroll {
namespace {

// out = bf16(bf16(x cos) + bf16(rotate_half(x) sin)), rotate_half(x) = (-x2, x1)
void rotate(const uint16_t* x, const uint16_t* cos, const uint16_t* sin, uint16_t* out, int64_t D) {
  const int64_t half = D / 2;
  for (int64_t i = 0; i < half; i += 16) {
    __m512 lo = load_bf16(x + i), hi = load_bf16(x + half + i);
    __m512 neg_hi = _mm512_sub_ps(_mm512_setzero_ps(), hi);
    __m512 out_lo = _mm512_add_ps(round_bf16(_mm512_mul_ps(lo, load_bf16(cos + i))),
                                  round_bf16(_mm512_mul_ps(neg_hi, load_bf16(sin + i))));
    __m512 out_hi = _mm512_add_ps(round_bf16(_mm512_mul_ps(hi, load_bf16(cos + half + i))),
                                  round_bf16(_mm512_mul_ps(lo, load_bf16(sin + half + i))));
    store_bf16(out + i, out_lo);
    store_bf16(out + half + i, out_hi);
  }
}

}  // namespace

void rotary_write(const RotaryWriteArgs& a, int64_t begin, int64_t end) {
  const int64_t D = a.D, width = (a.H + 2 * a.Hkv) * D;
  for (int64_t row = begin; row < end; ++row) {
    const int64_t b = row / a.T, t = row % a.T;
    const uint16_t* in = a.qkv + row * width;
    const uint16_t *cos = a.cos + row * D, *sin = a.sin + row * D;
    for (int64_t h = 0; h < a.H; ++h) rotate(in + h * D, cos, sin, a.q + ((b * a.H + h) * a.T + t) * D, D);
    for (int64_t h = 0; h < a.Hkv; ++h) {
      const int64_t cache_row = a.write_index[(b * a.Hkv + h) * a.T + t];
      rotate(in + (a.H + h) * D, cos, sin, a.k_cache + cache_row * D, D);
      std::memcpy(a.v_cache + cache_row * D, in + (a.H + a.Hkv + h) * D, D * sizeof(uint16_t));
    }
  }
}

}  // namespace specroll
