#include "extendable.hpp"

namespace tapdiff {

h5::Id create_chunked_dataset(hid_t parent, const char* name, hid_t file_type, int rank,
                              const hsize_t* dims, const hsize_t* max_dims, const hsize_t* chunk,
                              const DatasetOptions& options, const h5::Where& where) {
  const h5::Id space = h5::space_id(H5Screate_simple(rank, dims, max_dims), where,
                                    "cannot create a dataspace");
  const h5::Id dcpl = h5::plist_id(H5Pcreate(H5P_DATASET_CREATE), where, "cannot create");
  h5::check(H5Pset_chunk(dcpl.get(), rank, chunk), where, "cannot set chunking");
  // No modification times: smaller object headers, and a trace's bytes depend on its data only.
  h5::check(H5Pset_obj_track_times(dcpl.get(), false), where, "cannot set time tracking");
  // Rows past the committed count are never read, so never pay for writing fill values.
  h5::check(
      H5Pset_fill_time(dcpl.get(), options.zero_fill ? H5D_FILL_TIME_ALLOC : H5D_FILL_TIME_NEVER),
      where, "cannot set fill");
  if (options.compress) {
    h5::check(H5Pset_shuffle(dcpl.get()), where, "cannot enable shuffle");
    h5::check(H5Pset_deflate(dcpl.get(), static_cast<unsigned>(options.gzip_level)), where,
              "cannot enable gzip");
  }
  const h5::Id dapl = h5::plist_id(H5Pcreate(H5P_DATASET_ACCESS), where, "cannot create");
  if (!options.compress) {
    // Uncached: a step's block goes straight to the file, and a partial-chunk write does not
    // make every flush rewrite the whole chunk.
    h5::check(H5Pset_chunk_cache(dapl.get(), H5D_CHUNK_CACHE_NSLOTS_DEFAULT, 0,
                                 H5D_CHUNK_CACHE_W0_DEFAULT),
              where, "cannot set the chunk cache");
  }
  return h5::dataset_id(
      H5Dcreate2(parent, name, file_type, space.get(), H5P_DEFAULT, dcpl.get(), dapl.get()), where,
      "cannot create dataset");
}

void Extendable::create(hid_t parent, const char* name, hid_t file_type,
                        const std::vector<hsize_t>& row_dims, hsize_t chunk_rows,
                        const DatasetOptions& options, const h5::Where& where) {
  rank_ = 1 + static_cast<int>(row_dims.size());
  chunk_rows_ = chunk_rows < 1 ? 1 : chunk_rows;
  std::array<hsize_t, kMaxRank> max_dims{H5S_UNLIMITED};
  std::array<hsize_t, kMaxRank> chunk{chunk_rows_};
  dims_[0] = 0;
  for (std::size_t i = 0; i < row_dims.size(); ++i) {
    dims_[i + 1] = max_dims[i + 1] = chunk[i + 1] = row_dims[i];
  }
  dataset_ = create_chunked_dataset(parent, name, file_type, rank_, dims_.data(), max_dims.data(),
                                    chunk.data(), options, where);
  size_ = 0;
}

void Extendable::set_extent(hsize_t rows, const h5::Where& where) {
  dims_[0] = rows;
  h5::check(H5Dset_extent(dataset_.get(), dims_.data()), where,
            "cannot extend to " + std::to_string(rows) + " rows");
  file_space_.reset();
}

void Extendable::write(hsize_t first_row, hsize_t n, hid_t mem_type, const void* rows,
                       const h5::Where& where) {
  if (n == 0) return;
  const hsize_t end = first_row + n;
  if (end > dims_[0]) {
    // Small appends grow the extent by whole chunks (no metadata change for most steps); a
    // batch of at least a chunk gets its exact size (nothing to trim, nor to prune, at close).
    set_extent(n >= chunk_rows_ ? end : (end + chunk_rows_ - 1) / chunk_rows_ * chunk_rows_, where);
  }
  if (!file_space_.valid()) {
    file_space_ = h5::space_id(H5Dget_space(dataset_.get()), where, "cannot write");
  }
  std::array<hsize_t, kMaxRank> start{first_row};
  std::array<hsize_t, kMaxRank> count = dims_;
  count[0] = n;
  h5::check(H5Sselect_hyperslab(file_space_.get(), H5S_SELECT_SET, start.data(), nullptr,
                                count.data(), nullptr),
            where, "cannot select rows");
  if (!mem_space_.valid() || mem_rows_ != n) {
    mem_space_ = h5::space_id(H5Screate_simple(rank_, count.data(), nullptr), where,
                              "cannot create a dataspace");
    mem_rows_ = n;
  }
  h5::check(
      H5Dwrite(dataset_.get(), mem_type, mem_space_.get(), file_space_.get(), H5P_DEFAULT, rows),
      where, "cannot write rows " + std::to_string(first_row) + ".." + std::to_string(end - 1));
  if (end > size_) size_ = end;
}

void Extendable::trim(const h5::Where& where) {
  if (created() && dims_[0] != size_) set_extent(size_, where);
}

void Extendable::close() {
  mem_space_.reset();
  file_space_.reset();
  dataset_.reset();
}

}  // namespace tapdiff
