// A chunked dataset that grows along its first dimension by whole chunks, so that most
// appends change no metadata (the extent), and is trimmed to its exact size on close.
// Readers never trust the extent of an open or crashed trace: they read up to /committed.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "h5.hpp"

namespace tapdiff {

struct DatasetOptions {
  bool compress = false;  // shuffle + gzip; needs the chunk cache (whole-chunk writes)
  int gzip_level = 4;
  bool zero_fill = false;     // unwritten rows read as 0 (only for /committed)
  bool exact_extent = false;  // SlotTable: grow to the rows written (a stack's runs rarely grow)
};

// A chunked dataset without fill values or modification times; uncompressed ones get no chunk
// cache (writes go straight to the file), compressed ones need it (whole-chunk writes).
h5::Id create_chunked_dataset(hid_t parent, const char* name, hid_t file_type, int rank,
                              const hsize_t* dims, const hsize_t* max_dims, const hsize_t* chunk,
                              const DatasetOptions& options, const h5::Where& where);

class Extendable {
public:
  static constexpr int kMaxRank = 5;  // rows + a row of up to 4 dimensions

  Extendable() = default;
  // row_dims: the shape of one row (may be empty for a 1-D dataset).
  void create(hid_t parent, const char* name, hid_t file_type, const std::vector<hsize_t>& row_dims,
              hsize_t chunk_rows, const DatasetOptions& options, const h5::Where& where);

  bool created() const { return dataset_.valid(); }
  hid_t id() const { return dataset_.get(); }
  hsize_t size() const { return size_; }

  // Writes n rows at first_row (growing the extent as needed); size() becomes at least
  // first_row + n.
  void write(hsize_t first_row, hsize_t n, hid_t mem_type, const void* rows,
             const h5::Where& where);
  void append(hsize_t n, hid_t mem_type, const void* rows, const h5::Where& where) {
    write(size_, n, mem_type, rows, where);
  }
  void trim(const h5::Where& where);  // extent = size()
  void close();

private:
  void set_extent(hsize_t rows, const h5::Where& where);

  h5::Id dataset_;
  h5::Id file_space_;  // the dataset's dataspace at the current extent, reused across writes
  h5::Id mem_space_;   // (mem_rows_, row...) for writes of that many rows
  hsize_t mem_rows_ = 0;
  std::array<hsize_t, kMaxRank> dims_{};  // dims_[0]: the extent; then the row's dimensions
  int rank_ = 1;
  hsize_t chunk_rows_ = 1;
  hsize_t size_ = 0;  // rows written
};

}  // namespace tapdiff
