// A row over its threshold and its jump test may still be no fault of its op: a model can
// amplify an input difference that was within tolerance (an attention sink's near-zero value
// vector; an 8-bit activation block with an outlier, as llama.cpp quantizes them). Replaying
// the op correctly from the actual trace's own inputs tells the two apart: when that replay
// reproduces the actual row within the tap's tolerance, the op's own error is within the
// precision's noise and the row is not a divergence.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "diff/result.hpp"
#include "tapdiff/trace_reader.hpp"

namespace tapdiff::diff {

// Taps are checked in execution order, up to the first one with a diverged row the replay
// does not explain (or cannot replay, unless all its rows are within the replay band); each
// tap cleared gets an "amplified" finding saying so. The replay needs the model (model_path,
// or the expected trace's), except for ffn.act, whose gate bounds its own error from the two
// traces' inputs alone; without the model nothing else changes, and it returns false.
// every_tap (diff --all): every tap is checked, not only those up to the first own divergence.
bool clear_amplified_rows(DiffResult& r, const TraceReader& a, const TraceReader& b, const std::string& model_path,
                          bool every_tap = false);

// Lockstep: a suspect row is confirmed (it diverges) when the op, replayed from the expected
// trace's values it was given, is off from the actual row by more than the floor too.
void confirm_lockstep_suspects(DiffResult& r, const TraceReader& a, const TraceReader& b,
                               const std::string& model_path);

// Rows within their tap's replay band (ToleranceProfile::replay_band_nmse) that no replay found
// to be the op's own error pass. `replayed`: whether the model replay ran; when it did not and
// rows passed so, an "unreplayed" finding says which.
void settle_replay_band(DiffResult& r, bool replayed);

// Rows of t over its tolerance that the jump test let pass, as they carry an earlier root's error,
// but that the correct computation replayed from the actual trace's own inputs does not give: the
// op's own error under the inherited one (diff --all). Their positions; empty where every such
// row is what its inputs give, or none can be replayed. `model`: the replay's, kept by the caller.
class ReplayModel;
std::vector<std::int64_t> own_rows_under_inherited(const TapComparison& t, const TraceReader& b, ReplayModel& model,
                                                   std::int64_t prompt_length);

// Suspect rows (RowMetrics::suspect) no replay confirmed pass; each confirmed one stays diverged
// with a "below-threshold" finding saying why a row under the threshold diverges.
void drop_unconfirmed_suspects(DiffResult& r);

}  // namespace tapdiff::diff
