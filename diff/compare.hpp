// diff_traces: aligns two traces, measures every tap at every common position, applies the
// tolerance profile and the jump test, and finds the first divergence (DESIGN.md "Diff and
// diagnosis") and the independent roots (roots.hpp). Streams tap by tap: memory holds one tap's rows, never a whole trace.
#pragma once

#include <optional>
#include <string>

#include "diff/result.hpp"
#include "diff/tolerance.hpp"

namespace tapdiff::diff {

struct DiffOptions {
  std::optional<ToleranceProfile> profile;  // default: for the actual trace's precision
  bool diagnose = true;                     // hypothesis replay at the first divergence
  std::string model_path;                   // GGUF for replay; default: the expected trace's
  bool all = false;       // every divergence grouped by independent root (DiffMode::all)
  bool lockstep = false;  // DiffMode::lockstep; also chosen when the actual trace says lockstep
};

// Throws TraceError / InputError when a trace cannot be read. Traces of different models
// give Verdict::incompatible with a "metadata" finding naming both hashes.
DiffResult diff_traces(const std::string& expected_path, const std::string& actual_path,
                       const DiffOptions& options = {});

}  // namespace tapdiff::diff
