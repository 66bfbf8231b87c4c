// The attention block's elementwise work after its q/k/v projection, in one pass over the new tokens:
// q and k rotated by position with torch's bf16 arithmetic (x cos + rotate_half(x) sin, each product
// and the sum rounded to bf16, so the bits of `model.rope.apply_rotary`), q laid out (B, H, T, D) for
// attention, and each token's k and v written to its KV-cache rows.
#pragma once
#include <cstdint>

namespace specroll {

struct RotaryWriteArgs {
  const uint16_t* qkv;  // (B*T, (H + 2 Hkv) * D) bf16: q's heads, then k's, then v's
  const uint16_t* cos;  // (B*T, D) bf16
  const uint16_t* sin;
  uint16_t* q;        // (B, H, T, D) bf16
  uint16_t* k_cache;  // rows of D bf16 values
  uint16_t* v_cache;
  const int64_t* write_index;  // (B, Hkv, T): the cache row of each new token's k and v
  int64_t T, H, Hkv, D;        // D a multiple of 32
};

// Rows (b, t) [begin, end) of the B*T new tokens.
void rotary_write(const RotaryWriteArgs& a, int64_t begin, int64_t end);

}  // namespace specroll
