// Reads a tap's rows out of its stack (/taps/<stack>/data, docs/trace-schema.md), keeping each
// stack's dataset open. A chunk holds a row of every slot:
// - Read slot by slot, HDF5 fetches just the slot's bytes of each chunk: one read call per row.
//   Uncompressed stacks get no chunk cache for this (measured faster than one).
// - A caller going through one stack slot after slot (diff does) asks for the same rows of
//   the same stack twice in a row: the second read fetches those rows of every slot in one
//   block, kept until another stack or range is read, and the following slots come from it.
//   Callers that hop between stacks (execution order) never pay for a block.
// - A compressed chunk must be inflated whole: a chunk cache keeps it for the other slots.
// - A slot's first batch_rows rows are in the stack's `batch` (slot-major, format 3): they come
//   from there, one read per slot.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "h5.hpp"
#include "tapdiff/float_memory.hpp"
#include "tapdiff/trace_reader.hpp"

namespace tapdiff {

class StackReader {
public:
  StackReader(hid_t file, const std::string& path, const std::vector<TapInfo>& taps);

  // Rows [r0, r1) of the tap's slot into out ((r1 - r0) * tap.stored_size floats).
  void read(const TapInfo& tap, std::int64_t r0, std::int64_t r1, float* out);
  // The number of slots in the tap's stack, and rows [r0, r1) of all of them into out
  // ((r1 - r0) * slots * tap.stored_size floats, row by row).
  std::int64_t slots(const TapInfo& tap);
  void read_all_slots(const TapInfo& tap, std::int64_t r0, std::int64_t r1, float* out);

private:
  struct Block {
    std::string stack;
    std::int64_t r0 = 0, r1 = 0;  // rows [r0, r1) of every slot
    hsize_t slots = 0;
    FloatBuffer values;  // (r1 - r0, slots, row size)
  };

  // The stack's dataset at where.object (`data` or `batch`), kept open in `opened`.
  hid_t open(std::map<std::string, h5::Id>& opened, const std::string& stack, const h5::Where& where);
  bool read_block(const TapInfo& tap, std::int64_t r0, std::int64_t r1);
  // Rows [r0, r1) of `slot` from the stack's batch into out, a (r1 - r0, mem_slots, row) block
  // at column mem_slot.
  void read_batch(const TapInfo& tap, std::size_t slot, std::int64_t r0, std::int64_t r1, float* out,
                  hsize_t mem_slots, hsize_t mem_slot);

  hid_t file_;
  const std::string& path_;
  std::map<std::string, h5::Id> data_;   // by stack
  std::map<std::string, h5::Id> batch_;  // by stack
  std::map<std::string, std::vector<std::int64_t>> batch_rows_;  // by stack, per slot
  Block block_;
  FloatBuffer gather_;  // a slot's batch rows on their way into a block of every slot
  std::string last_stack_;  // the previous read, to see a caller going slot after slot
  std::int64_t last_r0_ = -1, last_r1_ = -1;
};

}  // namespace tapdiff
