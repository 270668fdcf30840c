// Hand-built diff results covering what the renderers must handle: a pass, a divergence with
// diagnosis, logits and structural findings, an incompatible pair, and hostile content (NaN
// metrics, markup and control characters, invalid UTF-8 in names and paths).
#pragma once

#include <string>
#include <vector>

#include "diff/result.hpp"

namespace tapdiff::reports::testing {

diff::DiffResult passing_result();
diff::DiffResult diverged_result();      // kv-stuck-length: blk.0.attn.probs from position 8
diff::DiffResult incompatible_result();  // different models
diff::DiffResult hostile_result();       // NaN at blk.1.attn_q, names with <&>"' and worse
// Lockstep mode with four independent roots: bias (blk.0.attn_q, explaining blk.0.attn_k),
// rope (blk.0.attn_q.rope), matmul-layout (output) and a shape root (blk.1.ffn_gate).
diff::DiffResult lockstep_result();

// Strings hostile_result() plants; every format must carry them escaped, never raw.
inline constexpr const char* kHostileTap = "blk.1.attn_q<&>\"'";
inline constexpr const char* kHostilePath = "/tmp/we<i>rd & \"trace\" 'x'.h5";

struct NamedResult {
  std::string name;
  diff::DiffResult result;
};
std::vector<NamedResult> all_results();

// How many times `what` occurs in `text` (overlapping occurrences included).
int count_occurrences(const std::string& text, const std::string& what);

}  // namespace tapdiff::reports::testing
