// A standalone repro of one finding: a directory with the model part the finding's op runs in
// (model/model_part.hpp), the expected trace's values of every tap of that part (the op's inputs
// and its expected output), the actual trace's values of the op's own inputs and output (.npy,
// for the numpy replay), a manifest, and two ways to run it:
//
//   tapdiff replay DIR   the engine (this build, the run's precision and faults) runs the part
//                        in lockstep from the expected inputs; exit 1 when the finding's tap
//                        diverges again, 0 when it does not (a fixed engine)
//   python DIR/repro.py  numpy replays the op from the actual trace's inputs and compares the
//                        actual output (any engine; what a bug report carries)
//
// Neither needs the model. The part is the finding's layer; when that does not reproduce it (a
// bug that crosses layers), every layer, then the whole model.
#pragma once

#include <optional>
#include <string>

#include "diff/result.hpp"

namespace tapdiff {

struct ReproOptions {
  std::string expected, actual;  // the traces (or, with report, taken from it)
  std::string report;            // a JSON report of `diff` or `check` (its traces' paths)
  std::string model;             // default: the expected trace's model
  int root = 1;                  // the k-th independent root (diff --all order); 1: the first finding
  std::string dir;               // written; must not exist or be empty
};

struct ReproWritten {
  std::string tap;        // the finding, "blk.0.attn.probs"
  std::int64_t position = 0;
  int first_stage = 0, last_stage = 0;
  std::optional<bool> reproduced;  // the engine replay at writing; nullopt: not tapdiff's engine
};

// Throws std::invalid_argument / InputError / TraceError for bad input; nothing diverged is an
// invalid_argument too (there is nothing to reproduce).
ReproWritten write_repro(const ReproOptions& options);

struct ReplayOutcome {
  bool diverged = false;
  std::string text;  // what to print: the finding again (metrics) or that it passes
};

// Replays DIR with tapdiff's engine; fault overrides the manifest's ("none": a clean engine).
ReplayOutcome replay_repro(const std::string& dir, const std::optional<std::string>& fault);

}  // namespace tapdiff
