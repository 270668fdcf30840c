#include "tap_stack.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <utility>

#include "h5_attr.hpp"
#include "schema.hpp"
#include "tapdiff/tap_filter.hpp"
#include "tapdiff/trace_error.hpp"

namespace tapdiff {
namespace {

constexpr std::uint64_t kNewStackMetadataBytes = 16 * 1024;
constexpr std::uint64_t kMaxChunkRows = 256;        // narrow taps: keep a barely used chunk small
constexpr std::uint64_t kMaxChunkBytes = 1u << 20;  // wide rows: split the slots across chunks
constexpr hsize_t kRunsChunkRows = 4;               // a slot has one run unless filters split it
// Rows of rank 2 (attn.probs: [n_head, n_ctx]) are chunked in blocks of this many keys and
// written only up to their last nonzero block: a position's row holds the keys it sees, so a
// trace of n positions stores about n²/2 keys per head, not n × n_ctx.
constexpr hsize_t kKeyBlock = 64;

// Whether a key block of a row holds a value other than +0.0 (-0.0 and NaN are kept: only +0.0
// reads back as what it was). A whole block is a loop of fixed length, which compilers vectorize.
bool block_in_use(const float* keys, std::size_t n) {
  std::uint32_t any = 0;
  if (n == kKeyBlock) {
    for (std::size_t j = 0; j < kKeyBlock; ++j) {
      std::uint32_t bits;
      std::memcpy(&bits, keys + j, sizeof bits);
      any |= bits;
    }
  } else {
    for (std::size_t j = 0; j < n; ++j) {
      std::uint32_t bits;
      std::memcpy(&bits, keys + j, sizeof bits);
      any |= bits;
    }
  }
  return any != 0;
}

}  // namespace

TapStack::TapStack(std::string name, std::string group, const RowShape& shape, StagingPool& pool)
    : name_(std::move(name)),
      group_name_(std::move(group)),
      shape_(shape),
      row_size_(shape.elements()),
      keys_(shape.rank() == 2 && static_cast<hsize_t>(shape.to_vector().back()) > kKeyBlock
                ? shape.to_vector().back()
                : 0),
      pool_(pool) {}

std::string TapStack::object() const { return std::string("/") + schema::kTaps + "/" + group_name_; }

std::string TapStack::tap_text(std::size_t slot) const {
  return tap_layer_prefix(slots_[slot].layer);
}

std::size_t TapStack::add_slot(int layer, std::int64_t index) {
  Slot slot;
  slot.layer = layer;
  slot.index = index;
  slots_.push_back(slot);
  return slots_.size() - 1;
}

// The slot columns the staging buffer needs to take rows of `slot`: its window [slot_base_,
// slot_base_ + slot_capacity_) when the slot is in it, else that window grown (doubled) to reach
// it. With nothing staged the window starts at the slot.
std::size_t TapStack::window_for(std::size_t slot) const {
  if (staged_rows_ == 0) return std::max<std::size_t>(slot_capacity_, 1);
  if (slot >= slot_base_ && slot < slot_base_ + slot_capacity_) return slot_capacity_;
  const std::size_t span = slot < slot_base_ ? slot_base_ + slot_capacity_ - slot : slot + 1 - slot_base_;
  return std::max(span, 2 * slot_capacity_);
}

// Makes room for `rows` staged rows of `slot`, keeping what is staged. The buffer holds a window
// of slots (column c is slot slot_base_ + c) that starts at the first slot staged after a write
// and keeps its width from one write to the next: a prefill the stage limit writes out a few
// layers at a time stages each group of layers in a window as wide as the last. Windows grow by
// doubling, so slots that arrive one by one move only a few times; rows grow to what is asked
// (rather than let rows of a later step grow the block, the writer writes the stack out:
// suits_staging). Blocks come from the writer's pool and go back to it. Not zeroed: only staged
// rows are ever written.
void TapStack::reserve_staging(std::int64_t rows, std::size_t slot) {
  const std::size_t window = window_for(slot);
  const std::size_t row = static_cast<std::size_t>(row_size_);
  if (staged_rows_ == 0) {
    const std::size_t floats = static_cast<std::size_t>(rows) * window * row;
    if (staged_.capacity() < floats) {
      pool_.give_back(std::exchange(staged_, {}));
      staged_ = pool_.take(floats);
    }
    slot_base_ = slot;
    slot_capacity_ = window;
    row_capacity_ = static_cast<std::int64_t>(staged_.capacity() / (window * row));
    return;
  }
  if (rows <= row_capacity_ && window == slot_capacity_) return;
  const std::int64_t new_rows = std::max(rows, staged_rows_);
  std::size_t new_base = slot_base_;
  if (slot < slot_base_) {  // grow downwards, keeping the top of the window
    const std::size_t top = slot_base_ + slot_capacity_;
    new_base = top >= window ? top - window : 0;
  }
  FloatBuffer grown = pool_.take(static_cast<std::size_t>(new_rows) * window * row);
  for (std::int64_t r = 0; r < staged_rows_; ++r) {
    std::memcpy(grown.data() + (static_cast<std::size_t>(r) * window + (slot_base_ - new_base)) * row,
                staged_.data() + static_cast<std::size_t>(r) * slot_capacity_ * row,
                slot_capacity_ * row * sizeof(float));
  }
  pool_.give_back(std::exchange(staged_, std::move(grown)));
  row_capacity_ = static_cast<std::int64_t>(staged_.capacity() / (window * row));
  slot_capacity_ = window;
  slot_base_ = new_base;
}

void TapStack::check_position(std::size_t slot, std::int64_t first_position,
                              const std::string& path) const {
  const std::int64_t last = slots_[slot].last_position;
  if (first_position <= last) {
    throw TraceError(path, object(),
                     tap_text(slot) + "position " + std::to_string(first_position) +
                         " recorded after position " + std::to_string(last) +
                         ": positions of a tap must increase");
  }
}

void TapStack::stage(std::size_t slot, std::int64_t first_position, std::int64_t n_rows,
                     const float* rows) {
  Slot& s = slots_[slot];
  note_rows(s, first_position, n_rows);
  const std::size_t row = static_cast<std::size_t>(row_size_);
  reserve_staging(s.staged + n_rows, slot);
  staged_rows_ = std::max(staged_rows_, s.staged + n_rows);
  for (std::int64_t r = 0; r < n_rows; ++r) {
    std::memcpy(staged_.data() +
                    (static_cast<std::size_t>(s.staged + r) * slot_capacity_ + (slot - slot_base_)) * row,
                rows + static_cast<std::size_t>(r) * row, row * sizeof(float));
  }
  s.staged += n_rows;
  staged_bytes_ += static_cast<std::uint64_t>(n_rows) * row * sizeof(float);
}

// Elements of one row inside one chunk.
std::int64_t TapStack::chunk_row_elements() const {
  if (!sparse_keys()) return row_size_;
  return row_size_ / keys_ * static_cast<std::int64_t>(kKeyBlock);
}

// Rows [row, row + n_rows) of slots [slot, slot + n_slots) from mem ((mem_rows, mem_slots, row
// size), the block at column mem_slot). A sparse stack's rows go out a key block at a time, each
// row up to the keys it uses: the rows using a block are gathered in its chunks' own order (slot,
// head, key), so that a chunk is one write to the file, not one for every head of every slot.
void TapStack::write_block(hsize_t row, hsize_t n_rows, std::size_t slot, std::size_t n_slots,
                           const float* mem, hsize_t mem_rows, hsize_t mem_slots, hsize_t mem_slot,
                           const h5::Where& where) {
  if (!sparse_keys()) {
    data_.write(row, n_rows, slot, n_slots, H5T_NATIVE_FLOAT, mem, mem_rows, mem_slots, mem_slot, where);
    return;
  }
  write_key_blocks(data_, row, n_rows, slot, n_slots, mem, mem_slots, mem_slot, where);
}

// A sparse stack's rows into `table` a key block at a time. Rows that leave a block +0.0 are
// not written to it, unless a chunk of `table` holds them beside rows that use it (chunks of
// several rows: `batch`): then they go out with those, so that each chunk is one whole write.
void TapStack::write_key_blocks(SlotTable& table, hsize_t row, hsize_t n_rows, std::size_t slot,
                                std::size_t n_slots, const float* mem, hsize_t mem_slots, hsize_t mem_slot,
                                const h5::Where& where) {
  const auto row_size = static_cast<std::size_t>(row_size_);
  const auto keys = static_cast<std::size_t>(keys_);
  const std::size_t heads = row_size / keys;
  const hsize_t tile = table.chunk_rows();
  const auto row_at = [&](hsize_t r, std::size_t s) { return mem + (r * mem_slots + mem_slot + s) * row_size; };
  std::vector<hsize_t> used(n_rows);
  hsize_t most = 0;
  for (hsize_t r = 0; r < n_rows; ++r) most = std::max(most, used[r] = keys_in_use(row_at(r, 0), n_slots));
  std::vector<char> written(n_rows);
  for (hsize_t first = 0; first < most; first += kKeyBlock) {
    const std::size_t width = std::min<std::size_t>(kKeyBlock, keys - first);
    std::fill(written.begin(), written.end(), 0);
    for (hsize_t r = 0; r < n_rows; ++r) {
      if (used[r] <= first) continue;
      const hsize_t chunk = (row + r) / tile * tile;
      const hsize_t begin = chunk > row ? chunk - row : 0;
      const hsize_t end = std::min(n_rows, chunk + tile - row);
      std::fill(written.begin() + static_cast<std::ptrdiff_t>(begin), written.begin() + static_cast<std::ptrdiff_t>(end), 1);
      r = end - 1;
    }
    for (hsize_t r0 = 0; r0 < n_rows;) {
      if (!written[r0]) {
        ++r0;
        continue;
      }
      hsize_t r1 = r0 + 1;
      while (r1 < n_rows && written[r1]) ++r1;
      float* out = gather_.reserve((r1 - r0) * n_slots * heads * width);
      for (hsize_t r = r0; r < r1; ++r)
        for (std::size_t s = 0; s < n_slots; ++s)
          for (std::size_t h = 0; h < heads; ++h)
            std::memcpy(out + (((r - r0) * n_slots + s) * heads + h) * width, row_at(r, s) + h * keys + first,
                        width * sizeof(float));
      table.write_last_range(row + r0, r1 - r0, slot, n_slots, H5T_NATIVE_FLOAT, out, first, width, where);
      r0 = r1;
    }
  }
}

void TapStack::note_rows(Slot& s, std::int64_t first_position, std::int64_t n_rows) {
  const std::int64_t recorded = s.rows_written + s.staged;
  if (recorded == 0 || first_position != s.last_position + 1) {
    s.runs.push_back({recorded, first_position});
  }
  s.last_position = first_position + n_rows - 1;
}

std::uint64_t TapStack::staging_bytes_after(std::size_t slot, std::int64_t n_rows) const {
  const auto rows = static_cast<std::uint64_t>(std::max(staged_rows_, slots_[slot].staged + n_rows));
  return rows * window_for(slot) * static_cast<std::uint64_t>(row_size_) * sizeof(float);
}

void TapStack::write_direct(std::size_t slot, std::int64_t first_position, std::int64_t n_rows,
                            const float* rows, hid_t taps_group, const StreamConfig& config,
                            const std::string& path) {
  ensure_data(taps_group, config, path);
  Slot& s = slots_[slot];
  note_rows(s, first_position, n_rows);
  write_block(static_cast<hsize_t>(s.rows_written), static_cast<hsize_t>(n_rows), slot, 1, rows,
              static_cast<hsize_t>(n_rows), 1, 0, {path, object() + "/" + schema::kTapData});
  s.rows_written += n_rows;
  write_runs(path);
}

void TapStack::write_batch(std::size_t slot, std::int64_t first_position, std::int64_t n_rows,
                           const float* rows, hid_t taps_group, const StreamConfig& config,
                           const std::string& path) {
  ensure_created(taps_group, config, path);
  Slot& s = slots_[slot];
  note_rows(s, first_position, n_rows);
  const h5::Where where{path, object() + "/" + schema::kTapBatch};
  if (sparse_keys())
    write_key_blocks(batch_, static_cast<hsize_t>(s.rows_written), static_cast<hsize_t>(n_rows), slot, 1, rows, 1, 0,
                     where);
  else
    batch_.write(static_cast<hsize_t>(s.rows_written), static_cast<hsize_t>(n_rows), slot, 1, H5T_NATIVE_FLOAT,
                 rows, static_cast<hsize_t>(n_rows), 1, 0, where);
  s.rows_written += n_rows;
  s.batch_rows += n_rows;
  write_runs(path);
}

// A chunk of `batch` holds rows of one slot: the prompt's, split evenly into chunks of at most
// kMaxChunkBytes, so that a prompt fills whole chunks and no chunk is allocated mostly unused.
// A sparse stack's chunk is a tile of as many positions as a key block has keys: a causal
// prompt's rows fill whole tiles below the diagonal, half of each on it, and none above.
hsize_t TapStack::batch_chunk_rows(const StreamConfig& config) const {
  const std::uint64_t rows = static_cast<std::uint64_t>(config.batch_rows);
  if (sparse_keys()) return static_cast<hsize_t>(std::min<std::uint64_t>(rows, kKeyBlock));
  const std::uint64_t row_bytes = static_cast<std::uint64_t>(row_size_) * sizeof(float);
  const std::uint64_t chunks = std::max<std::uint64_t>(1, (rows * row_bytes + kMaxChunkBytes - 1) / kMaxChunkBytes);
  return static_cast<hsize_t>((rows + chunks - 1) / chunks);
}

hsize_t TapStack::chunk_slots() const {
  const std::uint64_t row_bytes = static_cast<std::uint64_t>(chunk_row_elements()) * sizeof(float);
  return std::clamp<std::uint64_t>(kMaxChunkBytes / row_bytes, 1, std::max<std::size_t>(1, slots()));
}

hsize_t TapStack::chunk_rows(const StreamConfig& config) const {
  if (sparse_keys()) return 1;  // each row its own width
  const std::uint64_t bytes = static_cast<std::uint64_t>(row_size_) * sizeof(float) * chunk_slots();
  return std::clamp<std::uint64_t>(config.chunk_bytes / bytes, 1, kMaxChunkRows);
}

std::uint64_t TapStack::write_bound(const StreamConfig& config) const {
  if (staged_rows_ == 0 && slots_in_file_ == slots_.size()) return 0;
  // Every chunk the staged rows touch may be newly allocated (a compressed partial chunk is
  // rewritten elsewhere at every flush, and gzip can expand incompressible data slightly).
  std::int64_t first = -1;
  std::int64_t end = 0;
  for (const Slot& s : slots_) {
    if (s.staged == 0) continue;
    first = first < 0 ? s.rows_written : std::min(first, s.rows_written);
    end = std::max(end, s.rows_written + s.staged);
  }
  // Chunks keep the shape the dataset was created with, whatever slots came later.
  const std::uint64_t per_chunk = data_.created() ? data_.chunk_rows() : chunk_rows(config);
  const std::uint64_t slots_per_chunk = data_.created() ? data_.chunk_slots() : chunk_slots();
  const std::uint64_t chunk_bytes =
      per_chunk * slots_per_chunk * static_cast<std::uint64_t>(row_size_) * sizeof(float);
  std::uint64_t chunks = 0;
  if (first >= 0) {
    const std::uint64_t row_chunks = (static_cast<std::uint64_t>(end) + per_chunk - 1) / per_chunk -
                                     static_cast<std::uint64_t>(first) / per_chunk;
    chunks = row_chunks * ((slots_.size() + slots_per_chunk - 1) / slots_per_chunk);
  }
  if (config.dataset.compress) chunks = (chunks + 1) * 2;
  std::uint64_t bytes = chunks * chunk_bytes + 4096 + kRunsChunkRows * 16 * slots_.size();
  if (!data_.created() || slots_in_file_ != slots_.size()) bytes += kNewStackMetadataBytes;
  return bytes;
}

void TapStack::create(hid_t taps_group, const StreamConfig& config, const std::string& path) {
  const h5::Where where{path, object()};
  group_ = h5::group_id(
      H5Gcreate2(taps_group, group_name_.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), where,
      "cannot create group");
  h5::write_string_attr(group_.get(), schema::kTapName, name_, where);
  h5::write_int_array_attr(group_.get(), schema::kTapRowShape, shape_.to_vector(), where);
  const hsize_t slots = slots_.size();
  if (has_batch(config)) {
    DatasetOptions batch_options = config.dataset;
    batch_options.exact_extent = true;
    if (sparse_keys()) batch_options.zero_fill = true;  // as `data`'s: tiles a record writes in part
    batch_.create(group_.get(), schema::kTapBatch, H5T_IEEE_F32LE, slots, row_dims(), batch_chunk_rows(config), 1,
                  batch_options, {path, where.object + "/" + schema::kTapBatch}, sparse_keys() ? kKeyBlock : 0, true);
  } else {
    // With a batch, `data` waits for ensure_data() at the commit: a stack created by its first
    // slot's prompt rows then knows the step's other slots, and a chunk holds a row of them all.
    create_data(config, path);
  }
  DatasetOptions runs_options;
  runs_options.exact_extent = true;
  runs_ds_.create(group_.get(), schema::kTapRuns, H5T_STD_I64LE, slots, {2}, kRunsChunkRows, slots,
                  runs_options, {path, where.object + "/" + schema::kTapRuns});
  write_slot_attrs(path);
}

std::vector<hsize_t> TapStack::row_dims() const {
  std::vector<hsize_t> dims;
  for (std::int64_t d : shape_.to_vector()) dims.push_back(static_cast<hsize_t>(d));
  return dims;
}

void TapStack::create_data(const StreamConfig& config, const std::string& path) {
  DatasetOptions options = config.dataset;
  // A chunk the slots' rows share may be allocated by a wider row: the rest reads as 0.
  if (sparse_keys()) options.zero_fill = true;
  data_.create(group_.get(), schema::kTapData, H5T_IEEE_F32LE, slots_.size(), row_dims(), chunk_rows(config),
               chunk_slots(), options, {path, object() + "/" + schema::kTapData}, sparse_keys() ? kKeyBlock : 0);
}

void TapStack::write_slot_attrs(const std::string& path) {
  const h5::Where where{path, object()};
  std::vector<std::int64_t> layers;
  std::vector<std::int64_t> indices;
  for (const Slot& s : slots_) {
    layers.push_back(s.layer);
    indices.push_back(s.index);
  }
  if (slots_in_file_ > 0) {
    if (data_.created()) data_.set_slots(slots_.size(), {path, where.object + "/" + schema::kTapData});
    if (batch_.created()) batch_.set_slots(slots_.size(), {path, where.object + "/" + schema::kTapBatch});
    runs_ds_.set_slots(slots_.size(), {path, where.object + "/" + schema::kTapRuns});
  }
  h5::rewrite_int_array_attr(group_.get(), schema::kTapLayers, layers, where);
  h5::rewrite_int_array_attr(group_.get(), schema::kTapIndex, indices, where);
  slots_in_file_ = slots_.size();
}

void TapStack::ensure_created(hid_t taps_group, const StreamConfig& config,
                              const std::string& path) {
  if (!group_.valid()) create(taps_group, config, path);
  if (slots_in_file_ != slots_.size()) write_slot_attrs(path);
}

void TapStack::ensure_data(hid_t taps_group, const StreamConfig& config, const std::string& path) {
  ensure_created(taps_group, config, path);
  if (!data_.created()) create_data(config, path);
}

// Slots next to each other that wrote the same rows and staged the same number go out as one
// block: every layer of a step in one write.
void TapStack::write_rows(const std::string& path) {
  const h5::Where where{path, object() + "/" + schema::kTapData};
  const std::size_t n = slots_.size();
  for (std::size_t first = 0; first < n;) {
    const Slot& s = slots_[first];
    std::size_t last = first + 1;
    while (last < n && slots_[last].rows_written == s.rows_written &&
           slots_[last].staged == s.staged) {
      ++last;
    }
    if (s.staged > 0) {
      write_block(static_cast<hsize_t>(s.rows_written), static_cast<hsize_t>(s.staged), first, last - first,
                  staged_.data(), static_cast<hsize_t>(staged_rows_), slot_capacity_, first - slot_base_, where);
    }
    first = last;
  }
  for (Slot& s : slots_) {
    s.rows_written += s.staged;
    s.staged = 0;
  }
}

// The keys up to the last block holding a value other than +0.0 in any of n consecutive rows
// (one block at least, so every row is in the file).
hsize_t TapStack::keys_in_use(const float* rows, std::size_t n) const {
  const auto keys = static_cast<std::size_t>(keys_), heads = static_cast<std::size_t>(row_size_) / keys;
  const std::size_t blocks = (keys + kKeyBlock - 1) / kKeyBlock;
  std::size_t used = 1;  // blocks
  for (std::size_t k = 0; k < n; ++k) {
    const float* row = rows + k * static_cast<std::size_t>(row_size_);
    for (std::size_t h = 0; h < heads; ++h)
      for (std::size_t b = blocks - 1; b >= used; --b) {
        const std::size_t first = b * kKeyBlock;
        if (block_in_use(row + h * keys + first, std::min<std::size_t>(kKeyBlock, keys - first))) {
          used = b + 1;
          break;
        }
      }
  }
  return static_cast<hsize_t>(std::min<std::size_t>(keys, used * kKeyBlock));
}

void TapStack::write_runs(const std::string& path) {
  const h5::Where where{path, object() + "/" + schema::kTapRuns};
  const std::size_t n = slots_.size();
  for (std::size_t first = 0; first < n;) {
    const Slot& s = slots_[first];
    const std::int64_t fresh = static_cast<std::int64_t>(s.runs.size()) - s.runs_written;
    std::size_t last = first + 1;
    while (last < n && slots_[last].runs_written == s.runs_written &&
           static_cast<std::int64_t>(slots_[last].runs.size()) == s.runs_written + fresh) {
      ++last;
    }
    if (fresh > 0) {
      std::vector<std::int64_t> block(static_cast<std::size_t>(fresh) * (last - first) * 2);
      for (std::int64_t r = 0; r < fresh; ++r) {
        for (std::size_t k = first; k < last; ++k) {
          const auto& run = slots_[k].runs[static_cast<std::size_t>(s.runs_written + r)];
          const std::size_t at = (static_cast<std::size_t>(r) * (last - first) + (k - first)) * 2;
          block[at] = run[0];
          block[at + 1] = run[1];
        }
      }
      runs_ds_.write(static_cast<hsize_t>(s.runs_written), static_cast<hsize_t>(fresh), first,
                     last - first, H5T_NATIVE_INT64, block.data(), static_cast<hsize_t>(fresh),
                     last - first, 0, where);
    }
    first = last;
  }
  for (Slot& s : slots_) s.runs_written = static_cast<std::int64_t>(s.runs.size());
}

void TapStack::write_staged(hid_t taps_group, const StreamConfig& config,
                            const std::string& path) {
  if (staged_rows_ == 0 && data_.created() && slots_in_file_ == slots_.size()) return;
  ensure_data(taps_group, config, path);
  if (staged_rows_ == 0) return;
  write_rows(path);
  write_runs(path);
  staged_rows_ = 0;
  staged_bytes_ = 0;
  pool_.give_back(std::exchange(staged_, {}));
  row_capacity_ = 0;
}

void TapStack::trim(const std::string& path) {
  std::int64_t rows = 0;
  std::int64_t batch_rows = 0;
  std::int64_t runs = 0;
  for (const Slot& s : slots_) {
    if (s.rows_written > s.batch_rows) rows = std::max(rows, s.rows_written);
    batch_rows = std::max(batch_rows, s.batch_rows);
    runs = std::max(runs, s.runs_written);
  }
  data_.trim(static_cast<hsize_t>(rows), {path, object() + "/" + schema::kTapData});
  batch_.trim(static_cast<hsize_t>(batch_rows), {path, object() + "/" + schema::kTapBatch});
  runs_ds_.trim(static_cast<hsize_t>(runs), {path, object() + "/" + schema::kTapRuns});
}

void TapStack::close() {
  data_.close();
  batch_.close();
  runs_ds_.close();
  group_.reset();
}

}  // namespace tapdiff
