// specroll's CPU kernels as torch functions: argument checks and the split of work over threads
// (at::parallel_for over independent items, so a thread count changes no bits).
#include <torch/extension.h>

#include "attention.h"
#include "linear.h"
#include "norm.h"
#include "rotary.h"
#include "sampling.h"

namespace {

const uint16_t* bf16_data(const torch::Tensor& t) { return reinterpret_cast<const uint16_t*>(t.data_ptr()); }
uint16_t* bf16_out(torch::Tensor& t) { return reinterpret_cast<uint16_t*>(t.data_ptr()); }

void check_bf16(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == torch::kBFloat16, name, " must be a bf16 CPU tensor");
}

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& packed, const c10::optional<torch::Tensor>& bias,
                     int64_t out_features, bool native_bf16, bool fp32_out) {
  check_bf16(x, "x");
  TORCH_CHECK(packed.scalar_type() == torch::kInt32 && packed.dim() == 3 && packed.size(2) == 16 &&
                  packed.is_contiguous(), "packed must be (N/16, K/2, 16) int32");
  const int64_t K = packed.size(1) * 2, N = packed.size(0) * 16;
  TORCH_CHECK(x.size(-1) == K || x.size(-1) + 1 == K, "x has ", x.size(-1), " features, the weight ", K);
  auto rows = x.reshape({-1, x.size(-1)});
  if (x.size(-1) != K) rows = torch::constant_pad_nd(rows, {0, 1});
  rows = rows.contiguous();
  auto y = torch::empty({rows.size(0), N}, x.options().dtype(fp32_out ? torch::kFloat32 : torch::kBFloat16));
  specroll::LinearArgs a{bf16_data(rows), K, reinterpret_cast<const uint32_t*>(packed.data_ptr()),
                         bias ? bf16_data(*bias) : nullptr, y.data_ptr(), N, fp32_out, rows.size(0), K, N};
  if (bias) check_bf16(*bias, "bias");
  at::parallel_for(0, specroll::linear_tiles(N), 1, [&](int64_t begin, int64_t end) {
    specroll::linear_bf16(a, begin, end, native_bf16);
  });
  auto shape = x.sizes().vec();
  shape.back() = out_features;
  if (out_features != N) y = y.narrow(1, 0, out_features);
  return y.reshape(shape);
}

torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& mask, const c10::optional<torch::Tensor>& columns, double scale) {
  check_bf16(q, "q");
  check_bf16(k, "keys");
  check_bf16(v, "values");
  TORCH_CHECK(q.stride(3) == 1 && k.stride(3) == 1 && k.strides() == v.strides(), "attention needs D contiguous");
  TORCH_CHECK(mask.scalar_type() == torch::kBool && mask.size(-1) == k.size(2), "mask must be bool (B, 1, T, L)");
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3), Hkv = k.size(1), L = k.size(2);
  TORCH_CHECK(D % 16 == 0 && D <= 256 && H % Hkv == 0, "attention needs D a multiple of 16 up to 256, H a multiple of Hkv");
  torch::Tensor chain;
  if (columns) {
    chain = columns->to(torch::kInt64).contiguous();
    TORCH_CHECK(chain.size(2) == L, "columns must be (B, T, L)");
  }
  auto out = torch::empty({B, T, H, D}, q.options());
  specroll::AttentionArgs a{bf16_data(q), q.stride(0), q.stride(1), q.stride(2),
                            bf16_data(k), bf16_data(v), k.stride(0), k.stride(1), k.stride(2),
                            mask.data_ptr<bool>(), mask.stride(0), mask.stride(2), mask.stride(3),
                            columns ? chain.data_ptr<int64_t>() : nullptr,
                            columns ? chain.stride(0) : 0, columns ? chain.stride(1) : 0,
                            bf16_out(out), out.stride(0), out.stride(2), out.stride(1),
                            B, H, Hkv, T, L, D, static_cast<float>(scale)};
  at::parallel_for(0, B * Hkv * T, 1, [&](int64_t begin, int64_t end) { specroll::attention_bf16(a, begin, end); });
  return out.transpose(1, 2);
}

std::vector<torch::Tensor> norm(const torch::Tensor& x, const c10::optional<torch::Tensor>& residual,
                                const torch::Tensor& weight, double eps) {
  check_bf16(x, "x");
  check_bf16(weight, "weight");
  const int64_t n = x.size(-1);
  TORCH_CHECK(weight.numel() == n && weight.is_contiguous(), "weight must hold ", n, " values");
  auto xs = x.contiguous();
  torch::Tensor res, sum;
  if (residual) {
    check_bf16(*residual, "residual");
    TORCH_CHECK(residual->sizes() == x.sizes(), "residual must have x's shape");
    res = residual->contiguous();
    sum = torch::empty_like(xs);
  }
  auto y = torch::empty_like(xs);
  specroll::NormArgs a{bf16_data(xs), residual ? bf16_data(res) : nullptr, bf16_data(weight),
                       residual ? bf16_out(sum) : nullptr, bf16_out(y), n, static_cast<float>(eps)};
  at::parallel_for(0, xs.numel() / n, 1, [&](int64_t begin, int64_t end) { specroll::rms_norm_rows(a, begin, end); });
  if (residual) return {sum, y};
  return {y};
}

torch::Tensor silu_mul(const torch::Tensor& gate, const torch::Tensor& up) {
  check_bf16(gate, "gate");
  check_bf16(up, "up");
  TORCH_CHECK(gate.sizes() == up.sizes(), "gate and up must have one shape");
  auto g = gate.contiguous(), u = up.contiguous();
  auto out = torch::empty_like(g);
  at::parallel_for(0, g.numel(), 4096, [&](int64_t begin, int64_t end) {
    specroll::silu_mul_bf16(bf16_data(g), bf16_data(u), bf16_out(out), begin, end);
  });
  return out;
}

// SiLU(gate) * up of y's rows (..., 2I) = [gate | up] (a gate and up projection made as one)
torch::Tensor silu_mul_halves(const torch::Tensor& y) {
  check_bf16(y, "y");
  TORCH_CHECK(y.size(-1) % 2 == 0, "y must hold [gate | up]");
  auto rows = y.contiguous();
  const int64_t I = y.size(-1) / 2, num_rows = rows.numel() / (2 * I);
  auto shape = y.sizes().vec();
  shape.back() = I;
  auto out = torch::empty(shape, y.options());
  const uint16_t* in = bf16_data(rows);
  uint16_t* dest = bf16_out(out);
  at::parallel_for(0, num_rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t m = begin; m < end; ++m) specroll::silu_mul_bf16(in + m * 2 * I, in + m * 2 * I + I, dest + m * I, 0, I);
  });
  return out;
}

torch::Tensor rotary_write(const torch::Tensor& qkv, const torch::Tensor& cos, const torch::Tensor& sin,
                           torch::Tensor& k_cache, torch::Tensor& v_cache, const torch::Tensor& write_index,
                           int64_t num_heads, int64_t num_kv_heads) {
  check_bf16(qkv, "qkv");
  check_bf16(k_cache, "the key cache");
  check_bf16(v_cache, "the value cache");
  const int64_t B = qkv.size(0), T = qkv.size(1), D = k_cache.size(-1);
  TORCH_CHECK(qkv.size(2) == (num_heads + 2 * num_kv_heads) * D && D % 32 == 0, "qkv must be (B, T, (H + 2 Hkv) D), D of 32s");
  TORCH_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous(), "the caches must be contiguous");
  TORCH_CHECK(write_index.scalar_type() == torch::kInt64 && write_index.numel() == B * num_kv_heads * T, "write_index must be (B Hkv T,) int64");
  auto rows = qkv.contiguous();
  auto c = cos.to(torch::kBFloat16).expand({B, 1, T, D}).contiguous(), s = sin.to(torch::kBFloat16).expand({B, 1, T, D}).contiguous();
  auto index = write_index.contiguous();
  const int64_t limit = k_cache.numel() / D;
  const int64_t* rows_at = index.data_ptr<int64_t>();
  for (int64_t i = 0; i < index.numel(); ++i)  // a few hundred integers: no torch reduction per layer
    TORCH_CHECK(rows_at[i] >= 0 && rows_at[i] < limit, "write_index outside the cache: row ", rows_at[i]);
  auto q = torch::empty({B, num_heads, T, D}, qkv.options());
  specroll::RotaryWriteArgs a{bf16_data(rows), bf16_data(c), bf16_data(s), bf16_out(q), bf16_out(k_cache), bf16_out(v_cache),
                              index.data_ptr<int64_t>(), T, num_heads, num_kv_heads, D};
  at::parallel_for(0, B * T, 1, [&](int64_t begin, int64_t end) { specroll::rotary_write(a, begin, end); });
  return q;
}

// tokens (N,) int64 drawn by inverse CDF from probs (N, V) float32 or float64 with u (N,) float32 or
// float64 (taken as float64, as torch's u.double() does)
torch::Tensor inverse_cdf(const torch::Tensor& probs, const torch::Tensor& u) {
  TORCH_CHECK(probs.device().is_cpu() && probs.dim() == 2, "probs must be a (N, V) CPU tensor");
  TORCH_CHECK(probs.scalar_type() == torch::kFloat32 || probs.scalar_type() == torch::kFloat64,
              "probs must be float32 or float64");
  TORCH_CHECK(u.device().is_cpu() && u.is_floating_point() && u.numel() == probs.size(0),
              "u must be (N,) floating point, one a row of probs");
  const int64_t N = probs.size(0), V = probs.size(1);
  TORCH_CHECK(V > 0, "probs must have a column");
  auto p = probs.contiguous();
  auto us = u.to(torch::kFloat64).contiguous();
  auto tokens = torch::empty({N}, probs.options().dtype(torch::kInt64));
  int64_t* out = tokens.data_ptr<int64_t>();
  const double* draws = us.data_ptr<double>();
  at::parallel_for(0, (N + 7) / 8, 1, [&](int64_t begin, int64_t end) {
    const int64_t first = begin * 8, last = std::min(N, end * 8);
    if (p.scalar_type() == torch::kFloat32)
      specroll::inverse_cdf_rows(p.data_ptr<float>(), V, draws, out, first, last);
    else
      specroll::inverse_cdf_rows(p.data_ptr<double>(), V, draws, out, first, last);
  });
  return tokens;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("linear", &linear, "bf16 linear layer on a packed weight, every row alone");
  m.def("attention", &attention, "bf16 softmax attention, every query alone");
  m.def("norm", &norm, "RMSNorm of bf16 rows, optionally after a residual add");
  m.def("silu_mul", &silu_mul, "SiLU(gate) * up in bf16");
  m.def("silu_mul_halves", &silu_mul_halves, "SiLU(gate) * up of rows [gate | up]");
  m.def("inverse_cdf", &inverse_cdf, "inverse-CDF draws over rows of probabilities (torch's float64 cumsum, to the bit)");
  m.def("rotary_write", &rotary_write, "q and k rotated, k and v written to the cache, q returned (B, H, T, D)");
}
