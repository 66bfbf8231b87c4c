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

// scores[g][i] = scale q_g . k_cols[i], one key at a time (head dims other than 64 and 128): the
// same operations as `scores_of`, so the same bits.
void scores_of_any(const AttentionArgs& a, const uint16_t* keys, const int64_t* cols, int64_t n,
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

// The 16 sums of P[0..15]'s lanes, P[j]'s sum in lane j, each by `sum_lanes`'s tree (lane l + l+8,
// then + l+4, + l+2, + l+1): the same bits as 16 calls of it, in 46 instructions instead of 128.
inline __m512 sum_lanes_16(const __m512* P) {
  __m512 A[8], B[4], C[2];
  for (int i = 0; i < 8; ++i)  // lanes 0-7: P[2i]'s l + l+8; lanes 8-15: P[2i+1]'s
    A[i] = _mm512_add_ps(_mm512_shuffle_f32x4(P[2 * i], P[2 * i + 1], 0x44),
                         _mm512_shuffle_f32x4(P[2 * i], P[2 * i + 1], 0xEE));
  for (int i = 0; i < 4; ++i)  // 128-bit lane k: key 4i + k's l + l+4
    B[i] = _mm512_add_ps(_mm512_shuffle_f32x4(A[2 * i], A[2 * i + 1], 0x88),
                         _mm512_shuffle_f32x4(A[2 * i], A[2 * i + 1], 0xDD));
  for (int i = 0; i < 2; ++i)  // lane k: keys 8i + k (two values), 8i + 4 + k (two values)
    C[i] = _mm512_add_ps(_mm512_shuffle_ps(B[2 * i], B[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(B[2 * i], B[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  __m512 D = _mm512_add_ps(_mm512_shuffle_ps(C[0], C[1], _MM_SHUFFLE(2, 0, 2, 0)),
                           _mm512_shuffle_ps(C[0], C[1], _MM_SHUFFLE(3, 1, 3, 1)));
  // position 4k + m holds key 4m + k
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(order, D);
}

// scores[g][i] = scale q_g . k_cols[i]: 16 keys at a time, widened once into `block`, their dot
// products over the head dim as 16-lane multiply-adds in chunk order, then `sum_lanes_16`.
template <int C>
void scores_of(const AttentionArgs& a, const uint16_t* keys, const int64_t* cols, int64_t n,
               const __m512 (*q)[kMaxChunks], int G, float* scores, int64_t padded) {
  alignas(64) float block[16][C * 16];
  for (int64_t i0 = 0; i0 < n; i0 += 16) {
    const int count = static_cast<int>(std::min<int64_t>(16, n - i0));
    for (int j = 0; j < 16; ++j)
      for (int c = 0; c < C; ++c)
        _mm512_store_ps(&block[j][16 * c], j < count ? load_bf16(keys + cols[i0 + j] * a.k_l + 16 * c)
                                                     : _mm512_setzero_ps());
    for (int g = 0; g < G; ++g) {
      __m512 P[16];
      for (int j = 0; j < 16; ++j) {
        P[j] = _mm512_mul_ps(q[g][0], _mm512_load_ps(&block[j][0]));
        for (int c = 1; c < C; ++c) P[j] = _mm512_fmadd_ps(q[g][c], _mm512_load_ps(&block[j][16 * c]), P[j]);
      }
      _mm512_storeu_ps(scores + g * padded + i0, sum_lanes_16(P));
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

// acc[g] = sum over the keys, in order, of probability[g][i] v_cols[i]: one multiply-add a key for
// each (query head, 16 values), every head's accumulators held in registers (C and G known here).
template <int C, int G>
void weighted_values_fixed(const AttentionArgs& a, const uint16_t* values, const int64_t* cols, int64_t n,
                           const float* probs, int64_t padded, __m512 (*out)[kMaxChunks]) {
  __m512 acc[G][C];
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < C; ++c) acc[g][c] = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t* value = values + cols[i] * a.k_l;
    __m512 vv[C];
    for (int c = 0; c < C; ++c) vv[c] = load_bf16(value + 16 * c);
    for (int g = 0; g < G; ++g) {
      __m512 p = _mm512_set1_ps(probs[g * padded + i]);
      for (int c = 0; c < C; ++c) acc[g][c] = _mm512_fmadd_ps(p, vv[c], acc[g][c]);
    }
  }
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < C; ++c) out[g][c] = acc[g][c];
}

// The same operations for any C and G (up to 8 heads at a time), the accumulators in memory.
void weighted_values_any(const AttentionArgs& a, const uint16_t* values, const int64_t* cols, int64_t n,
                         const float* probs, int64_t padded, int G, int C, __m512 (*acc)[kMaxChunks]) {
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < C; ++c) acc[g][c] = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t* value = values + cols[i] * a.k_l;
    __m512 vv[kMaxChunks];
    for (int c = 0; c < C; ++c) vv[c] = load_bf16(value + 16 * c);
    for (int g = 0; g < G; ++g) {
      __m512 p = _mm512_set1_ps(probs[g * padded + i]);
      for (int c = 0; c < C; ++c) acc[g][c] = _mm512_fmadd_ps(p, vv[c], acc[g][c]);
    }
  }
}

void weighted_values(const AttentionArgs& a, const uint16_t* values, const int64_t* cols, int64_t n,
                     const float* probs, int64_t padded, int G, int C, __m512 (*acc)[kMaxChunks]) {
  if (C == 4) {
    switch (G) {
      case 1: return weighted_values_fixed<4, 1>(a, values, cols, n, probs, padded, acc);
      case 2: return weighted_values_fixed<4, 2>(a, values, cols, n, probs, padded, acc);
      case 3: return weighted_values_fixed<4, 3>(a, values, cols, n, probs, padded, acc);
      case 4: return weighted_values_fixed<4, 4>(a, values, cols, n, probs, padded, acc);
      default: break;
    }
  }
  if (C == 8) {
    switch (G) {
      case 1: return weighted_values_fixed<8, 1>(a, values, cols, n, probs, padded, acc);
      case 2: return weighted_values_fixed<8, 2>(a, values, cols, n, probs, padded, acc);
      default: break;
    }
  }
  weighted_values_any(a, values, cols, n, probs, padded, G, C, acc);
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
    switch (chunks) {
      case 4: scores_of<4>(a, a.k + kv_offset, cols, n, q, g_count, scores, padded); break;
      case 8: scores_of<8>(a, a.k + kv_offset, cols, n, q, g_count, scores, padded); break;
      default: scores_of_any(a, a.k + kv_offset, cols, n, q, g_count, chunks, scores, padded); break;
    }
    float totals[8];
    for (int g = 0; g < g_count; ++g) totals[g] = probabilities(scores + g * padded, n);
    __m512 acc[8][kMaxChunks];
    weighted_values(a, a.v + kv_offset, cols, n, scores, padded, g_count, chunks, acc);
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
