// Inverse-CDF draws over rows of probabilities, the bits of torch's float64 running sum.
#pragma once
#include <cstdint>

namespace specroll {

// For rows [begin, end) of probs (rows, V), contiguous: the first index t whose running sum
// s_t = (...((0 + p_0) + p_1) + ... + p_t), each p converted to double and added in index order, exceeds
// target = u[row] * s_{V-1}; V - 1 where none does (u rounding to the total's top, or NaN).
// That running sum is torch's CPU cumsum in float64 (one sequential double accumulator a row), so the
// token is torch.searchsorted(cumsum(p.double()), target, right=True).clamp(max=V-1)'s, found in about
// one pass over the row and with nothing written but the token.
template <typename T>
void inverse_cdf_rows(const T* probs, int64_t V, const double* u, int64_t* tokens, int64_t begin, int64_t end);

}  // namespace specroll
