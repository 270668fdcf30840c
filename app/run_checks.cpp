#include "app/run_checks.hpp"

#include <algorithm>
#include <fmt/format.h>
#include <limits>
#include <stdexcept>
#include <sys/resource.h>
#include <unistd.h>

#include "tapdiff/tap_catalogue.hpp"
#include "tapdiff/weight_taps.hpp"

namespace tapdiff {

namespace {

// The machine's memory, or less under `ulimit -v`.
std::uint64_t usable_memory(std::string* limit) {
  std::uint64_t bytes = std::uint64_t(sysconf(_SC_PHYS_PAGES)) * std::uint64_t(sysconf(_SC_PAGE_SIZE));
  *limit = "this machine has";
  rlimit r{};
  if (getrlimit(RLIMIT_AS, &r) == 0 && r.rlim_cur != RLIM_INFINITY && r.rlim_cur < bytes) {
    bytes = r.rlim_cur;
    *limit = "ulimit -v allows";
  }
  return bytes;
}

}  // namespace

std::vector<std::string_view> name_globs(const std::string& names) {
  std::vector<std::string_view> globs;
  std::size_t start = 0;
  while (start <= names.size()) {
    const std::size_t end = std::min(names.find(',', start), names.size());
    globs.push_back(std::string_view(names).substr(start, end - start));
    start = end + 1;
  }
  return globs;
}

void check_positions(const RunSpec& s) {
  if (s.n_predict < 0) throw std::invalid_argument(fmt::format("--n-predict: expected >= 0, got {}", s.n_predict));
  if (std::int64_t(s.prompt.size()) + s.n_predict > std::numeric_limits<int>::max())
    throw std::invalid_argument(fmt::format(
        "--n-predict: expected at most {} (with the {} prompt tokens, {} positions), got {}",
        std::numeric_limits<int>::max() - std::int64_t(s.prompt.size()), s.prompt.size(),
        std::numeric_limits<int>::max(), s.n_predict));
}

void note_past_training_context(const RunSpec& s, const ModelConfig& c) {
  const std::int64_t n_ctx = std::int64_t(s.prompt.size()) + s.n_predict;
  if (c.n_ctx_train > 0 && n_ctx > c.n_ctx_train)
    fmt::print(stderr,
               "tapdiff: the run's {} positions go past {}'s context length {}: the programs compute them, but the "
               "model was not trained on them\n",
               n_ctx, s.model, c.n_ctx_train);
}

void check_context_fits(const RunSpec& s, const ModelConfig& c, std::uint64_t context_bytes) {
  const std::int64_t n_ctx = std::int64_t(s.prompt.size()) + s.n_predict;
  std::string limit;
  const std::uint64_t memory = usable_memory(&limit);
  if (context_bytes > memory)
    throw std::invalid_argument(fmt::format(
        "--n-predict: a context of {} positions ({} prompt, {} generated) needs {:.1f} GiB for {}'s KV cache and "
        "attention probabilities ({} layer{} of {} K and {} V values a position); {} {:.1f} GiB",
        n_ctx, s.prompt.size(), s.n_predict, double(context_bytes) / (1 << 30), s.model, c.n_layer,
        c.n_layer == 1 ? "" : "s", c.kv_dim(), c.kv_dim(), limit, double(memory) / (1 << 30)));
}

void check_filter_selects(const RunSpec& s, const ModelConfig& c, const GgufFile& file) {
  const TapFilterSpec& f = s.taps;
  if (!f.layers.empty() && !RangeSet::parse(f.layers, "layers").intersects(0, c.n_layer - 1))
    throw std::invalid_argument(fmt::format("--layers: expected layers within 0..{} ({} has {}), got {}", c.n_layer - 1,
                                            s.model, c.n_layer, f.layers));
  const std::int64_t n_ctx = std::int64_t(s.prompt.size()) + s.n_predict;
  if (!f.positions.empty() && !RangeSet::parse(f.positions, "positions").intersects(0, n_ctx - 1))
    throw std::invalid_argument(fmt::format("--positions: expected positions within 0..{} (the prompt and the "
                                            "generated tokens), got {}", n_ctx - 1, f.positions));
  for (const std::string_view glob : name_globs(f.names)) {
    if (glob.empty() || glob[0] == '!') continue;
    const TapFilter one = TapFilter::parse(glob);
    const bool activation = std::any_of(tap_catalogue().begin(), tap_catalogue().end(), [&](const TapSpec& spec) {
      if (spec.scope == TapScope::global) return one.tap_enabled(spec.name, -1);
      for (int layer = 0; layer < c.n_layer; ++layer)
        if (one.tap_enabled(spec.name, layer)) return true;
      return false;
    });
    // --weights records a tap per tensor: weight.NAME (or weight_stats.NAME).
    const bool weight = !s.weights.empty() && std::any_of(file.tensors().begin(), file.tensors().end(),
                                                          [&](const GgufTensorInfo& t) {
                                                            return one.tap_enabled(weight_tap_name(t.name), -1) ||
                                                                   one.tap_enabled(weight_stats_tap_name(t.name), -1);
                                                          });
    if (!activation && !weight)
      throw std::invalid_argument(fmt::format("--taps: '{}' matches no tap of {} (names such as blk.0.attn_q, "
                                              "output_norm: docs/taps.md; weight.NAME with --weights; '!*' records the "
                                              "tokens alone)",
                                              glob, s.model));
  }
}

}  // namespace tapdiff
