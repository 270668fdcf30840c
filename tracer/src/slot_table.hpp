// A chunked dataset of (rows, slots, *inner) that grows in its first two dimensions: the
// `data` and `runs` of a tap stack (docs/trace-schema.md); or, slot-major, (slots, rows,
// *inner): its `batch`. Rows grow by whole chunks, so most steps change no extent; trim() sets
// the exact size at close.
#pragma once

#include <array>
#include <vector>

#include "extendable.hpp"
#include "h5.hpp"

namespace tapdiff {

class SlotTable {
public:
  static constexpr int kMaxRank = 6;  // rows, slots, and a row of up to 4 dimensions

  // chunk_last: when not 0, chunks split the last dimension into blocks of this many elements
  // (write() may then leave the blocks past a row's extent unallocated: they read as 0).
  // slot_major: the dataset is (slots, rows, *inner); the calls below still take rows first,
  // and write() takes one slot at a time.
  void create(hid_t parent, const char* name, hid_t file_type, hsize_t slots,
              const std::vector<hsize_t>& inner, hsize_t chunk_rows, hsize_t chunk_slots,
              const DatasetOptions& options, const h5::Where& where, hsize_t chunk_last = 0,
              bool slot_major = false);
  bool created() const { return dataset_.valid(); }
  hsize_t chunk_rows() const { return chunk_[row_dim_]; }
  hsize_t chunk_slots() const { return chunk_[slot_dim_]; }

  // Writes rows [row, row + n_rows) of slots [slot, slot + n_slots) from `mem`, which holds
  // (mem_rows, mem_slots, *inner) elements with the block at (0, mem_slot); grows the extent.
  void write(hsize_t row, hsize_t n_rows, hsize_t slot, hsize_t n_slots, hid_t mem_type,
             const void* mem, hsize_t mem_rows, hsize_t mem_slots, hsize_t mem_slot,
             const h5::Where& where);
  // The same rows and slots, elements [first, first + count) of the last dimension, from `mem`
  // holding exactly those, in the table's own order: (n_rows, n_slots, ..., count), or slot-major.
  void write_last_range(hsize_t row, hsize_t n_rows, hsize_t slot, hsize_t n_slots, hid_t mem_type,
                        const void* mem, hsize_t first, hsize_t count, const h5::Where& where);
  void set_slots(hsize_t slots, const h5::Where& where);
  void trim(hsize_t rows, const h5::Where& where);
  void close() { dataset_.reset(); }

private:
  void set_extent(const h5::Where& where);
  h5::Id select(hsize_t row, hsize_t n_rows, hsize_t slot, hsize_t n_slots, hsize_t first, hsize_t count,
                const h5::Where& where);
  void write_selected(hid_t mem_type, hid_t mem_space, hid_t file_space, const void* mem, hsize_t row,
                      hsize_t n_rows, hsize_t slot, hsize_t n_slots, const h5::Where& where);

  h5::Id dataset_;
  std::array<hsize_t, kMaxRank> dims_{};   // extent
  std::array<hsize_t, kMaxRank> chunk_{};  // chunk shape
  int rank_ = 2;
  int row_dim_ = 0;
  int slot_dim_ = 1;
  bool exact_ = false;
};

}  // namespace tapdiff
