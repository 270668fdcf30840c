#include "diff/cache_replay.hpp"

#include <algorithm>

namespace tapdiff::diff {

std::vector<double> simulate_cache(const Rows& rows, std::int64_t prompt, std::int64_t chunk, std::int64_t n_ctx,
                                   std::size_t kv_dim, const CacheReplay& how, std::int64_t p) {
  std::vector<double> cache(static_cast<std::size_t>(n_ctx) * kv_dim, 0.0);
  std::int64_t length = 0;
  // Rows first .. first + n - 1 of a step of batch rows.
  auto write = [&](std::int64_t first, std::int64_t n, std::int64_t batch) {
    const std::int64_t at = how.cursor == Cursor::element                   ? length
                            : how.cursor == Cursor::stuck                   ? 0
                            : how.cursor == Cursor::batch_start && batch > 1 ? 0
                            : how.cursor == Cursor::late && length > 0      ? (length + 1) * std::int64_t(kv_dim)
                            : how.cursor == Cursor::early && batch == 1 && length > 0 ? (length - 1) * std::int64_t(kv_dim)
                                                                            : length * std::int64_t(kv_dim);
    for (std::int64_t r = 0; r < n; ++r) {
      const Row& row = rows[std::size_t(first + r)];
      for (std::size_t i = 0; i < kv_dim && i < row.size(); ++i) {
        const auto dst = std::size_t(at) + std::size_t(r) * kv_dim + i;
        if (dst < cache.size()) cache[dst] = row[i];
      }
    }
    if (how.cursor != Cursor::stuck) length += n;
  };
  const std::int64_t step = chunk > 0 ? chunk : prompt;
  const std::int64_t prompt_rows = std::min(prompt, p + 1);
  for (std::int64_t first = 0; first < prompt_rows; first += step)
    write(first, std::min(step, prompt_rows - first), std::min(step, prompt - first));
  for (std::int64_t q = prompt_rows; q <= p; ++q)
    if (q < p || how.own_row_written) write(q, 1, 1);
    else if (how.cursor != Cursor::stuck) ++length;
  return cache;
}

std::int64_t step_start(std::int64_t p, std::int64_t prompt, std::int64_t chunk) {
  return p >= prompt ? p : chunk > 0 ? p / chunk * chunk : 0;
}

std::int64_t first_visible_key(const CacheReplay& how, std::int64_t prompt, std::int64_t chunk, std::int64_t p) {
  return how.visible == Visible::step_keys && p < prompt ? step_start(p, prompt, chunk) : 0;
}

std::int64_t visible_keys(const CacheReplay& how, std::int64_t prompt, std::int64_t chunk, std::int64_t n_ctx,
                          std::int64_t p) {
  switch (how.visible) {
    case Visible::step_keys: return p + 1;
    case Visible::step_row: return p - step_start(p, prompt, chunk) + 1;
    case Visible::causal: return p + 1;
    case Visible::one: return 1;
    case Visible::capacity: return n_ctx;
    case Visible::prompt: return std::max(prompt, p + 1);
    case Visible::before: return std::max<std::int64_t>(p, 1);
    case Visible::decode_before: return p < prompt ? p + 1 : p;
    case Visible::strictly_before: return p;
    case Visible::next: return std::min(p + 2, p < prompt ? prompt : p + 1);  // within the batch's keys
    case Visible::batch_short: return std::min(p + 1, (p < prompt ? prompt : p + 1) - 1);
  }
  return p + 1;
}

}  // namespace tapdiff::diff
