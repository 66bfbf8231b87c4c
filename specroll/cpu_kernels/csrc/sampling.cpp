#include "sampling.h"

#include <algorithm>
#include <vector>

namespace specroll {
namespace {

constexpr int kGroup = 8;          // rows summed side by side: independent chains of dependent adds
constexpr int64_t kChunk = 512;    // the running sum is kept at every chunk's end

// The first index past `from` at which the running sum, `sum` just before it, exceeds target; or -1.
template <typename T>
int64_t first_above(const T* p, int64_t from, int64_t to, double sum, double target) {
  for (int64_t j = from; j < to; ++j) {
    sum += static_cast<double>(p[j]);
    if (sum > target) return j;
  }
  return -1;
}

template <typename T>
void group(const T* const* rows, int count, int64_t V, const double* u, int64_t* tokens) {
  const int64_t num_chunks = (V + kChunk - 1) / kChunk;
  std::vector<double> marks(static_cast<size_t>(kGroup * num_chunks));  // marks[g * num_chunks + c]
  double sums[kGroup] = {0.0};
  for (int64_t c = 0; c < num_chunks; ++c) {
    const int64_t to = std::min(V, (c + 1) * kChunk);
    for (int64_t j = c * kChunk; j < to; ++j)
      for (int g = 0; g < count; ++g) sums[g] += static_cast<double>(rows[g][j]);
    for (int g = 0; g < count; ++g) marks[g * num_chunks + c] = sums[g];
  }
  for (int g = 0; g < count; ++g) {
    const double* mark = marks.data() + g * num_chunks;
    const double target = u[g] * mark[num_chunks - 1];
    const int64_t c = std::upper_bound(mark, mark + num_chunks, target) - mark;  // first chunk ending above
    int64_t token = V - 1;
    if (c < num_chunks) {
      const int64_t found = first_above(rows[g], c * kChunk, std::min(V, (c + 1) * kChunk), c ? mark[c - 1] : 0.0, target);
      if (found >= 0) token = found;
    }
    tokens[g] = token;
  }
}

}  // namespace

template <typename T>
void inverse_cdf_rows(const T* probs, int64_t V, const double* u, int64_t* tokens, int64_t begin, int64_t end) {
  for (int64_t r = begin; r < end; r += kGroup) {
    const int count = static_cast<int>(std::min<int64_t>(kGroup, end - r));
    const T* rows[kGroup];
    for (int g = 0; g < count; ++g) rows[g] = probs + (r + g) * V;
    group(rows, count, V, u + r, tokens + r);
  }
}

template void inverse_cdf_rows<float>(const float*, int64_t, const double*, int64_t*, int64_t, int64_t);
template void inverse_cdf_rows<double>(const double*, int64_t, const double*, int64_t*, int64_t, int64_t);

}  // namespace specroll
