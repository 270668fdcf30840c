// A mixture of experts' FFN (forward.hpp): the router, the routing, then each expert's SwiGLU
// FFN over the rows of the tokens routed to it, as one GEMM per expert and matrix (a decode
// step's single token: one matvec per used expert), and the routing-weighted sum.
#include "engine/executor.hpp"
#include "engine/forward.hpp"

namespace tapdiff::engine {

constexpr GemmOp OP_T = GemmOp::T;

void Forward::experts_ffn(const LayerWeights& L, int l, int p0, int n) {
  const int E = c_.n_embd, F = c_.n_ff, NE = c_.n_expert, K = c_.n_expert_used;
  const std::int64_t slots = std::int64_t(n) * K;
  float* norm_out = act_.norm.as<float>();
  float* router = act_.router.as<float>();
  float* gate = act_.gate.as<float>();
  float* up = act_.up.as<float>();
  float* act = act_.act.as<float>();
  float* grouped_in = act_.grouped_in.as<float>();
  float* grouped_gate = act_.grouped_gate.as<float>();
  float* grouped_up = act_.grouped_up.as<float>();
  float* grouped_down = act_.grouped_down.as<float>();

  // router [n, NE] = norm [n, E] · W_routerᵀ (column-major as every projection: forward.cpp).
  gemm(OP_T, NE, n, E, L.w_router, E, norm_out, E, router, NE);
  taps_.probe("ffn_gate_inp", l, p0, n, {NE}, router);
  MoeRouteArgs route{router, act_.routing.as<float>(), n, NE, K};
  // Fault moe-weights-unnormalized: Qwen2-MoE's routing (norm_topk_prob false).
  if (faults_.is(Fault::moe_weights_unnormalized)) route.renormalize = false;
  ex_.moe_route(route);
  taps_.probe("ffn.routing", l, p0, n, {NE}, act_.routing.as<float>());
  ex_.moe_select(MoeSelectArgs{act_.routing.as<float>(), act_.experts.as<std::int32_t>(),
                               act_.expert_weights.as<float>(), n, NE, K});

  // Which rows each expert multiplies: the slots grouped by expert (a counting sort on the host,
  // as the GEMMs' shapes are).
  host_ints_.resize(std::size_t(slots));
  ex_.download(host_ints_.data(), act_.experts.data(), host_ints_.size() * sizeof(std::int32_t));
  std::vector<std::int64_t> first(std::size_t(NE) + 1, 0);
  for (const std::int32_t e : host_ints_) ++first[std::size_t(e) + 1];
  for (int e = 0; e < NE; ++e) first[std::size_t(e) + 1] += first[std::size_t(e)];
  std::vector<std::int32_t> grouped(2 * std::size_t(slots));  // each grouped row's slot, then its token
  std::vector<std::int64_t> next(first.begin(), first.end() - 1);
  for (std::int64_t s = 0; s < slots; ++s) {
    const std::int64_t row = next[std::size_t(host_ints_[std::size_t(s)])]++;
    grouped[std::size_t(row)] = std::int32_t(s);
    grouped[std::size_t(slots + row)] = std::int32_t(s / K);
  }
  upload_ints(act_.grouped_slots, grouped);
  const std::int32_t* slot_of = act_.grouped_slots.as<std::int32_t>();
  const std::int32_t* token_of = slot_of + slots;

  // body(e, r0, rows) for each expert with rows routed to it: grouped rows r0 .. r0 + rows - 1.
  auto each_expert = [&](auto body) {
    for (int e = 0; e < NE; ++e)
      if (const auto rows = int(first[std::size_t(e) + 1] - first[std::size_t(e)]); rows > 0)
        body(e, first[std::size_t(e)], rows);
  };

  // Each expert's rows: ffn_norm of the tokens routed to it.
  ex_.copy_rows(CopyRowsArgs{norm_out, token_of, grouped_in, nullptr, slots, E});
  each_expert([&](int e, std::int64_t r0, int rows) {
    gemm(OP_T, F, rows, E, expert_matrix(L.gate_exps, e, NE), E, grouped_in + r0 * E, E, grouped_gate + r0 * F, F);
    gemm(OP_T, F, rows, E, expert_matrix(L.up_exps, e, NE), E, grouped_in + r0 * E, E, grouped_up + r0 * F, F);
  });
  ex_.copy_rows(CopyRowsArgs{grouped_gate, nullptr, gate, slot_of, slots, F});
  ex_.copy_rows(CopyRowsArgs{grouped_up, nullptr, up, slot_of, slots, F});
  taps_.probe("ffn_gate_exps", l, p0, n, {K, F}, gate);
  taps_.probe("ffn_up_exps", l, p0, n, {K, F}, up);

  ex_.silu_mul(SiluMulArgs{gate, up, act, slots * F});
  round(act, slots * F);  // a GEMM input
  taps_.probe("ffn.act_exps", l, p0, n, {K, F}, act);

  ex_.copy_rows(CopyRowsArgs{act, slot_of, grouped_in, nullptr, slots, F});
  each_expert([&](int e, std::int64_t r0, int rows) {
    gemm(OP_T, E, rows, F, expert_matrix(L.down_exps, e, NE), F, grouped_in + r0 * F, F, grouped_down + r0 * E, E);
  });
  // ffn_down [n, E]: each token's slots back in order, weighted and summed.
  ex_.copy_rows(CopyRowsArgs{grouped_down, nullptr, grouped_in, slot_of, slots, E});
  float* proj = act_.proj.as<float>();
  ex_.moe_combine(MoeCombineArgs{grouped_in, act_.expert_weights.as<float>(), proj, n, K, E});
  taps_.probe("ffn_down", l, p0, n, {E}, proj);
}

}  // namespace tapdiff::engine
