// One tap being written: rows staged in memory by record(), then appended to
// /taps/<full name>/data with the position runs that key them in .../runs.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "extendable.hpp"
#include "h5.hpp"
#include "tapdiff/row_shape.hpp"

namespace tapdiff {

struct StreamConfig {
  std::size_t chunk_bytes = 64 * 1024;
  DatasetOptions dataset;
};

class TapStream {
public:
  TapStream(std::string name, int layer, const RowShape& shape, std::int64_t index);

  const std::string& full_name() const { return full_name_; }
  const RowShape& shape() const { return shape_; }
  std::int64_t index() const { return index_; }
  std::int64_t rows_written() const { return static_cast<std::int64_t>(data_.size()); }
  std::int64_t runs_written() const { return static_cast<std::int64_t>(runs_ds_.size()); }
  std::uint64_t staged_bytes() const { return staged_.size() * sizeof(float); }
  bool empty() const { return rows_total_ == 0; }

  // Creates the group and datasets now (pre-created taps) if they do not exist yet.
  void ensure_created(hid_t taps_group, const StreamConfig& config, const std::string& path);
  // A pre-created tap without rows takes the shape the producer actually records (a shape
  // bug is a finding, not a reason to drop the tap); its HDF5 objects are made again.
  void reshape(const RowShape& shape, hid_t taps_group, const std::string& path);
  // Throws TraceError unless shape matches and first_position follows the last position.
  void check(std::int64_t first_position, const RowShape& shape, const std::string& path) const;
  // rows: (n_rows, shape.elements()) for positions first_position.. (already checked).
  void stage(std::int64_t first_position, std::int64_t n_rows, const float* rows);
  // The same, written at once from the caller's memory (large batches; nothing staged).
  void write_now(std::int64_t first_position, std::int64_t n_rows, const float* rows,
                 hid_t taps_group, const StreamConfig& config, const std::string& path);
  // Bytes write_now() of n_rows may add to the file.
  std::uint64_t write_now_bound(std::int64_t n_rows, const StreamConfig& config) const;

  // Bytes the next write_staged() may add to the file, for SpaceReserve.
  std::uint64_t write_bound(const StreamConfig& config) const;
  // Creates the HDF5 objects on first use, then writes staged rows and new runs.
  void write_staged(hid_t taps_group, const StreamConfig& config, const std::string& path);
  void trim(const std::string& path);
  void close();

private:
  hsize_t chunk_rows(const StreamConfig& config) const;
  void note_rows(std::int64_t first_position, std::int64_t n_rows);  // runs bookkeeping
  std::uint64_t bound(std::uint64_t new_rows, const StreamConfig& config) const;
  void append_runs(const std::string& path);
  void create(hid_t taps_group, const StreamConfig& config, const std::string& path);

  std::string name_;
  int layer_;
  std::string full_name_;
  RowShape shape_;
  std::int64_t index_;

  std::vector<float> staged_;                      // (staged rows, row size)
  std::vector<std::array<std::int64_t, 2>> runs_;  // (n_runs, 2): first_row, first_position
  std::int64_t rows_total_ = 0;                    // written + staged
  std::int64_t last_position_ = -1;

  h5::Id group_;
  Extendable data_;
  Extendable runs_ds_;
};

}  // namespace tapdiff
