// Row-wise bf16 kernels, each row one fixed sequence of fp32 operations (rounded to bf16 where torch's
// bf16 arithmetic rounds): RMSNorm, a residual add fused with the RMSNorm after it, and SiLU(gate) * up.
#pragma once
#include <cstdint>

namespace specroll {

// y = bf16(bf16(x * r) * w) with r = 1 / sqrt(mean(x^2) + eps), the mean a sum by 16-lane partial sums
// in column order and one fixed tree; with `residual`, x = bf16(x + residual) first, written to `sum`.
struct NormArgs {
  const uint16_t* x;
  const uint16_t* residual;  // or null
  const uint16_t* weight;
  uint16_t* sum;  // x + residual, (rows, n); null without a residual
  uint16_t* y;
  int64_t n;  // columns; every tensor is (rows, n) contiguous
  float eps;
};
void rms_norm_rows(const NormArgs& a, int64_t begin, int64_t end);

// out = bf16(bf16(g / (1 + exp(-g))) * u), elementwise over `count` values from `begin`
void silu_mul_bf16(const uint16_t* gate, const uint16_t* up, uint16_t* out, int64_t begin, int64_t end);

}  // namespace specroll
