// Root attributes, /hparams and /dims: written by the writer at open, read and validated by
// the reader (format and version first, so a newer major version reports as such).
#pragma once

#include <string>

#include "h5.hpp"
#include "tapdiff/tap_filter.hpp"
#include "tapdiff/trace_metadata.hpp"

namespace tapdiff {

// Everything except tokens and the committed counters, which the writer keeps updating.
void write_metadata(hid_t file, const std::string& path, const TraceMetadata& metadata,
                    const TapFilterSpec& filter);

struct RootState {
  FormatVersion version;
  TraceMetadata metadata;  // tokens left empty
  TapFilterSpec filter;
  bool complete = false;
  std::int64_t committed_steps = 0;
  std::int64_t committed_tokens = 0;
};

RootState read_root(hid_t file, const std::string& path);

}  // namespace tapdiff
