#include "stack_reader.hpp"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <limits>
#include <vector>

#include "tapdiff/row_shape.hpp"

namespace tapdiff {
namespace {

constexpr std::size_t kChunkCacheBytes = 32u << 20;  // per compressed stack, filled as read
constexpr std::size_t kChunkCacheSlots = 12'421;     // a prime, ~100 x the chunks that fit
constexpr std::uint64_t kBlockBytes = 64u << 20;     // the most a kept block may hold
constexpr std::int64_t kNotATap = std::numeric_limits<std::int64_t>::max();  // a slot without committed rows

h5::Id open_with_chunk_cache(hid_t file, const h5::Where& where, std::size_t bytes) {
  const h5::Id dapl = h5::plist_id(H5Pcreate(H5P_DATASET_ACCESS), where, "cannot create");
  h5::check(H5Pset_chunk_cache(dapl.get(), kChunkCacheSlots, bytes, 0.0), where,
            "cannot set the chunk cache");
  return h5::dataset_id(H5Dopen2(file, where.object.c_str(), dapl.get()), where, "cannot open");
}

// Reads [row, row + n_rows) x [slot, slot + n_slots) x the whole row into out.
void select_and_read(hid_t data, const h5::Id& space, hsize_t row, hsize_t n_rows, hsize_t slot,
                     hsize_t n_slots, const std::vector<std::int64_t>& row_shape, float* out,
                     const h5::Where& where, const std::string& what) {
  std::vector<hsize_t> start{row, slot};
  std::vector<hsize_t> count{n_rows, n_slots};
  for (std::int64_t d : row_shape) {
    start.push_back(0);
    count.push_back(static_cast<hsize_t>(d));
  }
  h5::check(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(),
                                nullptr),
            where, "cannot select rows");
  const h5::Id mem =
      h5::space_id(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr), where,
                   "cannot read");
  h5::check(H5Dread(data, H5T_NATIVE_FLOAT, mem.get(), space.get(), H5P_DEFAULT, out), where,
            "cannot read " + what);
}

// Whether a chunk holds only part of a row (attn.probs: blocks of keys). Without a chunk
// cache HDF5 then gathers a row's pieces from each chunk one by one: several times slower.
bool chunk_splits_rows(hid_t data, hid_t dcpl) {
  hsize_t dims[2 + RowShape::kMaxRank] = {}, chunk[2 + RowShape::kMaxRank] = {};
  const h5::Id space(H5Dget_space(data), H5Sclose);
  const int rank = H5Sget_simple_extent_dims(space.get(), dims, nullptr);
  if (rank < 2 || rank > 2 + RowShape::kMaxRank || H5Pget_chunk(dcpl, rank, chunk) != rank) return false;
  for (int d = 2; d < rank; ++d)
    if (chunk[d] < dims[d]) return true;
  return false;
}

}  // namespace

StackReader::StackReader(hid_t file, const std::string& path, const std::vector<TapInfo>& taps)
    : file_(file), path_(path) {
  for (const TapInfo& tap : taps) {
    std::vector<std::int64_t>& rows = batch_rows_[tap.stack];
    if (rows.size() <= tap.slot) rows.resize(tap.slot + 1, kNotATap);
    rows[tap.slot] = tap.batch_rows;
  }
  for (auto it = batch_rows_.begin(); it != batch_rows_.end();) {
    const bool none = std::all_of(it->second.begin(), it->second.end(),
                                  [](std::int64_t b) { return b == 0 || b == kNotATap; });
    it = none ? batch_rows_.erase(it) : std::next(it);
  }
}

// Rows [r0, r1) of `slot` from the stack's batch, read in the file's own order (a memory
// selection of another shape makes HDF5 map element by element), then placed in out.
void StackReader::read_batch(const TapInfo& tap, std::size_t slot, std::int64_t r0, std::int64_t r1, float* out,
                             hsize_t mem_slots, hsize_t mem_slot) {
  const h5::Where where{path_, "/taps/" + tap.stack + "/batch"};
  const hid_t batch = open(batch_, tap.stack, where);
  const h5::Id space = h5::space_id(H5Dget_space(batch), where, "cannot read");
  std::vector<hsize_t> start{slot, static_cast<hsize_t>(r0)};
  std::vector<hsize_t> count{1, static_cast<hsize_t>(r1 - r0)};
  for (std::int64_t d : tap.stored_shape) {
    start.push_back(0);
    count.push_back(static_cast<hsize_t>(d));
  }
  h5::check(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr), where,
            "cannot select rows");
  const h5::Id mem =
      h5::space_id(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr), where, "cannot read");
  const auto row = static_cast<std::size_t>(tap.stored_size);
  const auto n = static_cast<std::size_t>(r1 - r0);
  float* rows = mem_slots == 1 ? out : gather_.reserve(n * row);
  h5::check(H5Dread(batch, H5T_NATIVE_FLOAT, mem.get(), space.get(), H5P_DEFAULT, rows), where,
            "cannot read rows " + std::to_string(r0) + ".." + std::to_string(r1 - 1) + " of slot " +
                std::to_string(slot));
  if (mem_slots == 1) return;
  for (std::size_t r = 0; r < n; ++r)
    std::memcpy(out + (r * mem_slots + mem_slot) * row, rows + r * row, row * sizeof(float));
}

hid_t StackReader::open(std::map<std::string, h5::Id>& opened, const std::string& stack, const h5::Where& where) {
  const auto it = opened.find(stack);
  if (it != opened.end()) return it->second.get();
  h5::Id data = open_with_chunk_cache(file_, where, 0);
  const h5::Id dcpl = h5::plist_id(H5Dget_create_plist(data.get()), where, "cannot read");
  if (H5Pget_nfilters(dcpl.get()) > 0 || chunk_splits_rows(data.get(), dcpl.get())) {
    data.reset();  // HDF5 ignores the access properties of a dataset opened twice
    data = open_with_chunk_cache(file_, where, kChunkCacheBytes);
  }
  return opened.emplace(stack, std::move(data)).first->second.get();
}

namespace {

hsize_t slots_in(const h5::Id& space) {
  hsize_t dims[2 + RowShape::kMaxRank] = {};
  return H5Sget_simple_extent_dims(space.get(), dims, nullptr) < 2 ? 0 : dims[1];
}

hsize_t rows_in(const h5::Id& space) {
  hsize_t dims[2 + RowShape::kMaxRank] = {};
  return H5Sget_simple_extent_dims(space.get(), dims, nullptr) < 2 ? 0 : dims[0];
}

}  // namespace

std::int64_t StackReader::slots(const TapInfo& tap) {
  const h5::Where where{path_, "/taps/" + tap.stack + "/data"};
  return static_cast<std::int64_t>(slots_in(h5::space_id(H5Dget_space(open(data_, tap.stack, where)), where, "cannot read")));
}

// Rows every slot holds in `data` in one read, then each slot's rows in `batch` over them. Slots
// count their own rows: rows past one slot's count, or past data's extent, are left as they are
// (no reader of that slot asks for them).
void StackReader::read_all_slots(const TapInfo& tap, std::int64_t r0, std::int64_t r1, float* out) {
  const h5::Where where{path_, "/taps/" + tap.stack + "/data"};
  const hid_t data = open(data_, tap.stack, where);
  const h5::Id space = h5::space_id(H5Dget_space(data), where, "cannot read");
  const hsize_t n_slots = slots_in(space);
  const auto batched = batch_rows_.find(tap.stack);
  std::int64_t data_r0 = r0;
  if (batched != batch_rows_.end()) {
    std::int64_t least = r1;  // slots that are no tap hold nothing to read
    for (std::int64_t b : batched->second) least = std::min(least, b);
    data_r0 = std::clamp(least, r0, r1);
  }
  const auto row = static_cast<std::size_t>(tap.stored_size);
  const std::int64_t data_r1 = std::min(r1, static_cast<std::int64_t>(rows_in(space)));
  if (data_r0 < data_r1) {
    select_and_read(data, space, static_cast<hsize_t>(data_r0), static_cast<hsize_t>(data_r1 - data_r0), 0, n_slots,
                    tap.stored_shape, out + static_cast<std::size_t>(data_r0 - r0) * n_slots * row, where,
                    "rows " + std::to_string(data_r0) + ".." + std::to_string(data_r1 - 1) + " of every slot");
  }
  if (batched == batch_rows_.end()) return;
  for (std::size_t slot = 0; slot < batched->second.size() && slot < n_slots; ++slot) {
    const std::int64_t b = batched->second[slot];
    if (b != kNotATap && std::min(r1, b) > r0) read_batch(tap, slot, r0, std::min(r1, b), out, n_slots, slot);
  }
}

// Reads rows [r0, r1) of every slot into block_; false when that would be too large.
bool StackReader::read_block(const TapInfo& tap, std::int64_t r0, std::int64_t r1) {
  const std::int64_t n_slots = slots(tap);
  const std::uint64_t bytes = static_cast<std::uint64_t>(r1 - r0) * static_cast<std::uint64_t>(n_slots) *
                              static_cast<std::uint64_t>(tap.stored_size) * sizeof(float);
  if (n_slots < 2 || bytes > kBlockBytes) return false;
  block_.stack.clear();
  read_all_slots(tap, r0, r1, block_.values.reserve(bytes / sizeof(float)));
  block_.stack = tap.stack;
  block_.r0 = r0;
  block_.r1 = r1;
  block_.slots = static_cast<hsize_t>(n_slots);
  return true;
}

void StackReader::read(const TapInfo& tap, std::int64_t r0, std::int64_t r1, float* out) {
  const bool again = tap.stack == last_stack_ && r0 == last_r0_ && r1 == last_r1_;
  last_stack_ = tap.stack;
  last_r0_ = r0;
  last_r1_ = r1;
  const h5::Where where{path_, "/taps/" + tap.stack + "/data"};
  const hid_t data = open(data_, tap.stack, where);
  const bool in_block = block_.stack == tap.stack && block_.r0 <= r0 && r1 <= block_.r1;
  if (in_block || (again && read_block(tap, r0, r1))) {
    const std::size_t row = static_cast<std::size_t>(tap.stored_size);
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::size_t at = static_cast<std::size_t>(r - block_.r0) * block_.slots + tap.slot;
      std::memcpy(out + static_cast<std::size_t>(r - r0) * row, block_.values.data() + at * row,
                  row * sizeof(float));
    }
    return;
  }
  if (r0 < tap.batch_rows) {
    const std::int64_t end = std::min(r1, tap.batch_rows);
    read_batch(tap, tap.slot, r0, end, out, 1, 0);
    out += static_cast<std::size_t>(end - r0) * static_cast<std::size_t>(tap.stored_size);
    r0 = end;
    if (r0 == r1) return;
  }
  const h5::Id space = h5::space_id(H5Dget_space(data), where, "cannot read");
  select_and_read(data, space, static_cast<hsize_t>(r0), static_cast<hsize_t>(r1 - r0), tap.slot, 1,
                  tap.stored_shape, out, where,
                  "rows " + std::to_string(r0) + ".." + std::to_string(r1 - 1) + " of slot " +
                      std::to_string(tap.slot) + " (" + tap.full_name + ")");
}

}  // namespace tapdiff
