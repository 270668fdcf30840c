#include "extendable.hpp"

namespace tapdiff {

void Extendable::create(hid_t parent, const char* name, hid_t file_type,
                        std::vector<hsize_t> row_dims, hsize_t chunk_rows,
                        const DatasetOptions& options, const h5::Where& where) {
  row_dims_ = std::move(row_dims);
  chunk_rows_ = chunk_rows < 1 ? 1 : chunk_rows;
  std::vector<hsize_t> dims{0};
  std::vector<hsize_t> max_dims{H5S_UNLIMITED};
  std::vector<hsize_t> chunk{chunk_rows_};
  for (hsize_t d : row_dims_) {
    dims.push_back(d);
    max_dims.push_back(d);
    chunk.push_back(d);
  }
  const int rank = static_cast<int>(dims.size());
  const h5::Id space = h5::space_id(H5Screate_simple(rank, dims.data(), max_dims.data()), where,
                                    "cannot create a dataspace");
  const h5::Id dcpl = h5::plist_id(H5Pcreate(H5P_DATASET_CREATE), where, "cannot create");
  h5::check(H5Pset_chunk(dcpl.get(), rank, chunk.data()), where, "cannot set chunking");
  if (options.zero_fill) {
    h5::check(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_ALLOC), where, "cannot set fill");
  } else {
    // Rows past the committed count are never read, so never pay for writing fill values.
    h5::check(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER), where, "cannot set fill");
  }
  if (options.compress) {
    h5::check(H5Pset_shuffle(dcpl.get()), where, "cannot enable shuffle");
    h5::check(H5Pset_deflate(dcpl.get(), static_cast<unsigned>(options.gzip_level)), where,
              "cannot enable gzip");
  }
  const h5::Id dapl = h5::plist_id(H5Pcreate(H5P_DATASET_ACCESS), where, "cannot create");
  if (!options.compress) {
    // Uncached: a partial-chunk write goes straight to the file instead of making the flush
    // rewrite the whole chunk at every step.
    h5::check(H5Pset_chunk_cache(dapl.get(), H5D_CHUNK_CACHE_NSLOTS_DEFAULT, 0,
                                 H5D_CHUNK_CACHE_W0_DEFAULT),
              where, "cannot set the chunk cache");
  }
  dataset_ = h5::dataset_id(
      H5Dcreate2(parent, name, file_type, space.get(), H5P_DEFAULT, dcpl.get(), dapl.get()), where,
      "cannot create dataset");
  capacity_ = 0;
  size_ = 0;
}

void Extendable::set_extent(hsize_t rows, const h5::Where& where) {
  std::vector<hsize_t> dims{rows};
  dims.insert(dims.end(), row_dims_.begin(), row_dims_.end());
  h5::check(H5Dset_extent(dataset_.get(), dims.data()), where,
            "cannot extend to " + std::to_string(rows) + " rows");
  capacity_ = rows;
}

void Extendable::write(hsize_t first_row, hsize_t n, hid_t mem_type, const void* rows,
                       const h5::Where& where) {
  if (n == 0) return;
  const hsize_t end = first_row + n;
  if (end > capacity_) set_extent((end + chunk_rows_ - 1) / chunk_rows_ * chunk_rows_, where);
  std::vector<hsize_t> start{first_row};
  std::vector<hsize_t> count{n};
  for (hsize_t d : row_dims_) {
    start.push_back(0);
    count.push_back(d);
  }
  const int rank = static_cast<int>(count.size());
  const h5::Id file_space = h5::space_id(H5Dget_space(dataset_.get()), where, "cannot write");
  h5::check(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr,
                                count.data(), nullptr),
            where, "cannot select rows");
  const h5::Id mem_space = h5::space_id(H5Screate_simple(rank, count.data(), nullptr), where,
                                        "cannot create a dataspace");
  h5::check(H5Dwrite(dataset_.get(), mem_type, mem_space.get(), file_space.get(), H5P_DEFAULT, rows),
            where, "cannot write rows " + std::to_string(first_row) + ".." + std::to_string(end - 1));
  if (end > size_) size_ = end;
}

void Extendable::trim(const h5::Where& where) {
  if (created() && capacity_ != size_) set_extent(size_, where);
}

}  // namespace tapdiff
