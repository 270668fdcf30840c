// Hypothesis replay through ops a trace does not record (an engine that traces its residual
// stream alone, a Hugging Face hidden-states dump). The ops between the recorded taps and the
// diverged one are computed right from the recorded taps; each variant of each of those ops is
// carried through the ops after it to the diverged tap, and judged there like any replay.
#pragma once

#include <string>
#include <vector>

#include "diff/hypotheses.hpp"
#include "tapdiff/trace_reader.hpp"

namespace tapdiff::diff {

struct UnrecordedInputs {
  // Taps `expected` records that the op of the diverged tap reads, directly or through other such
  // taps, and `inputs` does not: execution order, as `expected` holds them.
  std::vector<const TapInfo*> ops;
  std::vector<std::string> recorded;  // the recorded taps those ops start from, by full name, sorted
  int layers = 0;                     // how many layers the ops span
  // Whether block_candidates() replays them: each variant of an op recomputes every layer after it
  // over the positions judged, so a gap of a whole model (a trace of logits alone) is not replayed.
  bool replayed() const { return !ops.empty() && layers <= kMaxReplayedLayers; }
  static constexpr int kMaxReplayedLayers = 2;
};
// Empty where `inputs` records every input of tap (name, layer).
UnrecordedInputs unrecorded_inputs(const std::string& name, int layer, const TraceReader& inputs,
                                   const TraceReader& expected);

// Candidates for tap (name, layer) read through the unrecorded ops `ops` (unrecorded_inputs()):
// `in.actual` computes them from here on, and their variants join the tap's own, each named
// "blk.L.op, which the trace does not record: <variant>". decode_only: the tap's prompt rows are
// right, so the ops' variants act in decode steps alone (their prompt rows reach the decode steps
// through the cache).
std::vector<Candidate> block_candidates(const std::string& name, int layer, ReplayInputs& in,
                                        const std::vector<const TapInfo*>& ops, bool decode_only);

}  // namespace tapdiff::diff
