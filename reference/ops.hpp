// The reference's operations: pure functions of explicit parameters, float32 or float64
// (T = activation type; weights are always float, dequantized once by model/). Obviously
// correct over fast: plain loops, one formula each. diff's hypothesis replay calls the same
// functions with variant parameters (W transposed, wrong pairing, other positions, no mask,
// 1/d scale, other GQA mapping), so every variant is a parameter, never a copy.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "model/rope_scaling.hpp"

namespace tapdiff::ref {

// RoPE pairing (see model/config.hpp): norm rotates (x[2i], x[2i+1]), neox (x[i], x[i+n_rot/2]).
enum class Pairing { norm, neox };

// Pair i's angle θ (p · base^(-2i/n_rot) / f_i) under the model's RoPE scaling:
//   linear: θ / factor;
//   yarn:   θ / factor · (1 − e) + θ · e, e the share of the pair kept unscaled: 1 below the pair
//           index at which a wave turns beta_fast times in the original context, 0 above the one at
//           which it turns beta_slow times, linear between (the YaRN paper's ramp, as HF's
//           _compute_yarn_parameters computes it).
inline double rope_scaled_angle(double theta, int i, int n_rot, float base, const RopeScaling& s) {
  if (s.type == RopeScalingType::linear) return theta / s.factor;
  if (s.type != RopeScalingType::yarn) return theta;
  // The pair index whose wavelength 2π base^(2i/n_rot) fits `turns` times in n_ctx_orig.
  const auto pair_turning = [&](double turns) {
    return n_rot * std::log(s.n_ctx_orig / (turns * 2 * M_PI)) / (2 * std::log(double(base)));
  };
  const double low = std::max(0.0, std::floor(pair_turning(s.beta_fast)));
  const double high = std::min(double(n_rot - 1), std::ceil(pair_turning(s.beta_slow)));
  const double ramp = std::clamp((i - low) / std::max(0.001, high - low), 0.0, 1.0);
  const double kept = 1 - ramp;
  return theta / s.factor * (1 - kept) + theta * kept;
}

// The magnitude on cos and sin: YaRN's attn_factor · (0.1 ln factor + 1), LongRoPE's attn_factor;
// 1 otherwise. (LongRoPE's angles take its factors as frequency factors.)
inline double rope_magnitude(const RopeScaling& s) {
  if (s.type == RopeScalingType::longrope) return s.attn_factor;
  return s.type == RopeScalingType::yarn ? s.attn_factor * (0.1 * std::log(double(s.factor)) + 1) : 1.0;
}

// Which kv head serves query head h.
//   grouped: h / (n_head / n_head_kv) — consecutive query heads share a kv head (llama.cpp, HF)
//   modulo:  h % n_head_kv            — the classic GQA bug
enum class GqaMap { grouped, modulo };

inline int kv_head_for(int h, int n_head, int n_head_kv, GqaMap map) {
  return map == GqaMap::grouped ? h / (n_head / n_head_kv) : h % n_head_kv;
}

// out[i] = x[i] / sqrt(mean(x²) + eps) * w[i]; w == nullptr leaves the weight out.
template <typename T>
void rmsnorm(const T* x, const float* w, int n, float eps, T* out) {
  T ss = 0;
  for (int i = 0; i < n; ++i) ss += x[i] * x[i];
  const T inv = T(1) / std::sqrt(ss / T(n) + T(eps));
  for (int i = 0; i < n; ++i) out[i] = x[i] * inv * (w ? T(w[i]) : T(1));
}

// Σ_i w[i] x[i], the dot product of every matvec row: sixteen partial sums (element i into
// sum i % 16) added in order at the end. One running sum would make every add wait for the
// last, and a decode step would wait on that chain rather than on memory. The sixteen sums are
// one vector (one AVX-512 register where the CPU has it, four SSE registers elsewhere; the
// top CMakeLists keeps the multiplies and adds unfused). A decode step reads every weight once
// and the hardware prefetchers alone keep too few lines in flight, so each line 16 KB ahead is
// asked for, into L2 (bench/bench_reference.cpp measures the step). On an AMD EPYC VM, 4 KB
// ahead into L1 had a 64-token SmolLM2 F32 run 1.22 times as long (farm-bench -n 6: A/B wall
// 0.821 of `tapdiff run --backend reference` against the build with 4 KB; 8 KB into L2 0.834,
// 4 KB into L2 0.904).
template <typename T>
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "default")))
#endif
T dot(const float* w, const T* x, int n) {
  constexpr int kSums = 16, kPrefetchAhead = 4096;  // floats
  typedef float Weights16 __attribute__((vector_size(kSums * sizeof(float))));
  typedef T Sums16 __attribute__((vector_size(kSums * sizeof(T))));
  Sums16 sums = {};
  int i = 0;
  for (; i + kSums <= n; i += kSums) {
    __builtin_prefetch(w + i + kPrefetchAhead, 0, 2);
    Weights16 wi;
    Sums16 xi;
    std::memcpy(&wi, w + i, sizeof wi);
    std::memcpy(&xi, x + i, sizeof xi);
    sums += __builtin_convertvector(wi, Sums16) * xi;
  }
  for (int j = 0; i < n; ++i, ++j) sums[j] += T(w[i]) * x[i];
  T acc = 0;
  for (int j = 0; j < kSums; ++j) acc += sums[j];
  return acc;
}

// y = W x for GGUF's row-major W [n_out, n_in] (ne = {n_in, n_out}):
//   y[o] = Σ_i W[o, i] x[i]
// transposed: W read as [n_in, n_out] instead, y[o] = Σ_i W[i, o] x[i] (the layout bug).
template <typename T>
void matvec(const float* W, const T* x, int n_in, int n_out, T* y, bool transposed = false) {
#pragma omp parallel for schedule(static) if (std::int64_t(n_in) * n_out > (1 << 16))
  for (int o = 0; o < n_out; ++o) {
    if (!transposed) {
      y[o] = dot(W + std::int64_t(o) * n_in, x, n_in);
    } else {
      T acc = 0;
      for (int i = 0; i < n_in; ++i) acc += T(W[std::int64_t(i) * n_out + o]) * x[i];
      y[o] = acc;
    }
  }
}

template <typename T>
void add_bias(T* x, const float* b, int n) {
  for (int i = 0; i < n; ++i) x[i] += T(b[i]);
}

// Rotates the first n_rot dims of each of n_heads heads (head_dim apart) by position p:
//   θ_i = p · base^(-2i / n_rot) / f_i,  i < n_rot/2
// f_i: the model's frequency factors (Llama 3.1's rope_freqs.weight), 1 without them.
//   (a, b) ← m · (a cos θ_i − b sin θ_i,  a sin θ_i + b cos θ_i)
// m is 1 but under YaRN, which with linear scaling changes θ_i too (rope_scaled_angle).
template <typename T>
void rope(T* x, int n_heads, int head_dim, int n_rot, std::int64_t position, float base,
          Pairing pairing, const float* freq_factors = nullptr, const RopeScaling& scaling = {}) {
  const int half = n_rot / 2;
  const double m = rope_magnitude(scaling);
  for (int i = 0; i < half; ++i) {
    const double theta = rope_scaled_angle(double(position) * std::pow(double(base), -2.0 * i / n_rot) /
                                               (freq_factors ? double(freq_factors[i]) : 1.0),
                                           i, n_rot, base, scaling);
    const T c = T(std::cos(theta) * m), s = T(std::sin(theta) * m);
    const int ia = pairing == Pairing::norm ? 2 * i : i;
    const int ib = pairing == Pairing::norm ? 2 * i + 1 : i + half;
    for (int h = 0; h < n_heads; ++h) {
      T* head = x + std::int64_t(h) * head_dim;
      const T a = head[ia], b = head[ib];
      head[ia] = a * c - b * s;
      head[ib] = a * s + b * c;
    }
  }
}

// In place: x[i] = exp(x[i] − max) / Σ exp(x[j] − max).
template <typename T>
void softmax(T* x, int n) {
  if (n <= 0) return;
  T max = x[0];
  for (int i = 1; i < n; ++i) max = x[i] > max ? x[i] : max;
  T sum = 0;
  for (int i = 0; i < n; ++i) sum += (x[i] = std::exp(x[i] - max));
  for (int i = 0; i < n; ++i) x[i] /= sum;
}

template <typename T>
T silu(T x) {
  return x / (T(1) + std::exp(-x));
}

// out[i] = silu(gate[i]) · up[i]
template <typename T>
void swiglu(const T* gate, const T* up, int n, T* out) {
  for (int i = 0; i < n; ++i) out[i] = silu(gate[i]) * up[i];
}

// GELU, tanh approximation (PyTorch's approximate="tanh", ggml_gelu).
template <typename T>
T gelu_tanh(T x) {
  return T(0.5) * x * (T(1) + std::tanh(T(0.7978845608028654) * (x + T(0.044715) * x * x * x)));
}

// out[i] = gelu_tanh(gate[i]) · up[i] (Gemma's GeGLU)
template <typename T>
void geglu(const T* gate, const T* up, int n, T* out) {
  for (int i = 0; i < n; ++i) out[i] = gelu_tanh(gate[i]) * up[i];
}

// A mixture of experts' routing: the softmax of the router's logits over all n_expert experts,
// the n_used most probable kept (of equal probabilities, the lower index) and renormalized to
// sum 1, every other expert 0. routing[n_expert] holds the weights; experts[n_used] the kept
// experts in ascending order.
template <typename T>
void moe_route(const T* logits, int n_expert, int n_used, T* routing, int* experts) {
  std::copy(logits, logits + n_expert, routing);
  softmax(routing, n_expert);
  std::vector<bool> kept(static_cast<std::size_t>(n_expert), false);
  T kept_sum = 0;
  for (int k = 0; k < n_used; ++k) {
    int best = -1;
    for (int e = 0; e < n_expert; ++e)
      if (!kept[std::size_t(e)] && (best < 0 || routing[e] > routing[best])) best = e;
    kept[std::size_t(best)] = true;
    kept_sum += routing[best];
  }
  int k = 0;
  for (int e = 0; e < n_expert; ++e) {
    if (kept[std::size_t(e)]) experts[k++] = e;
    routing[e] = kept[std::size_t(e)] ? routing[e] / kept_sum : T(0);
  }
}

// x[i] = cap · tanh(x[i] / cap): Gemma 2's soft-capping; cap 0 leaves x alone.
template <typename T>
void softcap(T* x, std::int64_t n, float cap) {
  if (cap <= 0) return;
  for (std::int64_t i = 0; i < n; ++i) x[i] = T(cap) * std::tanh(x[i] / T(cap));
}

struct AttentionShape {
  int n_head;
  int n_head_kv;
  int head_dim;
};

// One query position against keys/values rows [key_begin, key_end) of K, V ([n_rows][kv_dim],
// kv_dim = n_head_kv · head_dim):
//   s_t = softcap(scale · q_h · K[t, g(h)]),  p = softmax(s),  out_h = Σ_t p_t V[t, g(h)]
// probs (optional) receives p for head h at probs[h · probs_stride + t] for t in the range.
// Causality is the caller's choice of key_end: the honest value is position + 1.
template <typename T>
void attention(const T* q, const T* K, const T* V, std::int64_t key_begin, std::int64_t key_end,
               AttentionShape shape, float scale, GqaMap map, T* out, T* probs = nullptr,
               std::int64_t probs_stride = 0, float score_cap = 0) {
  const int kv_dim = shape.n_head_kv * shape.head_dim;
  const std::int64_t n = key_end - key_begin;
  std::vector<T> scores(static_cast<std::size_t>(n > 0 ? n : 0));
  for (int h = 0; h < shape.n_head; ++h) {
    const int g = kv_head_for(h, shape.n_head, shape.n_head_kv, map);
    const T* qh = q + std::int64_t(h) * shape.head_dim;
    for (std::int64_t t = 0; t < n; ++t) {
      const T* k = K + (key_begin + t) * kv_dim + std::int64_t(g) * shape.head_dim;
      T dot = 0;
      for (int d = 0; d < shape.head_dim; ++d) dot += qh[d] * k[d];
      scores[t] = T(scale) * dot;
    }
    softcap(scores.data(), n, score_cap);
    softmax(scores.data(), static_cast<int>(n));
    T* oh = out + std::int64_t(h) * shape.head_dim;
    for (int d = 0; d < shape.head_dim; ++d) oh[d] = 0;
    for (std::int64_t t = 0; t < n; ++t) {
      const T* v = V + (key_begin + t) * kv_dim + std::int64_t(g) * shape.head_dim;
      for (int d = 0; d < shape.head_dim; ++d) oh[d] += scores[t] * v[d];
      if (probs) probs[std::int64_t(h) * probs_stride + key_begin + t] = scores[t];
    }
  }
}

}  // namespace tapdiff::ref
