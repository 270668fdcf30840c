// A mixture of experts' ops: the routing from the router's logits, each used expert's gate and up
// rows and their activation, and ffn_down as the routing-weighted sum of the used experts' down
// projections; each with the ways engines get it wrong.
#include <algorithm>
#include <cmath>
#include <deque>
#include <fmt/format.h>
#include <memory>
#include <numeric>

#include "diff/hypothesis_families.hpp"
#include "model/dequantize.hpp"
#include "model/fused_weights.hpp"
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

// One stacked tensor's experts (ffn_{gate,up,down}_exps), each decoded to float32 when first
// multiplied and kept while few are: a layer's whole tensor is 537 MB as float32 at OLMoE's 64
// experts of 1024 x 2048, and a replay reads the experts its positions used.
class ExpertMatrices {
public:
  ExpertMatrices(ReplayModel& model, const std::string& tensor) : tensor_(model.tensor(tensor)) {}
  bool empty() const { return tensor_ == nullptr || tensor_->ne.size() != 3; }
  int count() const { return int(tensor_->ne[2]); }
  // Expert e's matrix, [ne1][ne0] row-major.
  const std::vector<float>& values(int e) {
    for (const auto& [expert, v] : kept_)
      if (expert == e) return v;
    if (kept_.size() == kKept) kept_.pop_front();
    kept_.emplace_back(e, dequantize_tensor(expert_matrix(*tensor_, e)));
    return kept_.back().second;
  }

private:
  static constexpr std::size_t kKept = 16;
  const GgufTensorInfo* tensor_;
  std::deque<std::pair<int, std::vector<float>>> kept_;
};

std::shared_ptr<ExpertMatrices> experts_of(ReplayModel& model, int layer, const std::string& name) {
  auto m = std::make_shared<ExpertMatrices>(model, fmt::format("blk.{}.{}.weight", layer, name));
  return m->empty() ? nullptr : m;
}

// The used experts of a routing row: its nonzero weights' experts, ascending.
std::vector<int> used_experts(const Row& routing) {
  std::vector<int> used;
  for (std::size_t e = 0; e < routing.size(); ++e)
    if (routing[e] != 0.0f) used.push_back(int(e));
  return used;
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
  // Sigmoid gating (DeepSeek-V3's) where the model's is a softmax.
  for (const bool renormalize : {false, true})
    out.push_back({fmt::format("the {} largest of sigmoid(ffn_gate_inp) kept{} instead of the softmax's", k,
                               renormalize ? ", renormalized," : " as they are"),
                   "moe-routing", false, [&in, layer, k, renormalize](std::int64_t p) {
                     const Row logits = trace_row(in.actual, "ffn_gate_inp", layer, p);
                     if (logits.empty()) return Row{};
                     std::vector<double> w(logits.size());
                     std::transform(logits.begin(), logits.end(), w.begin(),
                                    [](float x) { return 1 / (1 + std::exp(-double(x))); });
                     return routing_row(w, largest(w, k), renormalize);
                   }});
  // A batch's top-k reading the row before its own: the experts of prompt row p chosen from row
  // p - 1's logits, weighted by row p's softmax over them.
  out.push_back({fmt::format("the experts of each prompt row after the first chosen from the previous row's "
                             "ffn_gate_inp (their weights row p's softmax, renormalized)"),
                 "moe-routing", false, [&in, layer, k](std::int64_t p) {
                   const Row logits = trace_row(in.actual, "ffn_gate_inp", layer, p);
                   if (logits.empty()) return Row{};
                   const std::vector<double> w = softmax_of(logits);
                   if (p == 0 || p >= in.prompt_length) return routing_row(w, largest(w, k), true);
                   const Row before = trace_row(in.actual, "ffn_gate_inp", layer, p - 1);
                   return before.empty() ? Row{} : routing_row(w, largest(softmax_of(before), k), true);
                 }});
  // Weights right for the experts kept, the experts not the most probable: the kept set read off
  // the actual routing row (a fit), named by the ranks of the first position it differs at.
  for (std::int64_t p = 0; p < in.n_ctx; ++p) {
    const Row logits = trace_row(in.actual, "ffn_gate_inp", layer, p), actual = trace_row(in.observed, "ffn.routing", layer, p);
    if (logits.empty() || actual.size() != logits.size()) break;
    const std::vector<double> w = softmax_of(logits);
    const std::vector<int> kept = used_experts(actual);
    if (kept == largest(w, k)) continue;
    std::vector<int> ranks;
    for (int e : kept)
      ranks.push_back(1 + int(std::count_if(w.begin(), w.end(), [&](double v) { return v > w[std::size_t(e)]; })));
    Candidate fit{fmt::format("other experts kept than the {} most probable, weighted right for them (at position {}: "
                              "experts {{{}}}, ranks {{{}}} by probability)",
                              k, p, fmt::join(kept, ", "), fmt::join(ranks, ", ")),
                  "moe-routing", false, [&in, layer](std::int64_t q) {
                    const Row router = trace_row(in.actual, "ffn_gate_inp", layer, q);
                    const Row routed = trace_row(in.observed, "ffn.routing", layer, q);
                    if (router.empty() || routed.size() != router.size()) return Row{};
                    return routing_row(softmax_of(router), used_experts(routed), true);
                  }};
    fit.fitted = true;
    out.push_back(std::move(fit));
    break;
  }
}

// Each used expert's rows W[e] ffn_norm at position p, in ascending expert order (by_weight: in
// descending routing weight, the top-k's order); `shift` reads expert e + shift's matrix.
Row experts_rows(ReplayInputs& in, ExpertMatrices& W, int layer, std::int64_t p, int shift, bool by_weight) {
  const std::size_t E = std::size_t(in.model.config().n_embd), F = std::size_t(in.model.config().n_ff);
  const Row routing = trace_row(in.actual, "ffn.routing", layer, p), x = trace_row(in.actual, "ffn_norm", layer, p);
  if (routing.empty() || x.empty()) return Row{};
  std::vector<int> used = used_experts(routing);
  if (by_weight)
    std::stable_sort(used.begin(), used.end(),
                     [&](int a, int b) { return routing[std::size_t(a)] > routing[std::size_t(b)]; });
  Row y;
  for (const int e : used) {
    const std::vector<float>& m = W.values((e + shift) % W.count());
    for (std::size_t o = 0; o < F; ++o) {
      double sum = 0;
      for (std::size_t i = 0; i < E; ++i) sum += double(m[o * E + i]) * x[i];
      y.push_back(float(sum));
    }
  }
  return y;
}

void experts_projection_candidates(const std::string& name, int layer, ReplayInputs& in, std::vector<Candidate>& out) {
  const auto W = experts_of(in.model, layer, name);
  if (!W) return;
  auto rows = [&in, layer](std::shared_ptr<ExpertMatrices> w, int shift, bool by_weight) {
    return [&in, w, layer, shift, by_weight](std::int64_t p) { return experts_rows(in, *w, layer, p, shift, by_weight); };
  };
  out.push_back({fmt::format("W[e] ffn_norm for each used expert e ({}, ascending)", name), "", true, rows(W, 0, false)});
  if (in.baseline_only) return;
  std::vector<std::pair<int, const char*>> shifts{{1, "e + 1"}};
  if (W->count() > 2) shifts.emplace_back(W->count() - 1, "e - 1");  // with two experts, the same one
  for (const auto& [shift, text] : shifts)
    out.push_back({fmt::format("expert e reads expert {}'s matrix of {}.weight (an expert stride or index one off)",
                               text, name),
                   "weight-loading", false, rows(W, shift, false)});
  const std::string other = name == "ffn_gate_exps" ? "ffn_up_exps" : "ffn_gate_exps";
  if (const auto W_other = experts_of(in.model, layer, other))
    out.push_back({fmt::format("{}.weight's matrices instead of {}.weight's (gate and up exchanged)", other, name),
                   "weight-loading", false, rows(W_other, 0, false)});
  out.push_back({"the used experts' rows in descending routing weight (the top-k's order; the catalogue keeps them in "
                 "ascending expert order, docs/taps.md)",
                 "tap-layout", false, rows(W, 0, true)});
}

void experts_activation_candidates(int layer, ReplayInputs& in, std::vector<Candidate>& out) {
  auto gated = [&in, layer](bool swapped, double (*act)(double)) {
    return [&in, layer, swapped, act](std::int64_t p) {
      Row g = trace_row(in.actual, "ffn_gate_exps", layer, p), u = trace_row(in.actual, "ffn_up_exps", layer, p);
      if (swapped) std::swap(g, u);
      Row y(g.size());
      for (std::size_t i = 0; i < g.size() && i < u.size(); ++i) y[i] = float(act(double(g[i])) * u[i]);
      return y;
    };
  };
  const auto silu = [](double x) { return ref::silu(x); };
  out.push_back({"silu(ffn_gate_exps) * ffn_up_exps", "", true, gated(false, silu)});
  if (in.baseline_only) return;
  out.push_back({"silu(ffn_up_exps) * ffn_gate_exps: gate and up exchanged", "activation", false, gated(true, silu)});
  out.push_back({"gelu(ffn_gate_exps) * ffn_up_exps: GELU (tanh) instead of SiLU", "activation", false,
                 gated(false, [](double x) { return ref::gelu_tanh(x); })});
}

namespace {

// How an ffn_down replay combines the used experts: as the model does, or one of the ways it goes wrong.
enum class Combine { weighted, unweighted, weights_reversed, weights_squared, down_column_major };

}  // namespace

void experts_down_candidates(int layer, ReplayInputs& in, std::vector<Candidate>& out) {
  const ModelConfig& c = in.model.config();
  const auto W = experts_of(in.model, layer, "ffn_down_exps");
  if (!W) return;
  const std::size_t E = std::size_t(c.n_embd), F = std::size_t(c.n_ff);
  // ffn_down = Σ over the used experts (ascending) of weight(e) · W_down[e] act_slot.
  auto combine = [&in, W, layer, E, F](Combine how) {
    return [&in, W, layer, E, F, how](std::int64_t p) {
      const Row routing = trace_row(in.actual, "ffn.routing", layer, p), act = trace_row(in.actual, "ffn.act_exps", layer, p);
      if (routing.empty() || act.empty()) return Row{};
      const std::vector<int> used = used_experts(routing);
      if (used.size() * F > act.size()) return Row{};
      Row y(E, 0.0f);
      for (std::size_t slot = 0; slot < used.size(); ++slot) {
        const auto e = std::size_t(used[slot]);
        const double w = routing[how == Combine::weights_reversed ? std::size_t(used[used.size() - 1 - slot]) : e];
        const double weight = how == Combine::unweighted ? 1.0 : how == Combine::weights_squared ? w * w : w;
        const float* m = W->values(int(e)).data();
        for (std::size_t o = 0; o < E; ++o) {
          double sum = 0;
          for (std::size_t i = 0; i < F; ++i)
            sum += double(how == Combine::down_column_major ? m[i * E + o] : m[o * F + i]) * act[slot * F + i];
          y[o] += float(weight * sum);
        }
      }
      return y;
    };
  };
  out.push_back({"Σ over the used experts of ffn.routing · W_down[e] ffn.act_exps", "", true, combine(Combine::weighted)});
  if (in.baseline_only) return;
  out.push_back({"the used experts' down projections summed without their routing weights", "moe-routing", false,
                 combine(Combine::unweighted)});
  out.push_back({"each used expert weighted by another's routing weight (the weights in reverse expert order)",
                 "moe-routing", false, combine(Combine::weights_reversed)});
  out.push_back({"each used expert's output weighted by its routing weight twice (w²)", "moe-routing", false,
                 combine(Combine::weights_squared)});
  out.push_back({"each expert's down matrix read column-major (element [o][i] at i · n_embd + o: the layout transposed)",
                 "matmul-layout", false, combine(Combine::down_column_major)});
}

}  // namespace tapdiff::diff
