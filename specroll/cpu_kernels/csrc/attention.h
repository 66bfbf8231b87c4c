// Softmax attention in bf16 with fp32 arithmetic, each query's output one fixed sequence of operations
// over the keys it sees, in the order it sees them: scores (a dot product over the head dim by 16-lane
// partial sums and one fixed tree), their maximum, exp by `exp_ps`, the sum of the probabilities by
// 16-lane partial sums in key order, and the weighted values by one multiply-add a key, in key order.
// Keys a query may not see are skipped, not masked: neither the read length, nor the number of queries,
// nor the other rows change a query's bits. A tree node given `columns` reads its keys in chain order.
#pragma once
#include <cstdint>

namespace specroll {

struct AttentionArgs {
  const uint16_t* q;  // (B, H, T, D) bf16, strides below, D contiguous
  int64_t q_b, q_h, q_t;
  const uint16_t* k;  // (B, Hkv, L, D) bf16; v has k's strides
  const uint16_t* v;
  int64_t k_b, k_h, k_l;
  const bool* mask;  // (B, 1, T, L) True where query t may read key j (in chain order with columns)
  int64_t m_b, m_t, m_l;
  const int64_t* columns;  // (B, T, L) contiguous in L: chain position j -> cache column; or null
  int64_t c_b, c_t;
  uint16_t* out;  // (B, H, T, D) bf16, strides below
  int64_t o_b, o_h, o_t;
  int64_t B, H, Hkv, T, L, D;
  float scale;
};

// Items are (b, kv head, t) in that order; items [begin, end) are computed.
void attention_bf16(const AttentionArgs& a, int64_t begin, int64_t end);

}  // namespace specroll
