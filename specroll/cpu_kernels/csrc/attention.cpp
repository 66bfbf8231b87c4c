#include "attention.h"

#include <immintrin.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "vec.h"

namespace specroll {
namespace {

constexpr int kMaxChunks = 16;  // head dims up to 256

struct Scratch {
  std::vector<int64_t> columns;  // the cache columns a query reads, in order
  std::vector<float> scores;     // (G, padded) scores, then probabilities
};

int64_t seen_columns(const AttentionArgs& a, int64_t b, int64_t t, int64_t* out) {
  const bool* mask = a.mask + b * a.m_b + t * a.m_t;
  const int64_t* chain = a.columns ? a.columns + b * a.c_b + t * a.c_t : nullptr;
  int64_t n = 0;
  for (int64_t j = 0; j < a.L; ++j)
    if (mask[j * a.m_l]) out[n++] = chain ? chain[j] : j;
  return n;
}

// scores[g][i] = scale q_g . k_cols[i]
void scores_of(const AttentionArgs& a, const uint16_t* keys, const int64_t* cols, int64_t n,
               const __m512 (*q)[kMaxChunks], int G, int chunks, float* scores, int64_t padded) {
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t* key = keys + cols[i] * a.k_l;
    __m512 kv[kMaxChunks];
    for (int c = 0; c < chunks; ++c) kv[c] = load_bf16(key + 16 * c);
    for (int g = 0; g < G; ++g) {
      __m512 p = _mm512_mul_ps(q[g][0], kv[0]);
      for (int c = 1; c < chunks; ++c) p = _mm512_fmadd_ps(q[g][c], kv[c], p);
      scores[g * padded + i] = sum_lanes(p);
    }
  }
}

// scores -> exp(score - max) in place (0 past n); returns their sum
float probabilities(float* s, int64_t n) {
  float top = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) top = std::max(top, s[i]);
  const __m512 shift = _mm512_set1_ps(top);
  __m512 total = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    int count = static_cast<int>(std::min<int64_t>(16, n - i));
    __mmask16 m = count == 16 ? 0xffff : static_cast<__mmask16>((1u << count) - 1u);
    __m512 e = _mm512_maskz_mov_ps(m, exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + i), shift)));
    _mm512_storeu_ps(s + i, e);
    total = _mm512_add_ps(total, e);
  }
  return sum_lanes(total);
}

void one_item(const AttentionArgs& a, int64_t item, Scratch& scratch) {
  const int64_t t = item % a.T, h = (item / a.T) % a.Hkv, b = item / (a.T * a.Hkv);
  const int G = static_cast<int>(a.H / a.Hkv), chunks = static_cast<int>(a.D / 16);
  int64_t* cols = scratch.columns.data();
  const int64_t n = seen_columns(a, b, t, cols), padded = (a.L + 15) / 16 * 16;
  float* scores = scratch.scores.data();
  __m512 q[8][kMaxChunks];
  const __m512 scale = _mm512_set1_ps(a.scale);
  for (int g0 = 0; g0 < G; g0 += 8) {
    const int g_count = std::min(8, G - g0);
    for (int g = 0; g < g_count; ++g) {
      const uint16_t* row = a.q + b * a.q_b + (h * G + g0 + g) * a.q_h + t * a.q_t;
      for (int c = 0; c < chunks; ++c) q[g][c] = _mm512_mul_ps(load_bf16(row + 16 * c), scale);
    }
    const int64_t kv_offset = b * a.k_b + h * a.k_h;
    scores_of(a, a.k + kv_offset, cols, n, q, g_count, chunks, scores, padded);
    float totals[8];
    for (int g = 0; g < g_count; ++g) totals[g] = probabilities(scores + g * padded, n);
    __m512 acc[8][kMaxChunks];
    for (int g = 0; g < g_count; ++g)
      for (int c = 0; c < chunks; ++c) acc[g][c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t* value = a.v + kv_offset + cols[i] * a.k_l;
      __m512 vv[kMaxChunks];
      for (int c = 0; c < chunks; ++c) vv[c] = load_bf16(value + 16 * c);
      for (int g = 0; g < g_count; ++g) {
        __m512 p = _mm512_set1_ps(scores[g * padded + i]);
        for (int c = 0; c < chunks; ++c) acc[g][c] = _mm512_fmadd_ps(p, vv[c], acc[g][c]);
      }
    }
    for (int g = 0; g < g_count; ++g) {
      uint16_t* row = a.out + b * a.o_b + (h * G + g0 + g) * a.o_h + t * a.o_t;
      const __m512 total = _mm512_set1_ps(totals[g]);
      for (int c = 0; c < chunks; ++c) store_bf16(row + 16 * c, _mm512_div_ps(acc[g][c], total));
    }
  }
}

}  // namespace

void attention_bf16(const AttentionArgs& a, int64_t begin, int64_t end) {
  Scratch scratch;
  scratch.columns.resize(a.L);
  const int64_t padded = (a.L + 15) / 16 * 16;
  scratch.scores.resize(8 * padded);
  for (int64_t item = begin; item < end; ++item) one_item(a, item, scratch);
}

}  // namespace specroll
