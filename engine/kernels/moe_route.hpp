// A mixture of experts' routing, a row (token) per thread. moe_route: the softmax of the
// router's logits over every expert, the n_used largest kept (of equal weights, the lower
// index) and renormalized to sum 1, the others 0 — the dense ffn.routing row. moe_select: the
// kept experts of a routing row, ascending, with their weights, for the experts' GEMMs (a
// separate op so that lockstep's routing row is the one the experts run with).
#pragma once

#include <cstdint>
#include <math.h>

#include "engine/device/stream.hpp"
#include "engine/device/td_hd.hpp"

namespace tapdiff::engine {

struct MoeRouteArgs {
  const float* logits = nullptr;  // (n_rows, n_expert)
  float* routing = nullptr;       // (n_rows, n_expert)
  std::int64_t n_rows = 0;
  int n_expert = 0;
  int n_used = 0;
  // Fault moe-weights-unnormalized: the kept weights left as the softmax gave them.
  bool renormalize = true;
};

struct MoeSelectArgs {
  const float* routing = nullptr;  // (n_rows, n_expert)
  std::int32_t* experts = nullptr;  // (n_rows, n_used), ascending
  float* weights = nullptr;         // (n_rows, n_used)
  std::int64_t n_rows = 0;
  int n_expert = 0;
  int n_used = 0;
};

// Whether expert i outranks expert j: a larger weight, or an equal one and a lower index.
TD_HD inline bool moe_outranks(const float* w, int i, int j) { return w[i] > w[j] || (w[i] == w[j] && i < j); }

// The last kept expert: the one outranked by exactly n_used - 1 others.
TD_HD inline int moe_last_kept(const float* w, int n_expert, int n_used) {
  for (int e = 0; e < n_expert; ++e) {
    int above = 0;
    for (int j = 0; j < n_expert; ++j) above += moe_outranks(w, j, e) ? 1 : 0;
    if (above == n_used - 1) return e;
  }
  return 0;
}

// Whether expert e (weight w_e) is kept, given the last kept one: it is, or it outranks it.
TD_HD inline bool moe_kept(float w_e, int e, float w_last, int last) {
  return e == last || w_e > w_last || (w_e == w_last && e < last);
}

TD_HD inline void moe_route_row(const MoeRouteArgs& a, std::int64_t r) {
  const float* x = a.logits + r * a.n_expert;
  float* w = a.routing + r * a.n_expert;
  float max = x[0];
  for (int e = 1; e < a.n_expert; ++e) max = x[e] > max ? x[e] : max;
  float sum = 0.0f;
  for (int e = 0; e < a.n_expert; ++e) sum += (w[e] = expf(x[e] - max));
  for (int e = 0; e < a.n_expert; ++e) w[e] /= sum;
  const int last = moe_last_kept(w, a.n_expert, a.n_used);
  const float w_last = w[last];  // saved: the row is rewritten in place below
  float kept_sum = 0.0f;
  for (int e = 0; e < a.n_expert; ++e) kept_sum += moe_kept(w[e], e, w_last, last) ? w[e] : 0.0f;
  if (!a.renormalize) kept_sum = 1.0f;
  for (int e = 0; e < a.n_expert; ++e) w[e] = moe_kept(w[e], e, w_last, last) ? w[e] / kept_sum : 0.0f;
}

TD_HD inline void moe_select_row(const MoeSelectArgs& a, std::int64_t r) {
  const float* w = a.routing + r * a.n_expert;
  const int last = moe_last_kept(w, a.n_expert, a.n_used);
  int k = 0;
  for (int e = 0; e < a.n_expert && k < a.n_used; ++e) {
    if (!moe_kept(w[e], e, w[last], last)) continue;
    a.experts[r * a.n_used + k] = e;
    a.weights[r * a.n_used + k] = w[e];
    ++k;
  }
}

void validate(const MoeRouteArgs& a);
void validate(const MoeSelectArgs& a);
void moe_route_host(const MoeRouteArgs& a);
void moe_select_host(const MoeSelectArgs& a);
void moe_route_cuda(const MoeRouteArgs& a, CudaStream stream);
void moe_select_cuda(const MoeSelectArgs& a, CudaStream stream);

}  // namespace tapdiff::engine
