#include "diff/hypothesis_families.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <numeric>
#include <optional>
#include <tuple>
#include <fmt/format.h>

#include "diff/cache_replay.hpp"
#include "diff/fitted_constants.hpp"
#include "diff/metrics.hpp"
#include "diff/replay_rows.hpp"
#include "diff/softmax_variants.hpp"
#include "reference/ops.hpp"
#include "tapdiff/attn_summary.hpp"

namespace tapdiff::diff {
namespace {

// A replayed attn.probs row ([n_head, n_ctx], the run's context) over the keys the trace's rows
// are read over: fewer when diff compares the run with a shorter one (TraceReader::read_context_as).
Row keys_as_read(const Row& probs, int n_head, std::int64_t n_ctx, const TapInfo* tap) {
  const std::int64_t keys = tap && tap->row_shape.size() == 2 ? tap->row_shape[1] : n_ctx;
  if (keys >= n_ctx) return probs;
  Row out(std::size_t(n_head) * std::size_t(keys));
  for (int h = 0; h < n_head; ++h)
    std::copy_n(probs.begin() + std::ptrdiff_t(h) * n_ctx, keys, out.begin() + std::ptrdiff_t(h) * keys);
  return out;
}

// The keys [first, end) position p attends to, read off the actual attn.probs row: the range of
// keys above zero, the same in every head; nullopt where they differ or leave a gap.
std::optional<std::pair<std::int64_t, std::int64_t>> keys_seen(const TraceReader& actual, int layer, int n_head,
                                                                std::int64_t p) {
  const Row row = trace_row(actual, "attn.probs", layer, p);
  if (row.empty() || row.size() % std::size_t(n_head) != 0) return std::nullopt;
  const auto keys = std::ptrdiff_t(row.size() / std::size_t(n_head));
  std::optional<std::pair<std::int64_t, std::int64_t>> seen;
  for (int h = 0; h < n_head; ++h) {
    const auto head = row.begin() + h * keys, end = head + keys;
    const auto nonzero = [](float v) { return v != 0; };
    const auto first = std::find_if(head, end, nonzero);
    if (first == end) return std::nullopt;
    const auto last = std::find_if(std::make_reverse_iterator(end), std::make_reverse_iterator(first), nonzero).base();
    if (std::find(first, last, 0.0f) != last) return std::nullopt;
    const std::pair<std::int64_t, std::int64_t> range{first - head, last - head};
    if (seen && *seen != range) return std::nullopt;
    seen = range;
  }
  return seen;
}

std::string list_text(const std::vector<int>& v) { return fmt::format("[{}]", fmt::join(v, ", ")); }

// A name for a placement of heads: ": adjacent heads swapped" and the like, or "".
std::string heads_pattern(const std::vector<int>& from) {
  const auto n = int(from.size());
  auto every = [&](auto f) {
    for (int j = 0; j < n; ++j)
      if (from[std::size_t(j)] != f(j)) return false;
    return true;
  };
  if (n % 2 == 0 && every([](int j) { return j ^ 1; })) return ": adjacent heads swapped in pairs (h ^ 1)";
  if (every([&](int j) { return n - 1 - j; })) return ": the heads in reverse order";
  for (int k = 1; k < n; ++k)
    if (every([&](int j) { return (j + k) % n; }))
      return fmt::format(": the heads shifted by {} (slot j holds head (j + {}) mod n_head)", k, k);
  return "";
}

}  // namespace

void attention_candidates(const std::string& name, int layer, ReplayInputs& in, std::vector<Candidate>& out) {
  const ModelConfig& c = in.model.config();
  enum class Output { probs, summary, attn_out };
  const Output output = name == "attn.probs"           ? Output::probs
                        : name == "attn.probs.summary" ? Output::summary
                                                       : Output::attn_out;
  const auto kv_dim = static_cast<std::size_t>(c.kv_dim());
  const float right_scale = c.attn_scale();
  struct Setup {
    CacheReplay cache;
    float scale;
    ref::GqaMap map;
    std::optional<CacheReplay> v_cache = std::nullopt;  // V's cache written otherwise than K's
    bool normalized_over_batch = false;  // softmax over every key of the batch, the mask applied after
    std::optional<double> masked_score = std::nullopt;  // masked keys scored this instead of -inf
    bool shared_across_layers = false;   // one cache for all layers: earlier rows hold the last layer's
    std::vector<int> kv_of_head{};       // query head h reads kv head kv_of_head[h] (empty: `map`)
    std::vector<int> v_of_head{};        // ... and V from v_of_head[h], K from its own kv head (empty: as K)
    // K (V) widened to the query heads element by element, not head by head (np.repeat on the
    // flattened row): query head h's element e is the row's element (h * head_dim + e) / group.
    bool k_elements_repeated = false, v_elements_repeated = false;
    bool unnormalized = false;           // the output not divided by the softmax's sum
    bool mask_from_actual = false;       // the keys each position sees read off the actual probabilities
    bool quiet = false;                  // 1 added to the softmax's denominator
    std::optional<HalfSoftmax> half_softmax{};  // the softmax (or its exponentials) in 16-bit floats
    bool half_softmax_in_decode = false;         // ... in decode steps only (the prefill's kernel right)
    bool online_sum_stale = false;       // an online softmax's running sum not rescaled as its max grows
    std::int64_t view_offset = 0;        // attention reads cache slot t + view_offset as key t
    bool cap_probs = false;              // the model's soft-cap applied to the probabilities, not the scores
    bool decode_v_from_k = false;        // decode steps read V from the K cache
    int decode_k_layer = -1, decode_v_layer = -1;  // decode steps read K (V) from this layer's cache
    bool other_layer_in_prefill = false;           // ... and the prompt's batch too
    bool cache_as_read_back = false;     // K and V the actual run's kv.k and kv.v rows, not its computed ones
    bool keys_rotated_on_read = false;   // each cached key rotated again by its position as attention reads it
    bool decode_slots_reversed = false;  // decode steps read the cache's slots 0..p last to first
    float softcap = 0;                   // scores soft-capped at this value (0: not capped)
    std::int64_t window = 0;             // keys p - window + 1 .. p only (0: every earlier key)
    bool ring = false;                   // the window's keys held in `window` cells, key t in cell t mod window
    bool window_at_zero_in_decode = false;  // decode steps measure the window from query position 0
    float decode_scale = 0;              // decode steps' scores scaled by this (0: by `scale`)
    // Llama 4's temperature (ModelConfig::attn_temperature): the model's, none, at p + 1 (its offset),
    // or without the floor's rounding down, ln(p / floor + 1) · beta + 1.
    enum class Temperature { model, none, next_position, unfloored } temperature = Temperature::model;
  };
  // The row of tap `as` (one of the three outputs) at position p, computed under setup s.
  auto compute = [&in, layer, kv_dim, c](const Setup& s, Output as, std::int64_t p) {
    const Row q = trace_row(in.actual, "attn_q.rope", layer, p);
    const RowSource rows_from = s.cache_as_read_back ? RowSource(in.observed) : in.actual;
    // The cache replayed through ops a trace does not record carries their variants to attention.
    const bool from_cache = s.cache_as_read_back || (in.actual.computes("kv.k", layer) && in.actual.computes("kv.v", layer));
    const std::string k_tap = from_cache ? "kv.k" : "attn_k.rope", v_tap = from_cache ? "kv.v" : "attn_v";
    const Rows ks = trace_rows_upto(rows_from, k_tap, layer, p);
    const Rows vs = trace_rows_upto(rows_from, v_tap, layer, p);
    if (q.empty()) return Row{};
    // In prefill every prompt row exists before attention runs: the mask-off variant sees them.
    // Likewise a bound one past p sees row p + 1 inside the prompt.
    std::int64_t upto = s.cache.visible == Visible::prompt                        ? std::max(in.prompt_length - 1, p)
                              : s.cache.visible == Visible::next && p + 1 < in.prompt_length ? p + 1
                                                                                           : p;
    // A chunk written at slot 0 puts its later rows where attention's mask lets p see them.
    if (s.cache.cursor == Cursor::batch_start && p < in.prompt_length && in.prefill_chunk > 0)
      upto = std::max(upto, std::min(in.prompt_length, (p / in.prefill_chunk + 1) * in.prefill_chunk) - 1);
    const bool offset_view = s.view_offset > 0;
    if (offset_view && p < in.prompt_length) upto = std::max(upto, std::min(in.prompt_length - 1, p + s.view_offset));
    const bool whole_batch = s.normalized_over_batch && p < in.prompt_length;
    if (whole_batch) upto = in.prompt_length - 1;
    const std::int64_t step = in.prefill_chunk > 0 ? in.prefill_chunk : in.prompt_length;
    const std::int64_t batch_end = p < in.prompt_length ? std::min(in.prompt_length, (p / step + 1) * step) : p + 1;
    if (s.masked_score) upto = std::max(upto, batch_end - 1);
    std::pair<std::int64_t, std::int64_t> seen{0, 0};  // mask_from_actual's keys [first, end)
    if (s.mask_from_actual) {  // keys past p exist only as the batch's later rows
      const auto keys = keys_seen(in.observed, layer, c.n_head, p);
      if (!keys || keys->second - 1 > std::max(p, in.prompt_length - 1)) return Row{};
      seen = *keys;
      upto = std::max(upto, seen.second - 1);
    }
    Rows k_all = upto > p ? trace_rows_upto(rows_from, k_tap, layer, upto) : ks;
    Rows v_all = upto > p ? trace_rows_upto(rows_from, v_tap, layer, upto) : vs;
    if (s.shared_across_layers && p >= in.prompt_length) {
      const Rows k_last = trace_rows_upto(in.actual, "attn_k.rope", c.n_layer - 1, p - 1);
      const Rows v_last = trace_rows_upto(in.actual, "attn_v", c.n_layer - 1, p - 1);
      std::copy(k_last.begin(), k_last.end(), k_all.begin());
      std::copy(v_last.begin(), v_last.end(), v_all.begin());
    }
    if (p >= in.prompt_length || s.other_layer_in_prefill)
      for (auto [rows, tap, from] : {std::tuple{&k_all, "attn_k.rope", s.decode_k_layer},
                                     std::tuple{&v_all, "attn_v", s.decode_v_layer}})
        if (from >= 0) {
          *rows = trace_rows_upto(in.actual, tap, from, upto);
          // A later layer has not written this step's row yet when this one reads: an empty slot.
          if (from > layer && rows->size() > std::size_t(p)) (*rows)[std::size_t(p)] = Row(kv_dim, 0.0f);
        }
    for (std::int64_t t = 0; t <= upto; ++t)
      if (k_all[std::size_t(t)].empty() || v_all[std::size_t(t)].empty()) return Row{};
    if (s.decode_slots_reversed && p >= in.prompt_length && upto == p) {
      std::reverse(k_all.begin(), k_all.begin() + p + 1);
      std::reverse(v_all.begin(), v_all.begin() + p + 1);
    }
    if (s.keys_rotated_on_read)
      for (std::int64_t t = 0; t <= upto; ++t) k_all[std::size_t(t)] = rotated_as_model(in, layer, k_all[std::size_t(t)], t);
    auto K = simulate_cache(k_all, in.prompt_length, in.prefill_chunk, in.n_ctx, kv_dim, s.cache, upto);
    auto V = s.decode_v_from_k && p >= in.prompt_length
                 ? K
                 : simulate_cache(v_all, in.prompt_length, in.prefill_chunk, in.n_ctx, kv_dim,
                                  s.v_cache ? *s.v_cache : s.cache, upto);
    if (offset_view)  // slots past the cache's end, and those never written, read zeros
      for (auto* cache : {&K, &V}) {
        const auto shift = std::min(cache->size(), std::size_t(s.view_offset) * kv_dim);
        std::rotate(cache->begin(), cache->begin() + std::ptrdiff_t(shift), cache->end());
        std::fill(cache->end() - std::ptrdiff_t(shift), cache->end(), 0.0);
      }
    std::vector<double> qd(q.begin(), q.end());
    round_k_to_cache(in.cache, K, kv_dim, std::size_t(c.head_dim));
    round_v_to_cache(in.cache, V, kv_dim, std::size_t(c.head_dim));
    round_q_to_cache(in.cache, qd, std::size_t(c.head_dim));
    ref::AttentionShape shape{c.n_head, c.n_head_kv, c.head_dim};
    if (!s.kv_of_head.empty() || !s.v_of_head.empty() || s.k_elements_repeated || s.v_elements_repeated) {
      // The cache as if it held each query head's kv head.
      const auto d = std::size_t(c.head_dim), n = std::size_t(c.n_head);
      const std::size_t group = n / std::size_t(std::max(c.n_head_kv, 1));
      std::vector<int> own(n);
      for (std::size_t h = 0; h < n; ++h) own[h] = ref::kv_head_for(int(h), c.n_head, c.n_head_kv, s.map);
      const std::vector<int>& k_of_head = s.kv_of_head.empty() ? own : s.kv_of_head;
      const std::vector<int>& v_of_head = s.v_of_head.empty() ? k_of_head : s.v_of_head;
      for (auto [cache, of_head, elements] : {std::tuple{&K, &k_of_head, s.k_elements_repeated},
                                              std::tuple{&V, &v_of_head, s.v_elements_repeated}}) {
        std::vector<double> per_head(std::size_t(in.n_ctx) * n * d);
        for (std::size_t t = 0; t < std::size_t(in.n_ctx); ++t)
          for (std::size_t h = 0; h < n; ++h)
            for (std::size_t e = 0; e < d; ++e)
              per_head[(t * n + h) * d + e] =
                  (*cache)[t * kv_dim + (elements ? (h * d + e) / group : std::size_t((*of_head)[h]) * d + e)];
        *cache = std::move(per_head);
      }
      shape.n_head_kv = c.n_head;
    }
    const std::int64_t visible =
        std::min(visible_keys(s.cache, in.prompt_length, in.prefill_chunk, in.n_ctx, p), in.n_ctx);
    std::int64_t n_keys = whole_batch ? std::min(in.prompt_length, in.n_ctx) : visible;
    std::vector<double> o(q.size()), pr(std::size_t(c.n_head) * std::size_t(in.n_ctx), 0.0);
    const std::int64_t query_at = s.window_at_zero_in_decode && p >= in.prompt_length ? 0 : p;
    float score_scale = s.decode_scale > 0 && p >= in.prompt_length ? s.decode_scale : s.scale;
    switch (s.temperature) {
      case Setup::Temperature::model: score_scale *= c.attn_temperature(p); break;
      case Setup::Temperature::none: break;
      case Setup::Temperature::next_position: score_scale *= c.attn_temperature(p + 1); break;
      case Setup::Temperature::unfloored:
        score_scale *= float(std::log(double(p) / c.attn_temp_floor + 1) * c.attn_temp_scale + 1);
        break;
    }
    std::int64_t first = s.window > 0 ? std::max<std::int64_t>(0, query_at - s.window + 1)
                                      : first_visible_key(s.cache, in.prompt_length, in.prefill_chunk, p);
    if (s.mask_from_actual) std::tie(first, n_keys) = seen;
    ref::attention(qd.data(), K.data(), V.data(), std::min(first, n_keys), n_keys, shape, score_scale, s.map, o.data(),
                   pr.data(), in.n_ctx, s.softcap);
    if (whole_batch) mask_after_softmax(pr, o, V, shape, s.map, visible, n_keys, in.n_ctx);
    if (s.cap_probs) cap_probabilities(pr, o, V, shape, s.map, c.attn_softcap, std::min(first, n_keys), n_keys, in.n_ctx);
    if (s.masked_score)
      masked_keys_scored(pr, o, qd, K, V, shape, s.map, score_scale, s.softcap, std::min(first, n_keys), n_keys,
                         std::min(batch_end, in.n_ctx), in.n_ctx, *s.masked_score);
    if (s.quiet) quiet_softmax(pr, o, qd, K, shape, s.map, score_scale, s.softcap, std::min(first, n_keys), n_keys, in.n_ctx);
    if (s.half_softmax && (!s.half_softmax_in_decode || p >= in.prompt_length))
      half_precision_softmax(pr, o, qd, K, V, shape, s.map, score_scale, s.softcap, std::min(first, n_keys), n_keys, in.n_ctx,
                             *s.half_softmax);
    if (s.online_sum_stale)
      online_sum_not_rescaled(pr, o, qd, K, shape, s.map, score_scale, s.softcap, std::min(first, n_keys), n_keys, in.n_ctx);
    if (s.unnormalized) scale_heads_by_softmax_sum(pr, o, c.n_head, in.n_ctx);
    if (as == Output::attn_out) return Row(o.begin(), o.end());
    if (s.ring)  // the probabilities in the order the kernel reads the cells: key t's in column t mod window
      for (int h = 0; h < c.n_head; ++h) {
        double* ph = pr.data() + std::ptrdiff_t(h) * in.n_ctx;
        std::vector<double> cells(std::size_t(s.window), 0.0);
        for (std::int64_t t = std::min(first, n_keys); t < n_keys; ++t) cells[std::size_t(t % s.window)] = ph[t];
        std::fill(ph, ph + in.n_ctx, 0.0);
        std::copy(cells.begin(), cells.end(), ph);
      }
    Row probs(pr.begin(), pr.end());
    if (as == Output::probs) return keys_as_read(probs, c.n_head, in.n_ctx, in.observed.find("attn.probs", layer));
    Row summary(std::size_t(c.n_head) * kAttnSummaryFields);
    summarize_attention_row(probs.data(), c.n_head, in.n_ctx, p, summary.data());
    return summary;
  };
  auto replay = [compute, output](Setup s) {
    return [compute, output, s](std::int64_t p) { return compute(s, output, p); };
  };
  Setup right{{}, right_scale, ref::GqaMap::grouped};
  right.softcap = c.attn_softcap;
  right.window = c.sliding(layer) ? c.sliding_window : 0;
  out.push_back({right.window > 0 ? fmt::format("softmax(q·K / sqrt(d)) over the last {} keys (a sliding layer)",
                                                right.window)
                                  : std::string("softmax(q·K[0..p] / sqrt(d)) over the causal keys"),
                 "", true, replay(right)});
  if (in.baseline_only) return;
  Setup s = right;
  if (c.attn_temp_scale != 0) {
    const auto tempered = [&](std::string variant, Setup::Temperature t) {
      s.temperature = t;
      out.push_back({std::move(variant), "attention-scale", false, replay(s)});
    };
    const std::string rule = fmt::format("ln(floor(p / {}) + 1) x {:g} + 1", c.attn_temp_floor, c.attn_temp_scale);
    tempered(fmt::format("Llama 4's attention temperature not applied: the scores not multiplied by {} from position "
                         "{} on",
                         rule, c.attn_temp_floor),
             Setup::Temperature::none);
    tempered(fmt::format("the attention temperature {} taken at p + 1 (an offset of 1)", rule),
             Setup::Temperature::next_position);
    tempered(fmt::format("the attention temperature without its floor: ln(p / {} + 1) x {:g} + 1 instead of {}",
                         c.attn_temp_floor, c.attn_temp_scale, rule),
             Setup::Temperature::unfloored);
    s = right;
  }
  if (c.attn_softcap > 0) {
    s.softcap = 0;
    out.push_back({fmt::format("scores not soft-capped (the model caps them at {:g})", c.attn_softcap),
                   "softcap", false, replay(s)});
    if (c.final_softcap > 0 && c.final_softcap != c.attn_softcap) {
      s.softcap = c.final_softcap;
      out.push_back({fmt::format("scores capped at the logits' final cap {:g} instead of the attention's {:g}",
                                 c.final_softcap, c.attn_softcap),
                     "softcap", false, replay(s)});
    }
    // scale · c · tanh(q·k / c) is the cap c · scale on the scaled scores.
    s.softcap = c.attn_softcap * right_scale;
    out.push_back({fmt::format("scores soft-capped at {:g} before the 1/sqrt(d) scale instead of after it",
                               c.attn_softcap),
                   "softcap", false, replay(s)});
    s.softcap = 0;
    s.cap_probs = true;
    out.push_back({fmt::format("the soft-cap at {:g} applied to the probabilities after the softmax instead of to the "
                               "scores",
                               c.attn_softcap),
                   "softcap", false, replay(s)});
    s = right;
  }
  if (right.window > 0) {
    s.window = 0;
    out.push_back({"no sliding window: every earlier key visible on a sliding layer", "attention-mask", false,
                   replay(s)});
    // The same numbers as no window once decode positions pass it: only the code tells them apart.
    s = right;
    s.window_at_zero_in_decode = true;
    out.push_back({"the window measured from query position 0 in decode steps: the positions the kernel reads left "
                   "stale from the prefill (not refreshed per step)",
                   "attention-mask", false, replay(s)});
    s = right;
    for (std::int64_t w : {right.window - 1, right.window + 1}) {
      if (w < 1) continue;
      s.window = w;
      out.push_back({fmt::format("a window of {} keys instead of {} (its bound off by one)", w, right.window),
                     "attention-mask", false, replay(s)});
    }
    s = right;
  } else if (c.sliding_window > 0) {
    s.window = c.sliding_window;
    out.push_back({fmt::format("the sliding window of {} keys applied on a full-attention layer", c.sliding_window),
                   "attention-mask", false, replay(s)});
    s = right;
  }
  // A window nobody listed (read from another key, applied where the model has none): the keys
  // before it hold exactly zero in every head, seen where the trace attends over the most keys.
  if (const TapInfo* probs = in.observed.find("attn.probs", layer); probs && probs->n_rows > 0) {
    const std::int64_t last = probs->last_position();
    const Row row = trace_row(in.observed, "attn.probs", layer, last);
    const std::size_t keys = row.size() / std::size_t(c.n_head);
    std::int64_t first = -1;  // the first key above zero, the same in every head; -2: the heads differ
    for (int h = 0; h < c.n_head && keys > 0; ++h) {
      const auto head = row.begin() + std::ptrdiff_t(std::size_t(h) * keys);
      const auto f = std::find_if(head, head + std::ptrdiff_t(keys), [](float v) { return v != 0; }) - head;
      first = first == -1 || first == f ? f : -2;
    }
    const std::int64_t w = first > 0 && first <= last ? last - first + 1 : 0;
    if (w > 0 && std::abs(w - right.window) > 1 && (right.window > 0 || w != c.sliding_window)) {
      s.window = w;
      out.push_back({right.window > 0 ? fmt::format("a window of {} keys instead of {} (fitted at position {})", w,
                                                    right.window, last)
                                      : fmt::format("a sliding window of {} keys on a layer that attends to every key "
                                                    "(fitted at position {})",
                                                    w, last),
                     "attention-mask", false, replay(s)});
      out.back().fitted = true;
      if (right.window == 0) {  // the same numbers as a ring of W cells whose kernel records keys by position
        out.push_back({fmt::format("a cache of {} cells reused as a ring, the probabilities recorded by key: attention "
                                   "sees only the last {} keys (fitted at position {})",
                                   w, w, last),
                       "kv-cache", false, replay(s)});
        out.back().fitted = true;
      }
      s = right;
    }
  }
  // Only the last W keys seen on a layer that attends to every key, where no probabilities show
  // which (a fused kernel records none), or where they show the keys in cell order: a cache of W
  // cells reused as a ring, key t in cell t mod W. W fitted where the trace attends the most keys.
  if (const TapInfo* tap = in.observed.find(name, layer); right.window == 0 && tap && tap->n_rows > 1) {
    const std::int64_t last = tap->last_position();
    std::int64_t w = 0;
    if (output == Output::probs) {
      const auto seen = keys_seen(in.observed, layer, c.n_head, last);
      w = seen && seen->first == 0 && seen->second <= last ? seen->second : 0;
    } else if (output == Output::attn_out && !in.observed.find("attn.probs", layer)) {
      const Row y = trace_row(in.observed, name, layer, last);
      const auto nmse = [&](const Setup& t) {
        const Row r = compute(t, Output::attn_out, last);
        return r.size() == y.size() && !y.empty() ? row_metrics(r.data(), y.data(), std::int64_t(y.size())).nmse
                                                  : double(INFINITY);
      };
      double best = nmse(right) / 10;
      for (std::int64_t k = 1; k <= last; k += k < 128 ? 1 : 32) {
        s.window = k;
        if (const double e = nmse(s); e < best) std::tie(best, w) = std::pair{e, k};
      }
      s = right;
    }
    if (w > 0) {
      s.window = w;
      s.ring = true;
      out.push_back({fmt::format("a cache of {} cells reused as a ring (key t in cell t mod {}): attention sees only "
                                 "the last {} keys (fitted at position {})",
                                 w, w, w, last),
                     "kv-cache", false, replay(s)});
      out.back().fitted = true;
      if (output == Output::attn_out) {  // the same numbers as a window mask: only probabilities tell them apart
        s.ring = false;
        out.push_back({fmt::format("a sliding window of {} keys on a layer that attends to every key (fitted at "
                                   "position {})",
                                   w, last),
                       "attention-mask", false, replay(s)});
        out.back().fitted = true;
      }
      s = right;
    }
  }
  s.cache.visible = Visible::one;
  s.cache.cursor = Cursor::stuck;
  out.push_back({"one visible key, slot 0 overwritten by each decode step: the cache length never advances",
                 "kv-cache", false, replay(s)});
  s = right;
  s.cache.cursor = Cursor::element;
  out.push_back({"cache rows written at element offset = length instead of length * kv_dim",
                 "kv-cache", false, replay(s)});
  s = right;
  s.cache.visible = Visible::capacity;
  out.push_back({"keys over the whole cache capacity, unwritten slots included (not sliced to the valid length)",
                 "kv-cache", false, replay(s)});
  s = right;
  s.cache.own_row_written = false;
  out.push_back({"the current position's K/V never appended to the cache", "kv-cache", false, replay(s)});
  if (in.prefill_chunk > 1 && in.prefill_chunk < in.prompt_length) {
    s = right;
    s.cache.cursor = Cursor::batch_start;
    out.push_back({fmt::format("each prefill chunk of {} rows written at the cache's start (slot 0) instead of after "
                               "the rows already cached",
                               in.prefill_chunk),
                   "kv-cache", false, replay(s)});
  }
  // Every other combination of where rows were written and which slots attention read.
  const std::pair<Cursor, const char*> cursors[] = {
      {Cursor::row, "at their rows"},
      {Cursor::element, "at element offset = length instead of length * kv_dim"},
      {Cursor::stuck, "at slot 0 from the first decode step on (the length never advances)"},
      {Cursor::late, "a slot late in decode"},
      {Cursor::early, "a slot early in decode (over the previous position's row)"}};
  const std::pair<Visible, const char*> visibles[] = {
      {Visible::causal, "keys 0..p"}, {Visible::one, "one key"}, {Visible::capacity, "every slot of the capacity"}};
  for (const auto& [cursor, where] : cursors)
    for (const auto& [visible, what] : visibles)
      for (bool own : {true, false}) {
        const bool named = (cursor == Cursor::row && visible == Visible::causal) ||
                           (cursor == Cursor::stuck && visible == Visible::one && own) ||
                           (cursor == Cursor::element && visible == Visible::causal && own) ||
                           (cursor == Cursor::row && visible == Visible::capacity && own) ||
                           (cursor == Cursor::late && visible == Visible::causal && own);
        if (named) continue;
        s = right;
        s.cache = {cursor, visible, own};
        out.push_back({fmt::format("cache rows written {}, attention over {}{}", where, what,
                                   own ? "" : ", the current position's row never appended"),
                       "kv-cache", false, replay(s)});
      }
  // One of the two caches written wrong, the other right (two write calls, one cursor off).
  for (const auto& [cursor, where] : cursors) {
    if (cursor == Cursor::row) continue;
    CacheReplay wrong = right.cache;
    wrong.cursor = cursor;
    for (const bool v_wrong : {true, false}) {
      s = right;
      s.cache = v_wrong ? right.cache : wrong;
      s.v_cache = v_wrong ? wrong : right.cache;
      out.push_back({fmt::format("{} cache rows written {}, {} right", v_wrong ? "V" : "K", where, v_wrong ? "K's" : "V's"),
                     "kv-cache", false, replay(s)});
    }
  }
  s = right;
  s.cache.visible = Visible::prompt;
  out.push_back({"every prompt position visible: no causal mask in the batched prefill", "attention-mask",
                 false, replay(s)});
  // One head's mask dropped (a per-head mask offset, a head loop whose last step skips the mask):
  // rows are head-major in all three outputs.
  for (int h = 0; h < c.n_head && c.n_head > 1; ++h)
    out.push_back({fmt::format("head {} alone without the causal mask in the batched prefill", h), "attention-mask",
                   false, [h, n_head = c.n_head, masked = replay(right), unmasked = replay(s)](std::int64_t p) {
                     Row r = masked(p);
                     const Row u = unmasked(p);
                     if (r.size() != u.size() || r.size() % std::size_t(n_head) != 0) return Row{};
                     const std::size_t width = r.size() / std::size_t(n_head);
                     std::copy_n(u.begin() + std::ptrdiff_t(h * width), width, r.begin() + std::ptrdiff_t(h * width));
                     return r;
                   }});
  // Keys lost at a step's boundary. The mask built without the cache's length gives the numbers
  // of a cache read over the wrong slots, and a mask hiding the keys earlier chunks cached those
  // of a chunk attending over its own K/V: listed in both classes, they tie.
  s = right;
  s.cache.visible = Visible::step_row;
  out.push_back({"the causal mask built from each query's row within its step, without the cache's length: a "
                 "decode step sees key 0 only, a prefill chunk's row r keys 0..r",
                 "attention-mask", false, replay(s)});
  if (in.prefill_chunk > 1 && in.prefill_chunk < in.prompt_length) {
    s.cache.visible = Visible::step_keys;
    out.push_back({fmt::format("each prefill chunk of {} rows attends over its own K/V only: the keys earlier chunks "
                               "cached not read (the batch's K/V used in place of the cache)",
                               in.prefill_chunk),
                   "kv-cache", false, replay(s)});
    out.push_back({fmt::format("the mask hides the keys earlier prefill chunks cached: each chunk of {} rows sees "
                               "its own keys only",
                               in.prefill_chunk),
                   "attention-mask", false, replay(s)});
  }
  std::vector<float> named_scales;  // of the variants below
  const auto near = [](double x, double y) { return std::abs(x / y - 1) < 1e-2; };
  // The model's own scale is 1/sqrt(head_dim), Gemma 27B's 1/sqrt(n_embd / n_head) (ModelConfig), or
  // Granite's attention multiplier.
  const std::string right_name = c.attention_multiplier > 0   ? fmt::format("the attention multiplier {:.4g}", right_scale)
                                 : c.attn_scale_dim == c.head_dim ? "1/sqrt(head_dim)"
                                                                  : "1/sqrt(n_embd / n_head)";
  auto scaled = [&](std::string variant, float scale) {
    if (near(scale, right_scale)) return;  // the model's own (Granite's 1/head_dim)
    s = right;
    s.scale = scale;
    named_scales.push_back(scale);
    out.push_back({std::move(variant), "attention-scale", false, replay(s)});
  };
  scaled(fmt::format("scores scaled by 1/d instead of {}", right_name), 1.0f / float(c.head_dim));
  scaled("scores not scaled", 1.0f);
  // The scale built from another dimension of the model; dimensions equal in this model are
  // named together, as no trace tells them apart.
  // (n_embd / n_head: the head width a config without head_dim defaults to; kv_dim / n_head: the
  // head width taken from the K cache's row over the query heads.)
  const std::pair<const char*, int> dims[] = {{"head_dim", c.head_dim},
                                              {"n_embd", c.n_embd},
                                              {"n_head", c.n_head},
                                              {"kv_dim", c.kv_dim()},
                                              {"n_rot", c.n_rot},
                                              {"n_embd / n_head", c.n_embd / c.n_head},
                                              {"kv_dim / n_head", c.kv_dim() / c.n_head}};
  const auto names_of = [&](int n) {
    std::string names;
    for (const auto& [what, m] : dims)
      if (m == n) names += (names.empty() ? "" : " or ") + std::string(what);
    return names;
  };
  for (std::size_t i = 0; i < std::size(dims); ++i) {
    const int n = dims[i].second;
    const bool named_before = std::any_of(dims, dims + i, [n](const auto& d) { return d.second == n; });
    if (n > 0 && !named_before)
      scaled(fmt::format("scores scaled by 1/sqrt({}) = 1/sqrt({}) instead of {}{}", names_of(n), n, right_name,
                         c.attention_multiplier > 0 && n == c.head_dim ? " (the model's attention.scale ignored)" : ""),
             1.0f / std::sqrt(float(n)));
  }
  const auto dim_text = [&](float scale) {
    for (const auto& [what, n] : dims)
      if (n > 0 && !near(right_scale, 1 / std::sqrt(double(n))) && near(scale, 1 / std::sqrt(double(n))))
        return fmt::format(" = 1/sqrt({}) = 1/sqrt({})", names_of(n), n);
    return std::string();
  };
  // A factor nobody listed (a softmax by exp2 whose scores miss log2 e, a temperature): its ratio
  // to the right scale fitted where the most keys are seen, at the last prompt position. A fit
  // that lands on a named scale leaves the naming to that variant.
  // The fits below (the scale, the heads' slots, the kv heads) read this tap's actual row and
  // its correct replay there.
  const std::int64_t fit_at = std::max<std::int64_t>(in.prompt_length - 1, 1);
  const Row actual_at_fit = trace_row(in.observed, name, layer, fit_at);
  const Row right_at_fit = compute(right, output, fit_at);
  const bool fit_on_probs = output == Output::probs;
  const auto k = fit_score_scale(fit_on_probs ? actual_at_fit : trace_row(in.observed, "attn.probs", layer, fit_at),
                                 fit_on_probs ? right_at_fit : compute(right, Output::probs, fit_at), c.n_head);
  if (k && !near(*k, 1) &&
      std::none_of(named_scales.begin(), named_scales.end(), [&](float n) { return near(*k * right_scale, n); })) {
    const char* why = near(*k, std::log(2.0))  ? ": exp2 in the softmax without log2(e) in the scores"
                      : near(*k, std::log2(M_E)) ? ": log2(e) in the scores for exp2, then exp used"
                                                 : "";
    s = right;
    s.scale = float(*k) * right_scale;
    out.push_back({fmt::format("scores scaled by {:.4g} = {:.4g} x {} (fitted to the actual "
                               "probabilities){}",
                               s.scale, *k, right_name, why),
                   "attention-scale", false, replay(s)});
    out.back().fitted = true;
  }
  // A scale wrong in decode steps only (the decode kernel's own), where the prompt's fits none:
  // fitted at the first decode step.
  if (const TapInfo* tap = in.observed.find(name, layer);
      (!k || near(*k, 1)) && tap && tap->last_position() >= in.prompt_length) {
    const std::int64_t d = in.prompt_length;
    const auto k_decode = fit_score_scale(trace_row(in.observed, "attn.probs", layer, d),
                                          compute(right, Output::probs, d), c.n_head);
    if (k_decode && !near(*k_decode, 1)) {
      s = right;
      s.decode_scale = float(*k_decode) * right_scale;
      out.push_back({fmt::format("decode steps' scores scaled by {:.4g}{} = {:.4g} x {}, the prompt's "
                                 "right (fitted at the first decode step): the decode kernel's own scale",
                                 s.decode_scale, dim_text(s.decode_scale), *k_decode, right_name),
                     "attention-scale", false, replay(s)});
      out.back().fitted = true;
    }
  }
  s = right;
  s.cache.visible = Visible::before;
  out.push_back({"keys 0..p-1: the range bound off by one, the position's own key left out", "attention-mask",
                 false, replay(s)});
  // In decode steps alone the same keys are a cache read before the step's append (no mask there).
  s.cache.visible = Visible::decode_before;
  out.push_back({"a decode step reads the cache sliced to its length before its own append (K[:p]): its own key "
                 "and value never read",
                 "kv-cache", false, replay(s)});
  s.cache.visible = Visible::strictly_before;
  Candidate strict{"keys t < p: the causal mask excludes the diagonal, position 0 sees no key", "attention-mask", false,
                   replay(s)};
  strict.explains_zeros = true;  // position 0's row
  out.push_back(std::move(strict));
  s = right;
  s.cache.visible = Visible::next;
  out.push_back({"keys 0..p+1 of the batch: the mask's bound off by one, one future key visible", "attention-mask",
                 false, replay(s)});
  s = right;
  s.cache.visible = Visible::batch_short;
  out.push_back({"the batch's key count one short: the last row of each batch loses its own key", "attention-mask",
                 false, replay(s)});
  // A mask nobody listed: the keys each position attends to, read off the actual probabilities
  // (where every head's are above zero), replayed from the trace's own K and V.
  if (output != Output::summary) {
    const TapInfo* probs = in.observed.find("attn.probs", layer);
    std::vector<std::string> seen_text;
    std::int64_t differing = 0, compared = 0;
    for (std::int64_t p = 0; probs && p < std::min<std::int64_t>(probs->n_rows, 512); ++p) {
      const auto seen = keys_seen(in.observed, layer, c.n_head, p);
      if (!seen) continue;
      ++compared;
      const std::int64_t first = right.window > 0 ? std::max<std::int64_t>(0, p - right.window + 1) : 0;
      if (*seen == std::pair{first, p + 1}) continue;
      if (++differing <= 3)
        seen_text.push_back(fmt::format("{} sees keys {}..{}", p, seen->first, seen->second - 1));
    }
    if (differing > 0) {
      s = right;
      s.mask_from_actual = true;
      out.push_back({fmt::format("attention over the keys the actual probabilities leave above zero, the mask or the "
                                 "key count wrong: position {} (of {} positions, {} differ from keys {}..p)",
                                 fmt::join(seen_text, ", position "), compared, differing,
                                 right.window > 0 ? "p-window+1" : "0"),
                     "attention-mask", false, replay(s)});
      out.back().fitted = true;
    }
  }
  if (output == Output::attn_out) {
    s = right;
    s.unnormalized = true;
    out.push_back({"the output not divided by the softmax's sum Σ exp(s - max s) (an online softmax without its last "
                   "step)",
                   "softmax", false, replay(s)});
  }
  s = right;
  s.online_sum_stale = true;
  out.push_back({"an online softmax whose running sum is not rescaled when the running max grows (S += exp(s - M) "
                 "without S · exp(M_old - M))",
                 "softmax", false, replay(s)});
  if (c.rotates(layer)) {
    s = right;
    s.keys_rotated_on_read = true;
    out.push_back({"the cached keys rotated again by their positions as attention reads them (RoPE applied at the "
                   "cache write and again at the read)",
                   "rope", false, replay(s)});
  }
  s = right;
  s.decode_slots_reversed = true;
  out.push_back({"decode steps read the cache's slots last to first (K and V alike: the output right, the "
                 "probabilities by slot reversed)",
                 "kv-cache", false, replay(s)});
  s = right;
  s.decode_v_from_k = true;
  out.push_back({"decode steps read V from the K cache (its pointer copied from K's)", "kv-cache", false, replay(s)});
  // Layer l - 1's cache; layer 0's index -1 wraps to the last layer's (Python's negative index, an
  // unsigned index modulo the layer count), whose row for this step is not written yet.
  if (const int previous = layer > 0 ? layer - 1 : c.n_layer - 1; previous != layer)
    for (const auto& [keys, values, what] : {std::tuple{false, true, "V"}, std::tuple{true, false, "K"},
                                             std::tuple{true, true, "K and V"}}) {
      s = right;
      s.decode_k_layer = keys ? previous : -1;
      s.decode_v_layer = values ? previous : -1;
      out.push_back({fmt::format("decode steps read {} from layer {}'s cache (the layer index of the cache read off "
                                 "by one{})",
                                 what, previous, layer == 0 ? ": -1 wrapping to the last layer" : ""),
                     "kv-cache", false, replay(s)});
      if (keys && values && layer > 0) {
        s.other_layer_in_prefill = true;
        out.push_back({fmt::format("every step reads K and V from layer {}'s cache, the prompt's batch too (the layer "
                                   "index of the cache read off by one; each layer writes its own)",
                                   layer - 1),
                       "kv-cache", false, replay(s)});
      }
    }
  // Attention right over what the cache holds (its rows read back): the cache's error (a 16-bit
  // cache in an f32 run, rows stored wrong), carried into attention.
  if (in.observed.find("kv.k", layer) && in.observed.find("kv.v", layer)) {
    s = right;
    s.cache_as_read_back = true;
    Candidate carried{"attention computed right over the cache's rows as the trace reads them back (kv.k, kv.v): "
                      "the cache's own error, carried into attention",
                      "kv-cache", false, replay(s)};
    carried.carries = {fmt::format("blk.{}.kv.k", layer), fmt::format("blk.{}.kv.v", layer)};
    out.push_back(std::move(carried));
  }
  s = right;
  s.quiet = true;
  out.push_back({"1 added to the softmax's denominator (a \"quiet\" softmax): each head's probabilities sum to "
                 "Z / (1 + Z)",
                 "softmax", false, replay(s)});
  s = right;
  s.masked_score = 0.0;
  out.push_back({"masked keys scored 0 instead of -inf: the causal mask's fill value written as 0", "attention-mask",
                 false, replay(s)});
  if (c.attn_softcap > 0) {
    s.masked_score = -double(c.attn_softcap);
    out.push_back({fmt::format("the soft-cap applied after the mask: masked keys scored -{0:g} (-inf capped at {0:g}) "
                               "instead of -inf",
                               c.attn_softcap),
                   "softcap", false, replay(s)});
  }
  s = right;
  s.normalized_over_batch = true;
  out.push_back({"softmax normalized over every key of the batch, the causal mask applied after it (the kept "
                 "probabilities not renormalized)",
                 "softmax", false, replay(s)});
  if (layer != c.n_layer - 1) {
    s = right;
    s.shared_across_layers = true;
    out.push_back({fmt::format("one cache for every layer (its index ignores the layer): the rows before the "
                               "current step hold layer {}'s K/V",
                               c.n_layer - 1),
                   "kv-cache", false, replay(s)});
  }
  // The heads' rows in other slots: slot j holds head from[j]'s.
  auto heads_from = [correct = replay(right), n_head = c.n_head](std::vector<int> from) {
    return [correct, n_head, from](std::int64_t p) {
      const Row o = correct(p);
      if (o.empty() || o.size() % std::size_t(n_head) != 0) return Row{};
      const std::size_t size = o.size() / std::size_t(n_head);
      Row moved(o.size());
      for (std::size_t j = 0; j < std::size_t(n_head); ++j)
        std::copy_n(o.begin() + std::ptrdiff_t(std::size_t(from[j]) * size), size,
                    moved.begin() + std::ptrdiff_t(j * size));
      return moved;
    };
  };
  std::vector<int> reversed(std::size_t(c.n_head));
  for (int h = 0; h < c.n_head; ++h) reversed[std::size_t(h)] = c.n_head - 1 - h;
  if (output == Output::attn_out && c.n_head > 1) {
    out.push_back({"head h's output written to slot n_head - 1 - h (the heads in reverse order)", "buffer", false,
                   heads_from(reversed)});
    const int n_head = c.n_head, d = c.head_dim;
    out.push_back({"the output laid out [head_dim][n_head] instead of [n_head][head_dim] (heads interleaved)",
                   "buffer", false, [correct = replay(right), n_head, d](std::int64_t p) {
                     const Row o = correct(p);
                     if (o.size() != std::size_t(n_head) * std::size_t(d)) return Row{};
                     Row moved(o.size());
                     for (int h = 0; h < n_head; ++h)
                       for (int i = 0; i < d; ++i)
                         moved[std::size_t(i) * std::size_t(n_head) + std::size_t(h)] =
                             o[std::size_t(h) * std::size_t(d) + std::size_t(i)];
                     return moved;
                   }});
    // An accumulator not cleared between heads: slot h holds the sum of heads 0..h.
    out.push_back({"head h's slot holds the sum of heads 0..h (an accumulator not cleared between heads)", "buffer", false,
                   [correct = replay(right), n_head](std::int64_t p) {
                     Row o = correct(p);
                     if (o.empty() || o.size() % std::size_t(n_head) != 0) return Row{};
                     const std::size_t size = o.size() / std::size_t(n_head);
                     for (std::size_t i = size; i < o.size(); ++i) o[i] += o[i - size];
                     return o;
                   }});
  }
  // Heads in slots nobody listed (pairs swapped, an index off by one): each slot's head fitted to
  // the correct replay's heads where the prompt ends.
  if (c.n_head > 1 && right_at_fit.size() == actual_at_fit.size()) {
    const std::size_t size = right_at_fit.size() / std::size_t(c.n_head);
    const auto from = fit_head_sources(actual_at_fit, c.n_head, c.n_head, [&](int, int head) {
      return right_at_fit.data() + std::size_t(head) * size;
    });
    std::vector<int> same(std::size_t(c.n_head));
    std::iota(same.begin(), same.end(), 0);
    if (from && *from != same && !(output == Output::attn_out && *from == reversed)) {
      out.push_back({fmt::format("slots 0.. hold the {} of heads {} (fitted where the prompt ends){}",
                                 output == Output::attn_out ? "outputs" : "attention rows", list_text(*from),
                                 heads_pattern(*from)),
                     "buffer", false, heads_from(*from)});
      out.back().fitted = true;
    }
  }
  s = right;
  s.view_offset = 1;
  out.push_back({"attention reads the cache from slot 1 on: key t is slot t + 1's row, key p a slot not yet written "
                 "(the cache view's offset one row too far)",
                 "kv-cache", false, replay(s)});
  s = right;
  s.half_softmax = HalfSoftmax::whole;
  out.push_back({"the softmax run in 16-bit floats: scores and probabilities rounded to f16", "softmax", false,
                 replay(s)});
  s.half_softmax = HalfSoftmax::whole_bf16;
  out.push_back({"the softmax run in bf16: scores and probabilities rounded to bf16", "softmax", false, replay(s)});
  for (const bool bf16 : {false, true}) {
    s.half_softmax = bf16 ? HalfSoftmax::sum_bf16 : HalfSoftmax::sum_f16;
    out.push_back({fmt::format("the softmax's denominator accumulated key by key in {} (each partial sum rounded)",
                               bf16 ? "bf16" : "f16"),
                   "softmax", false, replay(s)});
  }
  s.half_softmax = HalfSoftmax::exponentials;
  out.push_back({"the softmax's exponentials exp(s - max) kept in f16 (summed and divided in f32)", "softmax", false,
                 replay(s)});
  s.half_softmax_in_decode = true;
  out.push_back({"the softmax's exponentials exp(s - max) kept in f16 in decode steps only (the prefill's kernel "
                 "right)",
                 "softmax", false, replay(s)});
  s = right;
  s.cache.cursor = Cursor::late;
  out.push_back({"decode rows written one slot late (the write offset one row ahead of the length)", "kv-cache",
                 false, replay(s)});
  if (c.n_head_kv > 1) {
    std::vector<std::vector<int>> named;  // the kv heads of the query heads, by mapping
    for (const ref::GqaMap map : {ref::GqaMap::grouped, ref::GqaMap::modulo}) {
      named.emplace_back();
      for (int h = 0; h < c.n_head; ++h) named.back().push_back(ref::kv_head_for(h, c.n_head, c.n_head_kv, map));
    }
    named.emplace_back(std::size_t(c.n_head), 0);
    s = right;
    s.kv_of_head = named.back();
    out.push_back({"every query head reads kv head 0", "gqa-mapping", false, replay(s)});
    if (c.n_head_kv < c.n_head) {
      s = right;
      s.map = ref::GqaMap::modulo;
      out.push_back({"query head h reads kv head h % n_head_kv instead of h / (n_head / n_head_kv)",
                     "gqa-mapping", false, replay(s)});
      for (const auto& [k_rows, v_rows, what] :
           {std::tuple{true, true, "K and V"}, std::tuple{false, true, "V"}, std::tuple{true, false, "K"}}) {
        s = right;
        s.k_elements_repeated = k_rows;
        s.v_elements_repeated = v_rows;
        out.push_back({fmt::format("{} widened to the query heads element by element, not head by head (each "
                                   "element repeated n_head / n_head_kv times along the flattened row, as "
                                   "np.repeat or repeat_interleave on the last axis)",
                                   what),
                       "gqa-mapping", false, replay(s)});
      }
    }
    // A mapping nobody listed: each query head's kv head fitted where the prompt ends, from the
    // rows every query head would hold reading kv head g.
    std::vector<Row> reading(std::size_t(c.n_head_kv));
    for (int g = 0; g < c.n_head_kv; ++g) {
      s = right;
      s.kv_of_head.assign(std::size_t(c.n_head), g);
      reading[std::size_t(g)] = compute(s, output, fit_at);
    }
    const std::size_t size = actual_at_fit.size() / std::size_t(c.n_head);
    const auto kv = fit_head_sources(actual_at_fit, c.n_head, c.n_head_kv, [&](int h, int g) {
      const Row& r = reading[std::size_t(g)];
      return r.size() == actual_at_fit.size() ? r.data() + std::size_t(h) * size : nullptr;
    });
    if (kv && std::find(named.begin(), named.end(), *kv) == named.end()) {
      s = right;
      s.kv_of_head = *kv;
      out.push_back({fmt::format("query heads 0.. read kv heads {} instead of {} (fitted where the prompt ends)",
                                 list_text(*kv), list_text(named.front())),
                     "gqa-mapping", false, replay(s)});
      out.back().fitted = true;
    }
    // V gathered from other kv heads than K (a V offset computed on its own): the probabilities
    // are right, the output is not.
    if (output == Output::attn_out) {
      s = right;
      s.v_of_head.assign(std::size_t(c.n_head), 0);
      out.push_back({"every query head reads V from kv head 0 (K from its own kv head)", "gqa-mapping", false,
                     replay(s)});
      for (int g = 0; g < c.n_head_kv; ++g) {
        s = right;
        s.v_of_head.assign(std::size_t(c.n_head), g);
        reading[std::size_t(g)] = compute(s, output, fit_at);
      }
      const auto v = fit_head_sources(actual_at_fit, c.n_head, c.n_head_kv, [&](int h, int g) {
        const Row& r = reading[std::size_t(g)];
        return r.size() == actual_at_fit.size() ? r.data() + std::size_t(h) * size : nullptr;
      });
      if (v && *v != named.front() && *v != named.back()) {
        s = right;
        s.v_of_head = *v;
        out.push_back({fmt::format("query heads 0.. read V from kv heads {} instead of {}, K from their own (fitted "
                                   "where the prompt ends)",
                                   list_text(*v), list_text(named.front())),
                       "gqa-mapping", false, replay(s)});
        out.back().fitted = true;
      }
    }
  }
}

}  // namespace tapdiff::diff
