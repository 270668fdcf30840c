// A KV cache as a buggy engine may have filled and sliced it (attention's replays,
// hypotheses_attention.cpp): where each position's row was written, which slots attention read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "diff/replay_rows.hpp"

namespace tapdiff::diff {

enum class Cursor { row, element, stuck, late, early, batch_start };  // where position q's row was written
// Which cache slots attention read. step_keys: the keys of the position's own step only (a prefill
// chunk's, not those earlier steps cached); step_row: keys 0..r for the step's row r (the mask
// without the cache's length: a decode step sees key 0); decode_before: keys 0..p-1 in decode steps
// (the cache sliced to its length before the step's own append).
enum class Visible {
  causal, one, capacity, prompt, before, strictly_before, next, batch_short, step_keys, step_row, decode_before
};

struct CacheReplay {
  Cursor cursor = Cursor::row;
  Visible visible = Visible::causal;
  bool own_row_written = true;
};

// The cache memory ([n_ctx][kv_dim]) as the engine left it after position p's write, given
// the prompt was written in batches of `chunk` rows (0: one batch) and each later position one
// at a time; `rows` are the trace's own per-position K or V rows (computed before the cache).
std::vector<double> simulate_cache(const Rows& rows, std::int64_t prompt, std::int64_t chunk, std::int64_t n_ctx,
                                   std::size_t kv_dim, const CacheReplay& how, std::int64_t p);

// The first position of the step that computed position p: its prefill chunk's, or p in decode.
std::int64_t step_start(std::int64_t p, std::int64_t prompt, std::int64_t chunk);

// Attention reads keys [first_visible_key, visible_keys).
std::int64_t first_visible_key(const CacheReplay& how, std::int64_t prompt, std::int64_t chunk, std::int64_t p);
std::int64_t visible_keys(const CacheReplay& how, std::int64_t prompt, std::int64_t chunk, std::int64_t n_ctx,
                          std::int64_t p);

}  // namespace tapdiff::diff
