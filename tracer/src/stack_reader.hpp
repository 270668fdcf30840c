// Reads a tap's rows out of its stack (/taps/<stack>/data, docs/trace-schema.md), keeping each
// stack's dataset open. Uncompressed stacks have no chunk cache: HDF5 then reads just the
// slot's bytes of each chunk (measured faster than a cache, and a block cache kept for the
// other slots gained nothing: faulting in the memory cost what the reads saved). A compressed
// chunk must be inflated whole, so a chunk cache keeps it for the other slots.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "h5.hpp"
#include "tapdiff/trace_reader.hpp"

namespace tapdiff {

class StackReader {
public:
  StackReader(hid_t file, const std::string& path) : file_(file), path_(path) {}

  // Rows [r0, r1) of the tap's slot into out ((r1 - r0) * tap.row_size floats).
  void read(const TapInfo& tap, std::int64_t r0, std::int64_t r1, float* out);

private:
  hid_t open(const std::string& stack, const h5::Where& where);

  hid_t file_;
  const std::string& path_;
  std::map<std::string, h5::Id> data_;  // by stack
};

}  // namespace tapdiff
