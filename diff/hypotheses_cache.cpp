// Hypotheses at the KV cache's read-back taps (kv.k, kv.v): the slot read back holding zeros,
// another position's row, another layer's or the other tensor's, a row stored in another format.
#include "diff/hypothesis_families.hpp"

#include <algorithm>
#include <functional>
#include <iterator>
#include <map>
#include <numeric>
#include <fmt/format.h>

#include "diff/replay_rows.hpp"
#include "model/half.hpp"

namespace tapdiff::diff {

void cache_candidates(const std::string& name, int layer, ReplayInputs& in, std::vector<Candidate>& out) {
  const bool is_k = name == "kv.k";
  const std::string src = is_k ? "attn_k.rope" : "attn_v";
  auto row_of = [&in, layer](const std::string& tap, std::int64_t shift) {
    return [&in, layer, tap, shift](std::int64_t p) { return trace_row(in.actual, tap, layer, p + shift); };
  };
  out.push_back({"the row computed for this position", "", true, row_of(src, 0)});
  if (in.baseline_only) return;
  out.push_back(never_written("zeros: the row was never written", "kv-cache", in, src, layer));
  // A batched append one row short: each prefill batch's last row left for a step that never
  // writes it (the last prompt token's K/V "appended by decode").
  Candidate short_batch{"zeros at the last row of each prefill batch: the batch appended one row short",
                        "kv-cache", false, [row = row_of(src, 0), prompt = in.prompt_length,
                                            chunk = in.prefill_chunk](std::int64_t p) {
                          Row r = row(p);
                          const std::int64_t size = chunk > 0 ? chunk : prompt, start = p / size * size;
                          const std::int64_t n = std::min(size, prompt - start);
                          if (p < prompt && n > 1 && p == start + n - 1) std::fill(r.begin(), r.end(), 0.0f);
                          return r;
                        }};
  short_batch.explains_zeros = true;
  out.push_back(std::move(short_batch));
  Candidate previous{"the previous position's row (the write cursor did not advance)", "kv-cache", false,
                     row_of(src, -1)};
  previous.takes = "previous position";
  out.push_back(std::move(previous));
  auto taken_from = [&](const char* variant, const std::string& tap) {
    Candidate c{variant, "kv-cache", false, row_of(tap, 0)};
    c.takes = fmt::format("blk.{}.{}", layer, tap);
    out.push_back(std::move(c));
  };
  if (is_k) taken_from("K before RoPE: the cache written from attn_k instead of attn_k.rope", "attn_k");
  // K pre-scaled as it is cached, by the attention's scale (a kernel that folds the scale into K).
  if (const float scale = in.model.config().attn_scale(); is_k)
    out.push_back({fmt::format("K times the attention scale {:.4g} as it is cached (the scale folded into K)", scale),
                   "attention-scale", false, [row = row_of(src, 0), scale](std::int64_t p) {
                     Row r = row(p);
                     for (float& v : r) v *= scale;
                     return r;
                   }});
  taken_from(is_k ? "the V row: K and V caches swapped" : "the K row: K and V caches swapped",
             is_k ? "attn_v" : "attn_k.rope");
  // V rotated as K is; in a layer without RoPE (smollm3's NoPE layers) K rotated too, on its way
  // into the cache.
  if (!is_k || !in.model.config().rotates(layer)) {
    out.push_back({is_k ? fmt::format("K rotated by RoPE at p into the cache, though layer {} has no positional "
                                      "encoding (NoPE): the cache write's own rotation, or the NoPE test wrong there",
                                      layer)
                        : std::string("V rotated by RoPE at p, as K is (the rotation applied to V too)"),
                   "rope", false,
                   [&in, row = row_of(src, 0), layer, kv_dim = std::size_t(in.model.config().kv_dim())](std::int64_t p) {
                     const Row v = row(p);
                     return v.size() == kv_dim ? rotated_as_model(in, layer, v, p) : Row{};
                   }});
  }
  // The rows stored transposed ([kv_dim][n_ctx], ggml's V layout without flash attention) and
  // read back row-major: element j of slot p is element i / n_ctx of row i % n_ctx, i = p kv_dim + j.
  out.push_back({"the rows stored transposed ([kv_dim][n_ctx]) and read back row-major", "kv-cache", false,
                 [&in, src, layer](std::int64_t p) {
                   // Slot p read back once its step has written: a prefill batch writes all its rows.
                   const std::int64_t step = in.prefill_chunk > 0 ? in.prefill_chunk : in.prompt_length;
                   const std::int64_t written =
                       p < in.prompt_length ? std::min(in.prompt_length, (p / step + 1) * step) - 1 : p;
                   const Rows rows = trace_rows_upto(in.actual, src, layer, written);
                   if (rows.empty() || rows.back().empty()) return Row{};
                   const std::size_t kv_dim = rows.back().size();
                   Row r(kv_dim, 0.0f);
                   for (std::size_t j = 0; j < kv_dim; ++j) {
                     const std::size_t i = std::size_t(p) * kv_dim + j, t = i % std::size_t(in.n_ctx);
                     const std::size_t element = i / std::size_t(in.n_ctx);
                     if (t < rows.size() && element < rows[t].size()) r[j] = rows[t][element];
                   }
                   return r;
                 }});
  const std::string& type = in.cache.type;
  // Rows written to other slots (a batch index reversed or shifted): the computed row each slot
  // holds, matched bit for bit as the cache stores it.
  if (const TapInfo* self = in.observed.find(name, layer);
      self && self->n_rows > 1 && (type == "f32" || type == "f16" || type == "bf16")) {
    auto stored = [type](Row r) {
      for (float& v : r)
        v = type == "f32" ? v : rounded_16bit(v, type == "bf16");
      return r;
    };
    const std::int64_t n = std::min<std::int64_t>(self->last_position() + 1, 1024);
    // Positions by row, in order: tokens repeated in a prompt give the same rows (layer 0's V).
    std::map<Row, std::vector<std::int64_t>> positions_of;
    for (std::int64_t t = 0; t < n; ++t) positions_of[stored(trace_row(in.actual, src, layer, t))].push_back(t);
    // The position whose row slot p holds: p itself where its row is that row, else the latest
    // earlier one, else the first; -1: a slot holding zeros, never written.
    std::vector<int> from;
    for (std::int64_t p = 0; p < n; ++p) {
      const Row held = trace_row(in.observed, name, layer, p);
      const auto it = positions_of.find(held);
      const bool zero = !held.empty() && std::all_of(held.begin(), held.end(), [](float v) { return v == 0; });
      if (it == positions_of.end() && !zero) break;
      if (it == positions_of.end()) {
        from.push_back(-1);
        continue;
      }
      const std::vector<std::int64_t>& at = it->second;
      const auto after = std::upper_bound(at.begin(), at.end(), p);
      from.push_back(int(after != at.begin() ? *std::prev(after) : at.front()));
    }
    std::vector<int> same(from.size());
    std::iota(same.begin(), same.end(), 0);
    const bool some_row = std::any_of(from.begin(), from.end(), [](int t) { return t >= 0; });
    if (std::int64_t(from.size()) == n && from != same && some_row) {
      const auto prompt = std::size_t(std::min<std::int64_t>(in.prompt_length, n));
      const auto prompt_rows_are = [&](const std::function<int(std::size_t)>& expected) {
        for (std::size_t p = 0; p < from.size(); ++p)
          if (from[p] != (p < prompt ? expected(p) : int(p))) return false;
        return true;
      };
      std::string why;
      if (prompt > 1 && prompt_rows_are([&](std::size_t p) { return int(prompt - 1 - p); }))
        why = ": the prompt's rows written last-first (the batch's row index reversed)";
      for (std::size_t k = 2; why.empty() && k < prompt; ++k)
        if (prompt_rows_are([k](std::size_t p) { return p % k == 0 ? int(p / k) : -1; }))
          why = fmt::format(": the prompt's row t written at slot {}t (its rows written at {} times the row stride, the "
                            "slots between left unwritten)",
                            k, k);
      const std::vector<int> shown(from.begin(), from.begin() + std::ptrdiff_t(std::min<std::size_t>(from.size(), 16)));
      std::vector<std::string> names;
      for (int t : shown) names.push_back(t >= 0 ? std::to_string(t) : "none (zeros)");
      Candidate slots{fmt::format("slots 0.. hold the rows of positions [{}]{}{}", fmt::join(names, ", "),
                                  from.size() > shown.size() ? " ..." : "", why),
                      "kv-cache", false, [stored, from, row = row_of(src, 0)](std::int64_t p) {
                        if (p >= std::int64_t(from.size())) return row(p);
                        if (from[std::size_t(p)] >= 0) return stored(row(from[std::size_t(p)]));
                        Row zeros = row(p);
                        std::fill(zeros.begin(), zeros.end(), 0.0f);
                        return zeros;
                      }};
      slots.fitted = true;
      slots.explains_zeros = std::count(from.begin(), from.end(), -1) > 0;
      out.push_back(std::move(slots));
    }
  }
  if (type == "f32")
    for (const char* to : {"f16", "bf16"}) {
      const bool bf16 = to == std::string("bf16");
      out.push_back({fmt::format("the row rounded to {} before it is cached (a 16-bit cache in an f32 run)", to),
                     "kv-cache", false, [row = row_of(src, 0), bf16](std::int64_t p) {
                       Row r = row(p);
                       for (float& v : r) v = rounded_16bit(v, bf16);
                       return r;
                     }});
    }
  if (type == "f32")
    out.push_back({"the row truncated to bf16 before it is cached (the low 16 bits dropped, not rounded: a bf16 "
                   "cache in an f32 run)",
                   "kv-cache", false, [row = row_of(src, 0)](std::int64_t p) {
                     Row r = row(p);
                     for (float& v : r) v = bits_float(float_bits(v) & 0xffff0000u);
                     return r;
                   }});
  // A 16-bit cache written in one of the two formats and read as the other.
  if (type == "f16" || type == "bf16") {
    const bool bf16 = type == "bf16";
    out.push_back({fmt::format("the cache stored in {} and read back as {}", type, bf16 ? "f16" : "bf16"), "kv-cache",
                   false, [row = row_of(src, 0), bf16](std::int64_t p) {
                     Row r = row(p);
                     for (float& v : r) v = bf16 ? fp16_to_fp32(fp32_to_bf16(v)) : bf16_to_fp32(fp32_to_fp16(v));
                     return r;
                   }});
    out.push_back({fmt::format("the row's {} bits written into the {} cache (converted to the other 16-bit type, its "
                               "bits read as this one's)",
                               bf16 ? "f16" : "bf16", type),
                   "kv-cache", false, [row = row_of(src, 0), bf16](std::int64_t p) {
                     Row r = row(p);
                     for (float& v : r) v = bf16 ? bf16_to_fp32(fp32_to_fp16(v)) : fp16_to_fp32(fp32_to_bf16(v));
                     return r;
                   }});
  }
}

}  // namespace tapdiff::diff
