// Hypothesis replay: for the tap at the first divergence, the candidate computations that
// could have produced the actual trace's values: the correct one (the baseline) and named
// variants of it (W vs Wᵀ, bias absent, other RoPE pairing/position/base, other key ranges,
// scale, GQA mapping, ...). Each replays the op from the *actual* trace's own inputs through
// reference/ops, so an upstream error cannot masquerade as this op's bug.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "diff/cache_rounding.hpp"
#include "diff/replay_model.hpp"
#include "diff/replay_rows.hpp"
#include "tapdiff/trace_reader.hpp"

namespace tapdiff::diff {

struct Candidate {
  std::string variant;    // "W^T x (weights transposed)"
  std::string bug_class;  // the class it indicates; "" for the baseline
  bool baseline = false;  // the correct computation
  // The replayed row at `position` (row_size floats), or empty when it cannot be replayed.
  std::function<std::vector<float>(std::int64_t position)> replay;
  // It predicts zeros by design ("never written"): only such a variant may explain an actual
  // tensor that is all zero (any variant predicting small values would fit that by accident).
  bool explains_zeros = false;
  // What the values are taken from instead of being computed: a tap's full name, "zeros" or
  // "previous position"; "" when they are computed. A generic variant taking what a named one
  // takes is the same hypothesis and is dropped.
  std::string takes{};
  bool generic = false;  // from buffer_candidates(), which any tap gets
  // The taps whose recorded values it computes from where their own error is carried (the cache
  // as read back): a root at one of them explains this op's divergence.
  std::vector<std::string> carries{};
  // Its constant, mask or map was read off the actual values: it yields to a listed variant that
  // reproduces them as well, which predicted them without looking.
  bool fitted = false;
  // The ops it replaces that the trace does not record, by full name (diff/block_replay.hpp).
  std::vector<std::string> unrecorded_ops{};
};

struct ReplayInputs {
  // The trace the op's inputs are read from: the actual run's, or in lockstep the expected run's
  // (the actual run continued from the expected values at every tap).
  // Ops the trace does not record, computed from the ones it does, read as its own (RowSource).
  RowSource actual;
  // The trace whose values at the diagnosed tap are explained (the actual run's, in both modes):
  // fits read their constant, mask or map off it, and the run's settings below are its.
  const TraceReader& observed;
  ReplayModel& model;
  std::int64_t prompt_length;
  std::int64_t n_ctx;  // the actual run's context: its KV cache's capacity
  // How the actual run's KV cache stores K and V (cache_format_of()): attention replays round
  // them to it, and q as the dot product against K converts it.
  CacheFormat cache;
  // Prompt tokens per prefill step of the actual run (prefill_chunk_of()); 0: one batch.
  std::int64_t prefill_chunk = 0;
  // The correct computation alone, none of the variants (a replay that only asks whether the
  // op's output is what its inputs give).
  bool baseline_only = false;
  // Variants that hold a whole matrix of their own (W as a wrong decoder or loader left it, a
  // split-K panel's): off where every op of a block builds its variants at once (7B: 180 MB each).
  bool matrix_variants = true;
};

// The cache a trace's producer ran with: llama.cpp's kv_type, attn_rot_k and attn_rot_v
// settings, else a 16-bit precision (tapdiff's engine stores its cache in it), else f32. A
// quantized type the replay does not model, or one without the rotation settings, is f32 and
// not `modeled`.
CacheFormat cache_format_of(const TraceMetadata& m);
// The producer setting prefill_chunk (tapdiff's engine with --prefill-chunk), else 0.
std::int64_t prefill_chunk_of(const TraceMetadata& m);

// What replaying the op of `observed`'s run from `inputs`' rows needs: that run's context, cache
// format and prefill steps.
ReplayInputs replay_inputs(const TraceReader& inputs, const TraceReader& observed, ReplayModel& model,
                           std::int64_t prompt_length);

// The weight the op of tap `name` multiplies by (the embedding table, a projection's or the
// head's matrix); "" for an op that reads none.
std::string weight_read_by(const std::string& name, int layer, const ModelConfig& c);

// Candidates for tap `name` at `layer`; empty when the tap has no replay.
std::vector<Candidate> candidates_for(const std::string& name, int layer, ReplayInputs& in);

}  // namespace tapdiff::diff
