// What `run` checks of a run before anything is written: its length, its tap filter, and
// whether its context fits in memory.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "app/harness.hpp"
#include "model/config.hpp"
#include "model/gguf.hpp"

namespace tapdiff {

// The comma-separated globs of a --taps value, empty ones included.
std::vector<std::string_view> name_globs(const std::string& names);

// Positions are ints in every program, and a run's context is prompt + n_predict of them.
void check_positions(const RunSpec& s);

// A filter that selects none of the run's taps is a typo, not a request for an empty trace:
// '!*', which excludes every tap, asks for the tokens alone.
void check_filter_selects(const RunSpec& s, const ModelConfig& c, const GgufFile& file);

// A program preallocates its KV cache for the whole context (context_bytes, its own count):
// a context that cannot fit in memory is refused before anything is written.
void check_context_fits(const RunSpec& s, const ModelConfig& c, std::uint64_t context_bytes);

// Past the model's training context the programs still compute the same function, which a diff
// can compare, but the user should know: a line on stderr.
void note_past_training_context(const RunSpec& s, const ModelConfig& c);

}  // namespace tapdiff
