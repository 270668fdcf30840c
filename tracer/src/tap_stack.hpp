// The taps of one name and one row shape being written side by side (docs/trace-schema.md,
// "/taps/<stack>"): slot s is the tap (name, layer(s)). Rows are staged per slot by stage()
// and written by write_staged(): slots that staged the same rows on top of the same written
// rows (every layer of a forward step) go out in one HDF5 write. A slot's first batched
// steps (the prompt) skip staging: write_batch() puts them in the stack's `batch`, a slot's
// rows side by side, straight from the producer's memory.
#pragma once

#include <array>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "h5.hpp"
#include "slot_table.hpp"
#include "staging_pool.hpp"
#include "tapdiff/row_shape.hpp"

namespace tapdiff {

struct StreamConfig {
  std::size_t chunk_bytes = 64 * 1024;  // target chunk size
  DatasetOptions dataset;
  // The rows of a batched step (the prompt's length): sizes the chunks of each stack's
  // `batch`. Below 2, stacks get no batch and every row goes to `data`.
  std::int64_t batch_rows = 0;
};

class TapStack {
public:
  // group: the stack's name under /taps (the tap name, or "<name>#<k>" for a further shape).
  // Staging memory comes from `pool`, which outlives the stack.
  TapStack(std::string name, std::string group, const RowShape& shape, StagingPool& pool);

  const RowShape& shape() const { return shape_; }
  std::size_t slots() const { return slots_.size(); }
  std::int64_t index(std::size_t slot) const { return slots_[slot].index; }
  std::int64_t rows_written(std::size_t slot) const { return slots_[slot].rows_written; }
  std::int64_t runs_written(std::size_t slot) const { return slots_[slot].runs_written; }
  // Rows 0 .. batch_rows - 1 of the slot are in `batch`, the rest in `data`.
  std::int64_t batch_rows(std::size_t slot) const { return slots_[slot].batch_rows; }
  // Rows recorded so far (written or staged): a slot without any may still move elsewhere.
  std::int64_t rows_recorded(std::size_t slot) const {
    return slots_[slot].rows_written + slots_[slot].staged;
  }
  std::uint64_t staged_bytes() const { return staged_bytes_; }

  // A new slot for (name, layer) whose committed counts go to row `index` of /committed.
  std::size_t add_slot(int layer, std::int64_t index);
  std::string object() const;                    // "/taps/<group>", for messages
  std::string tap_text(std::size_t slot) const;  // "layer 3: " or "" for a global tap

  // Throws TraceError unless first_position follows the slot's last position.
  void check_position(std::size_t slot, std::int64_t first_position,
                      const std::string& path) const;
  // rows: (n_rows, shape().elements()) for positions first_position.. (already checked).
  void stage(std::size_t slot, std::int64_t first_position, std::int64_t n_rows,
             const float* rows);

  // Whether staging n_rows more rows of `slot` suits the block staged so far: nothing is staged,
  // they fit it, or they widen it at the rows every staged slot holds (the layers of one step).
  // Otherwise the writer writes the stack out first: rows of a later step (commit_every) on top
  // of a long prefill's would take a fresh, longer and wider block at every step.
  bool suits_staging(std::size_t slot, std::int64_t n_rows) const {
    const std::int64_t rows = slots_[slot].staged + n_rows;
    return staged_rows_ == 0 || rows == staged_rows_ ||
           (rows <= row_capacity_ && window_for(slot) == slot_capacity_);
  }
  // Bytes of staging buffer that staging n_rows more rows of `slot` would hold.
  std::uint64_t staging_bytes_after(std::size_t slot, std::int64_t n_rows) const;
  // Whether n_rows rows of `slot` go to `batch` (write_batch): a batched step of a slot whose
  // rows so far all went there, in a stack that has one.
  bool takes_batch(std::size_t slot, std::int64_t n_rows, const StreamConfig& config) const {
    const Slot& s = slots_[slot];
    return has_batch(config) && n_rows > 1 && s.staged == 0 && s.rows_written == s.batch_rows;
  }
  void write_batch(std::size_t slot, std::int64_t first_position, std::int64_t n_rows, const float* rows,
                   hid_t taps_group, const StreamConfig& config, const std::string& path);
  // Rows of one slot a chunk of `batch` holds.
  hsize_t batch_chunk_rows(const StreamConfig& config) const;
  // Writes rows of a slot with nothing staged straight from `rows` (n_rows, shape().elements()).
  void write_direct(std::size_t slot, std::int64_t first_position, std::int64_t n_rows, const float* rows,
                    hid_t taps_group, const StreamConfig& config, const std::string& path);

  // Creates the group and datasets now if they do not exist yet (pre-created stacks); `data`
  // waits for ensure_data() in a stack that takes batches.
  void ensure_created(hid_t taps_group, const StreamConfig& config, const std::string& path);
  void ensure_data(hid_t taps_group, const StreamConfig& config, const std::string& path);
  // Bytes the next write_staged() may add to the file, for SpaceReserve.
  std::uint64_t write_bound(const StreamConfig& config) const;
  // Creates the HDF5 objects on first use, then writes staged rows and new runs.
  void write_staged(hid_t taps_group, const StreamConfig& config, const std::string& path);
  void trim(const std::string& path);
  void close();

private:
  struct Slot {
    int layer = -1;
    std::int64_t index = 0;
    std::int64_t rows_written = 0;
    std::int64_t batch_rows = 0;  // of rows_written, those in `batch`
    std::int64_t staged = 0;  // rows in the staging buffer
    std::int64_t last_position = -1;
    std::vector<std::array<std::int64_t, 2>> runs;  // (first_row, first_position)
    std::int64_t runs_written = 0;
  };

  // Rows of two dimensions wider than a key block (attn.probs) are stored a row at a time up to
  // the keys they use (tap_stack.cpp).
  bool sparse_keys() const { return keys_ > 0; }
  bool has_batch(const StreamConfig& config) const { return config.batch_rows > 1; }
  std::int64_t chunk_row_elements() const;
  void write_block(hsize_t row, hsize_t n_rows, std::size_t slot, std::size_t n_slots, const float* mem,
                   hsize_t mem_rows, hsize_t mem_slots, hsize_t mem_slot, const h5::Where& where);
  void write_key_blocks(SlotTable& table, hsize_t row, hsize_t n_rows, std::size_t slot, std::size_t n_slots,
                        const float* mem, hsize_t mem_slots, hsize_t mem_slot, const h5::Where& where);
  hsize_t chunk_rows(const StreamConfig& config) const;
  hsize_t chunk_slots() const;
  hsize_t keys_in_use(const float* rows, std::size_t n_rows) const;
  void note_rows(Slot& slot, std::int64_t first_position, std::int64_t n_rows);
  void create(hid_t taps_group, const StreamConfig& config, const std::string& path);
  void create_data(const StreamConfig& config, const std::string& path);
  std::vector<hsize_t> row_dims() const;
  void write_slot_attrs(const std::string& path);
  void write_rows(const std::string& path);
  void write_runs(const std::string& path);
  std::size_t window_for(std::size_t slot) const;
  void reserve_staging(std::int64_t rows, std::size_t slot);

  std::string name_;
  std::string group_name_;
  RowShape shape_;
  std::int64_t row_size_;
  std::int64_t keys_;  // the last dimension of a sparse stack's rows; 0 for every other stack
  std::vector<Slot> slots_;

  StagingPool& pool_;
  FloatBuffer staged_;  // (row_capacity_, slot_capacity_, row size): slots from slot_base_ on
  FloatBuffer gather_;  // a sparse stack's rows of one key block, as its chunks hold them
  std::int64_t row_capacity_ = 0;
  std::size_t slot_capacity_ = 0;
  std::size_t slot_base_ = 0;
  std::int64_t staged_rows_ = 0;  // the most rows any slot staged
  std::uint64_t staged_bytes_ = 0;

  h5::Id group_;
  std::size_t slots_in_file_ = 0;  // slots the file's attributes and extents describe
  SlotTable data_;
  SlotTable batch_;  // (slots, rows, row shape), created with the stack when has_batch()
  SlotTable runs_ds_;
};

}  // namespace tapdiff
