#include "slot_table.hpp"

#include <algorithm>

namespace tapdiff {

void SlotTable::create(hid_t parent, const char* name, hid_t file_type, hsize_t slots,
                       const std::vector<hsize_t>& inner, hsize_t chunk_rows, hsize_t chunk_slots,
                       const DatasetOptions& options, const h5::Where& where, hsize_t chunk_last,
                       bool slot_major) {
  rank_ = 2 + static_cast<int>(inner.size());
  row_dim_ = slot_major ? 1 : 0;
  slot_dim_ = 1 - row_dim_;
  exact_ = options.exact_extent;
  std::array<hsize_t, kMaxRank> max_dims{H5S_UNLIMITED, H5S_UNLIMITED};
  dims_[row_dim_] = 0;
  dims_[slot_dim_] = slots;
  chunk_[row_dim_] = std::max<hsize_t>(chunk_rows, 1);
  chunk_[slot_dim_] = std::clamp<hsize_t>(chunk_slots, 1, slots);
  for (std::size_t i = 0; i < inner.size(); ++i) {
    dims_[i + 2] = max_dims[i + 2] = chunk_[i + 2] = inner[i];
  }
  if (chunk_last > 0 && !inner.empty()) chunk_[rank_ - 1] = std::min(chunk_last, inner.back());
  dataset_ = create_chunked_dataset(parent, name, file_type, rank_, dims_.data(), max_dims.data(),
                                    chunk_.data(), options, where);
}

void SlotTable::set_extent(const h5::Where& where) {
  h5::check(H5Dset_extent(dataset_.get(), dims_.data()), where,
            "cannot extend to " + std::to_string(dims_[row_dim_]) + " rows of " +
                std::to_string(dims_[slot_dim_]) + " slots");
}

void SlotTable::set_slots(hsize_t slots, const h5::Where& where) {
  if (slots == dims_[slot_dim_]) return;
  dims_[slot_dim_] = slots;
  set_extent(where);
}

// The file space with rows [row, row + n_rows) of slots [slot, slot + n_slots) selected, and of
// the last dimension `count` elements from `first` (count 0: all); grows the extent to the rows.
h5::Id SlotTable::select(hsize_t row, hsize_t n_rows, hsize_t slot, hsize_t n_slots, hsize_t first, hsize_t count,
                         const h5::Where& where) {
  const hsize_t end = row + n_rows;
  if (end > dims_[row_dim_]) {
    // Small appends grow by whole chunks (no metadata change for most steps); a batch of at
    // least a chunk gets its exact size (nothing to trim at close).
    const hsize_t c = chunk_[row_dim_];
    dims_[row_dim_] = exact_ || n_rows >= c ? end : (end + c - 1) / c * c;
    set_extent(where);
  }
  std::array<hsize_t, kMaxRank> start{};
  start[row_dim_] = row;
  start[slot_dim_] = slot;
  std::array<hsize_t, kMaxRank> counts = dims_;
  counts[row_dim_] = n_rows;
  counts[slot_dim_] = n_slots;
  if (count > 0) {
    start[rank_ - 1] = first;
    counts[rank_ - 1] = count;
  }
  h5::Id file_space = h5::space_id(H5Dget_space(dataset_.get()), where, "cannot get the dataspace");
  h5::check(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, counts.data(), nullptr),
            where, "cannot select rows");
  return file_space;
}

void SlotTable::write_selected(hid_t mem_type, hid_t mem_space, hid_t file_space, const void* mem, hsize_t row,
                               hsize_t n_rows, hsize_t slot, hsize_t n_slots, const h5::Where& where) {
  h5::check(H5Dwrite(dataset_.get(), mem_type, mem_space, file_space, H5P_DEFAULT, mem), where,
            "cannot write rows " + std::to_string(row) + ".." + std::to_string(row + n_rows - 1) + " of slots " +
                std::to_string(slot) + ".." + std::to_string(slot + n_slots - 1));
}

void SlotTable::write(hsize_t row, hsize_t n_rows, hsize_t slot, hsize_t n_slots, hid_t mem_type,
                      const void* mem, hsize_t mem_rows, hsize_t mem_slots, hsize_t mem_slot,
                      const h5::Where& where) {
  if (n_rows == 0 || n_slots == 0) return;
  const h5::Id file_space = select(row, n_rows, slot, n_slots, 0, 0, where);
  // Memory is (mem_rows, mem_slots, *inner); with one slot that is also (1, mem_rows, *inner),
  // which a slot-major table takes in its own order: HDF5 maps a selection of another shape
  // element by element.
  std::array<hsize_t, kMaxRank> mem_dims = dims_;
  mem_dims[row_dim_] = mem_rows;
  mem_dims[slot_dim_] = mem_slots;
  const h5::Id mem_space = h5::space_id(H5Screate_simple(rank_, mem_dims.data(), nullptr), where,
                                        "cannot create a dataspace");
  if (n_rows != mem_rows || n_slots != mem_slots) {
    std::array<hsize_t, kMaxRank> count = dims_;
    count[row_dim_] = n_rows;
    count[slot_dim_] = n_slots;
    std::array<hsize_t, kMaxRank> origin{};
    origin[slot_dim_] = mem_slot;
    h5::check(H5Sselect_hyperslab(mem_space.get(), H5S_SELECT_SET, origin.data(), nullptr, count.data(), nullptr),
              where, "cannot select rows");
  }
  write_selected(mem_type, mem_space.get(), file_space.get(), mem, row, n_rows, slot, n_slots, where);
}

void SlotTable::write_last_range(hsize_t row, hsize_t n_rows, hsize_t slot, hsize_t n_slots, hid_t mem_type,
                                 const void* mem, hsize_t first, hsize_t count, const h5::Where& where) {
  if (n_rows == 0 || n_slots == 0 || count == 0) return;
  const h5::Id file_space = select(row, n_rows, slot, n_slots, first, count, where);
  std::array<hsize_t, kMaxRank> mem_dims = dims_;
  mem_dims[row_dim_] = n_rows;
  mem_dims[slot_dim_] = n_slots;
  mem_dims[rank_ - 1] = count;
  const h5::Id mem_space = h5::space_id(H5Screate_simple(rank_, mem_dims.data(), nullptr), where,
                                        "cannot create a dataspace");
  write_selected(mem_type, mem_space.get(), file_space.get(), mem, row, n_rows, slot, n_slots, where);
}

void SlotTable::trim(hsize_t rows, const h5::Where& where) {
  if (created() && dims_[row_dim_] != rows) {
    dims_[row_dim_] = rows;
    set_extent(where);
  }
}

}  // namespace tapdiff
