#include "norm.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "vec.h"

namespace specroll {
namespace {

inline int lanes(int64_t n, int64_t i) { return static_cast<int>(std::min<int64_t>(16, n - i)); }

void one_row(const NormArgs& a, int64_t row) {
  const int64_t n = a.n, at = row * n;
  const uint16_t* x = a.x + at;
  if (a.residual) {
    for (int64_t i = 0; i < n; i += 16) {
      int c = lanes(n, i);
      store_bf16(a.sum + at + i, _mm512_add_ps(load_bf16(x + i, c), load_bf16(a.residual + at + i, c)), c);
    }
    x = a.sum + at;
  }
  __m512 squares = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    __m512 v = load_bf16(x + i, lanes(n, i));
    squares = _mm512_add_ps(squares, _mm512_mul_ps(v, v));
  }
  const float r = 1.0f / std::sqrt(sum_lanes(squares) / static_cast<float>(n) + a.eps);
  const __m512 scale = _mm512_set1_ps(r);
  for (int64_t i = 0; i < n; i += 16) {
    int c = lanes(n, i);
    __m512 normed = round_bf16(_mm512_mul_ps(load_bf16(x + i, c), scale));
    store_bf16(a.y + at + i, _mm512_mul_ps(normed, load_bf16(a.weight + i, c)), c);
  }
}

}  // namespace

void rms_norm_rows(const NormArgs& a, int64_t begin, int64_t end) {
  for (int64_t row = begin; row < end; ++row) one_row(a, row);
}

void silu_mul_bf16(const uint16_t* gate, const uint16_t* up, uint16_t* out, int64_t begin, int64_t end) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = begin; i < end; i += 16) {
    int c = lanes(end, i);
    __m512 g = load_bf16(gate + i, c);
    __m512 silu = _mm512_div_ps(g, _mm512_add_ps(one, exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), g))));
    store_bf16(out + i, _mm512_mul_ps(round_bf16(silu), load_bf16(up + i, c)), c);
  }
}

}  // namespace specroll
