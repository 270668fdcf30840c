// A mixture of experts' ops: the routing from the router's logits, and ffn_down as the routing-
// weighted sum of the used experts' down projections.
#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <numeric>

#include "diff/hypothesis_families.hpp"
#include "reference/ops.hpp"

namespace tapdiff::diff {
namespace {

// The softmax of the logits over every expert.
std::vector<double> softmax_of(const Row& logits) {
  std::vector<double> p(logits.begin(), logits.end());
  ref::softmax(p.data(), int(p.size()));
  return p;
}

// The n experts of the largest weights (of equal ones the lower index), ascending; n <= size.
std::vector<int> largest(const std::vector<double>& w, int n) {
  std::vector<int> order(w.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int i, int j) { return w[std::size_t(i)] > w[std::size_t(j)]; });
  order.resize(std::size_t(std::clamp<int>(n, 0, int(w.size()))));
  std::sort(order.begin(), order.end());
  return order;
}

// A routing row: the experts kept weighted by w (renormalized over them when asked), 0 elsewhere.
Row routing_row(const std::vector<double>& w, const std::vector<int>& kept, bool renormalize) {
  double sum = 0;
  for (int e : kept) sum += w[std::size_t(e)];
  Row out(w.size(), 0.0f);
  for (int e : kept) out[std::size_t(e)] = float(renormalize ? w[std::size_t(e)] / sum : w[std::size_t(e)]);
  return out;
}

}  // namespace

void routing_candidates(int layer, ReplayInputs& in, std::vector<Candidate>& out) {
  const int k = in.model.config().n_expert_used, n = in.model.config().n_expert;
  // which: the experts kept, from the softmax; renormalize: their weights to sum 1.
  auto route = [&in, layer](auto which, bool renormalize) {
    return [&in, layer, which, renormalize](std::int64_t p) {
      const Row logits = trace_row(in.actual, "ffn_gate_inp", layer, p);
      if (logits.empty()) return Row{};
      const std::vector<double> w = softmax_of(logits);
      return routing_row(w, which(w), renormalize);
    };
  };
  const auto top = [](int count) { return [count](const std::vector<double>& w) { return largest(w, count); }; };
  out.push_back({fmt::format("softmax of ffn_gate_inp, the {} largest renormalized", k), "", true, route(top(k), true)});
  if (in.baseline_only) return;
  out.push_back({fmt::format("the {} largest softmax weights not renormalized to sum 1", k), "moe-routing", false,
                 route(top(k), false)});
  out.push_back({"every expert kept, weighted by the softmax (no top-k)", "moe-routing", false, route(top(n), true)});
  out.push_back({fmt::format("the {} smallest weights kept instead of the largest", k), "moe-routing", false,
                 route([k](const std::vector<double>& w) {
                   std::vector<double> negated(w.size());
                   std::transform(w.begin(), w.end(), negated.begin(), [](double v) { return -v; });
                   return largest(negated, k);
                 }, true)});
  for (const int other : {k - 1, k + 1})
    if (other >= 1 && other <= n)
      out.push_back({fmt::format("{} experts kept instead of {}", other, k), "moe-routing", false, route(top(other), true)});
}

// The used experts of a routing row: its nonzero weights' experts, ascending.
std::vector<std::size_t> used_experts(const Row& routing) {
  std::vector<std::size_t> used;
  for (std::size_t e = 0; e < routing.size(); ++e)
    if (routing[e] != 0.0f) used.push_back(e);
  return used;
}

void experts_projection_candidates(const std::string& name, int layer, ReplayInputs& in, std::vector<Candidate>& out) {
  const ModelConfig& c = in.model.config();
  const std::vector<float>& W = in.model.weight(fmt::format("blk.{}.{}.weight", layer, name));
  if (W.empty()) return;
  const std::size_t E = std::size_t(c.n_embd), F = std::size_t(c.n_ff);
  // Each used expert's rows W[e] ffn_norm, in ascending expert order (by_weight: in descending
  // routing weight, the top-k's order); `shift` reads expert e + shift's.
  auto project = [&in, &W, layer, E, F](std::size_t shift, bool by_weight = false) {
    return [&in, &W, layer, E, F, shift, by_weight](std::int64_t p) {
      const Row routing = trace_row(in.actual, "ffn.routing", layer, p), x = trace_row(in.actual, "ffn_norm", layer, p);
      if (routing.empty() || x.empty()) return Row{};
      std::vector<std::size_t> used = used_experts(routing);
      if (by_weight)
        std::stable_sort(used.begin(), used.end(), [&](std::size_t a, std::size_t b) { return routing[a] > routing[b]; });
      Row y;
      for (const std::size_t e : used) {
        const float* m = W.data() + ((e + shift) % routing.size()) * F * E;
        for (std::size_t o = 0; o < F; ++o) {
          double sum = 0;
          for (std::size_t i = 0; i < E; ++i) sum += double(m[o * E + i]) * x[i];
          y.push_back(float(sum));
        }
      }
      return y;
    };
  };
  out.push_back({fmt::format("W[e] ffn_norm for each used expert e ({}, ascending)", name), "", true, project(0)});
  if (in.baseline_only) return;
  out.push_back({fmt::format("expert e reads expert e + 1's matrix of {}.weight (an expert stride or index one off)",
                             name),
                 "weight-loading", false, project(1)});
  out.push_back({"the used experts' rows in descending routing weight (the top-k's order; the catalogue keeps them in "
                 "ascending expert order, docs/taps.md)",
                 "tap-layout", false, project(0, true)});
}

void experts_activation_candidates(int layer, ReplayInputs& in, std::vector<Candidate>& out) {
  auto gated = [&in, layer](bool swapped) {
    return [&in, layer, swapped](std::int64_t p) {
      Row g = trace_row(in.actual, "ffn_gate_exps", layer, p), u = trace_row(in.actual, "ffn_up_exps", layer, p);
      if (swapped) std::swap(g, u);
      Row y(g.size());
      for (std::size_t i = 0; i < g.size() && i < u.size(); ++i) y[i] = float(ref::silu(double(g[i])) * u[i]);
      return y;
    };
  };
  out.push_back({"silu(ffn_gate_exps) * ffn_up_exps", "", true, gated(false)});
  if (in.baseline_only) return;
  out.push_back({"silu(ffn_up_exps) * ffn_gate_exps: gate and up exchanged", "activation", false, gated(true)});
}

void experts_down_candidates(int layer, ReplayInputs& in, std::vector<Candidate>& out) {
  const ModelConfig& c = in.model.config();
  const std::string wname = fmt::format("blk.{}.ffn_down_exps.weight", layer);
  const std::vector<float>& W = in.model.weight(wname);
  if (W.empty()) return;
  const std::size_t E = std::size_t(c.n_embd), F = std::size_t(c.n_ff);
  // ffn_down = Σ over the used experts (ascending) of weight(e) · W_down[e] act_slot.
  auto combine = [&in, &W, layer, E, F](bool weighted) {
    return [&in, &W, layer, E, F, weighted](std::int64_t p) {
      const Row routing = trace_row(in.actual, "ffn.routing", layer, p), act = trace_row(in.actual, "ffn.act_exps", layer, p);
      if (routing.empty() || act.empty()) return Row{};
      Row y(E, 0.0f);
      std::size_t slot = 0;
      for (const std::size_t e : used_experts(routing)) {
        if ((slot + 1) * F > act.size()) break;
        const double weight = weighted ? routing[e] : 1.0;
        for (std::size_t o = 0; o < E; ++o) {
          const float* row = W.data() + (e * E + o) * F;
          double sum = 0;
          for (std::size_t i = 0; i < F; ++i) sum += double(row[i]) * act[slot * F + i];
          y[o] += float(weight * sum);
        }
        ++slot;
      }
      return y;
    };
  };
  out.push_back({"Σ over the used experts of ffn.routing · W_down[e] ffn.act_exps", "", true, combine(true)});
  if (in.baseline_only) return;
  out.push_back({"the used experts' down projections summed without their routing weights", "moe-routing", false,
                 combine(false)});
}

}  // namespace tapdiff::diff
