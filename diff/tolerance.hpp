// Tolerance profiles: per tap class, the NMSE above which a row may be a divergence, and the
// jump factor: a row diverges only when its NMSE also exceeds jump_factor × the largest NMSE
// of its inputs, so rounding noise that grows layer after layer (f16 over 30 layers) is not a
// bug while an error that appears at one op (a dropped bias at layer 17) still is.
// Built-in profiles f32, f16, bf16, q8 (docs/tolerance.md says how they were calibrated);
// users override them with a JSON file.
#pragma once

#include <map>
#include <string>
#include <string_view>

namespace tapdiff::diff {

struct ToleranceProfile {
  std::string name;
  std::map<std::string, double, std::less<>> nmse;  // tap class → threshold
  double default_nmse = 0;                          // classes not listed
  double jump_factor = 10;
  // Rows over their class's threshold but at most this NMSE diverge only where replaying the
  // op from its own inputs confirms the error is the op's (diff/amplified.hpp); where nothing
  // replays them (no model, --no-diagnosis) they pass. 0: no such band. q8's GEMMs leave
  // inherited noise that f32 ops after them (attention, SiLU) may amplify past 3e-3.
  double replay_band_nmse = 0;
  // Rows under their threshold but above this NMSE and a thousand times their inputs' error are
  // suspects: they diverge only where replaying the op from the actual trace's own inputs leaves
  // an own error above it too (a bug too small for the threshold on a small model: the exact
  // GELU for the tanh one, a RoPE base rounded to bf16). 0: none (every profile but f32, whose
  // honest own errors sit far below it).
  double own_error_floor_nmse = 0;

  double threshold(std::string_view tap_class) const;
};

// "f32", "f16", "bf16" or "q8"; throws std::invalid_argument for other names.
ToleranceProfile builtin_profile(std::string_view name);
// The built-in profile for a trace's precision ("f64" and unknown precisions use f32).
ToleranceProfile profile_for_precision(std::string_view precision);
// Whether a precision names a profile of its own (f64 is f32's): other names get a finding.
bool has_profile(std::string_view precision);
// Two traces: the looser of their precisions' profiles (reference f32 vs a llama.cpp run
// with 8-bit activations is judged by the q8 profile, whichever side it is on).
ToleranceProfile profile_for_precisions(std::string_view expected, std::string_view actual);

// A JSON file: {"base": "f16", "jump_factor": 10, "nmse": {"projection": 1e-4, ...},
// "default_nmse": 1e-4, "replay_band_nmse": 0, "own_error_floor_nmse": 0}; every key optional but base; classes the base
// lists keep their thresholds unless "nmse" names them. Errors throw InputError naming the
// file, the key and what was expected.
ToleranceProfile load_profile(const std::string& path);
ToleranceProfile parse_profile(std::string_view json_text, const std::string& source);

}  // namespace tapdiff::diff
