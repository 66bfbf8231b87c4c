// Vector helpers shared by specroll's CPU kernels (AVX-512F), each with one fixed order of arithmetic,
// so that a value's bits depend on its inputs alone: never on the lane it sits in, the call's size,
// the thread that computes it or the CPU model.
#pragma once
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

namespace specroll {

using bf16 = uint16_t;

inline float bf16_to_float(bf16 h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// fp32 -> bf16, round to nearest even, NaN to the quiet NaN 0x7fc0: torch's own conversion
// (c10::BFloat16), denormals kept.
inline bf16 float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::isnan(f)) return 0x7fc0;
  return static_cast<bf16>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

// 16 bf16 values (masked: lanes past `count` read as +0) widened to fp32; widening is exact.
inline __m512 load_bf16(const bf16* p, int count = 16) {
  __mmask16 m = count >= 16 ? 0xffff : static_cast<__mmask16>((1u << count) - 1u);
  __m256i raw = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}

// 16 fp32 -> bf16 as `float_to_bf16`, stored (masked to `count` lanes).
inline void store_bf16(bf16* p, __m512 v, int count = 16) {
  __m512i bits = _mm512_castps_si512(v);
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff)), lsb), 16);
  __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  rounded = _mm512_mask_mov_epi32(rounded, nan, _mm512_set1_epi32(0x7fc0));
  __mmask16 m = count >= 16 ? 0xffff : static_cast<__mmask16>((1u << count) - 1u);
  _mm256_mask_storeu_epi16(p, m, _mm512_cvtepi32_epi16(rounded));
}

// v rounded to bf16 (as `float_to_bf16`) and widened back to fp32.
inline __m512 round_bf16(__m512 v) {
  __m512i bits = _mm512_castps_si512(v);
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  __m512i rounded = _mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff)), lsb);
  rounded = _mm512_and_si512(rounded, _mm512_set1_epi32(static_cast<int>(0xffff0000u)));
  __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  return _mm512_castsi512_ps(_mm512_mask_mov_epi32(rounded, nan, _mm512_set1_epi32(0x7fc00000)));
}

// The sum of 16 lanes by one fixed tree: halves added (lane i + lane i+8, ...), four levels.
inline float sum_lanes(__m512 v) {
  __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
  __m128 d = _mm_add_ss(c, _mm_movehdup_ps(c));
  return _mm_cvtss_f32(d);
}

// exp(x) in fp32 by FMA alone (no library call, no table): x = n ln2 + r with |r| <= ln2/2, a degree-6
// polynomial for exp(r), scaled by 2^n. Relative error about 2 ulp; exp(x) = 0 below -87.3 (no
// denormals), +inf above 88.72 (past fp32's largest), and exp(88) for arguments in (88, 88.72].
inline __m512 exp_ps(__m512 x) {
  const __m512 hi = _mm512_set1_ps(88.0f), lo = _mm512_set1_ps(-87.3f);
  __mmask16 underflow = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  __mmask16 overflow = _mm512_cmp_ps_mask(x, _mm512_set1_ps(88.72283935546875f), _CMP_GT_OQ);
  x = _mm512_min_ps(x, hi);
  x = _mm512_max_ps(x, lo);
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  __m512i scale = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  __m512 out = _mm512_mul_ps(p, _mm512_castsi512_ps(scale));
  out = _mm512_mask_mov_ps(out, overflow, _mm512_set1_ps(__builtin_inff()));
  return _mm512_mask_mov_ps(out, underflow, _mm512_setzero_ps());
}

}  // namespace specroll
