// gzip for traces, applied at close: writes a shuffle+gzip copy of a complete trace next to
// it and renames it over the original. Compressing while streaming is not crash-safe: HDF5
// rewrites a partly filled compressed chunk elsewhere at every flush, and a kill can leave
// committed rows in a chunk that no longer decodes. A run killed before close keeps its
// uncompressed trace.
#pragma once

#include <string>

namespace tapdiff {

// Throws TraceError; the original trace is untouched then.
void compress_trace(const std::string& path, int gzip_level);

}  // namespace tapdiff
