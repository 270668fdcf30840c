#include "slot_table.hpp"

#include <algorithm>

namespace tapdiff {

void SlotTable::create(hid_t parent, const char* name, hid_t file_type, hsize_t slots,
                       const std::vector<hsize_t>& inner, hsize_t chunk_rows, hsize_t chunk_slots,
                       const DatasetOptions& options, const h5::Where& where, hsize_t chunk_last) {
  rank_ = 2 + static_cast<int>(inner.size());
  exact_ = options.exact_extent;
  std::array<hsize_t, kMaxRank> max_dims{H5S_UNLIMITED, H5S_UNLIMITED};
  dims_ = {0, slots};
  chunk_ = {std::max<hsize_t>(chunk_rows, 1), std::clamp<hsize_t>(chunk_slots, 1, slots)};
  for (std::size_t i = 0; i < inner.size(); ++i) {
    dims_[i + 2] = max_dims[i + 2] = chunk_[i + 2] = inner[i];
  }
  if (chunk_last > 0 && !inner.empty()) chunk_[rank_ - 1] = std::min(chunk_last, inner.back());
  dataset_ = create_chunked_dataset(parent, name, file_type, rank_, dims_.data(), max_dims.data(),
                                    chunk_.data(), options, where);
}

void SlotTable::set_extent(const h5::Where& where) {
  h5::check(H5Dset_extent(dataset_.get(), dims_.data()), where,
            "cannot extend to " + std::to_string(dims_[0]) + " rows of " +
                std::to_string(dims_[1]) + " slots");
}

void SlotTable::set_slots(hsize_t slots, const h5::Where& where) {
  if (slots == dims_[1]) return;
  dims_[1] = slots;
  set_extent(where);
}

void SlotTable::write(hsize_t row, hsize_t n_rows, hsize_t slot, hsize_t n_slots, hid_t mem_type,
                      const void* mem, hsize_t mem_rows, hsize_t mem_slots, hsize_t mem_slot,
                      const h5::Where& where, hsize_t mem_row, hsize_t last_extent) {
  if (n_rows == 0 || n_slots == 0) return;
  const hsize_t end = row + n_rows;
  if (end > dims_[0]) {
    // Small appends grow by whole chunks (no metadata change for most steps); a batch of at
    // least a chunk gets its exact size (nothing to trim at close).
    const hsize_t c = chunk_[0];
    dims_[0] = exact_ || n_rows >= c ? end : (end + c - 1) / c * c;
    set_extent(where);
  }
  std::array<hsize_t, kMaxRank> start{row, slot};
  std::array<hsize_t, kMaxRank> count = dims_;
  count[0] = n_rows;
  count[1] = n_slots;
  if (last_extent > 0) count[rank_ - 1] = std::min(last_extent, dims_[rank_ - 1]);
  const h5::Id file_space =
      h5::space_id(H5Dget_space(dataset_.get()), where, "cannot get the dataspace");
  h5::check(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr,
                                count.data(), nullptr),
            where, "cannot select rows");
  std::array<hsize_t, kMaxRank> mem_dims = dims_;
  mem_dims[0] = mem_rows;
  mem_dims[1] = mem_slots;
  const h5::Id mem_space = h5::space_id(H5Screate_simple(rank_, mem_dims.data(), nullptr), where,
                                        "cannot create a dataspace");
  if (n_rows != mem_rows || n_slots != mem_slots || count[rank_ - 1] != dims_[rank_ - 1]) {
    const std::array<hsize_t, kMaxRank> origin{mem_row, mem_slot};
    h5::check(H5Sselect_hyperslab(mem_space.get(), H5S_SELECT_SET, origin.data(), nullptr,
                                  count.data(), nullptr),
              where, "cannot select rows");
  }
  h5::check(H5Dwrite(dataset_.get(), mem_type, mem_space.get(), file_space.get(), H5P_DEFAULT, mem),
            where,
            "cannot write rows " + std::to_string(row) + ".." + std::to_string(end - 1) +
                " of slots " + std::to_string(slot) + ".." + std::to_string(slot + n_slots - 1));
}

void SlotTable::trim(hsize_t rows, const h5::Where& where) {
  if (created() && dims_[0] != rows) {
    dims_[0] = rows;
    set_extent(where);
  }
}

}  // namespace tapdiff
