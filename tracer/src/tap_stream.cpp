#include "tap_stream.hpp"

#include <algorithm>

#include "h5_attr.hpp"
#include "schema.hpp"
#include "tapdiff/tap_filter.hpp"
#include "tapdiff/trace_error.hpp"

namespace tapdiff {
namespace {

constexpr std::size_t kReleaseStagingBytes = 16u << 20;  // keep smaller buffers for reuse
constexpr std::uint64_t kNewTapMetadataBytes = 16 * 1024;
constexpr std::uint64_t kMaxChunkRows = 256;  // narrow taps: keep a barely used chunk small

}  // namespace

TapStream::TapStream(std::string name, int layer, const RowShape& shape, std::int64_t index)
    : name_(std::move(name)),
      layer_(layer),
      full_name_(full_tap_name(name_, layer)),
      shape_(shape),
      index_(index) {}

void TapStream::check(std::int64_t first_position, const RowShape& shape,
                      const std::string& path) const {
  const std::string object = std::string("/") + schema::kTaps + "/" + full_name_;
  if (shape != shape_) {
    throw TraceError(path, object,
                     "row shape " + shape.to_string() + " differs from " + shape_.to_string() +
                         " recorded earlier");
  }
  if (first_position <= last_position_) {
    throw TraceError(path, object,
                     "position " + std::to_string(first_position) + " recorded after position " +
                         std::to_string(last_position_) + ": positions of a tap must increase");
  }
}

void TapStream::note_rows(std::int64_t first_position, std::int64_t n_rows) {
  if (rows_total_ == 0 || first_position != last_position_ + 1) {
    runs_.push_back({rows_total_, first_position});
  }
  rows_total_ += n_rows;
  last_position_ = first_position + n_rows - 1;
}

void TapStream::stage(std::int64_t first_position, std::int64_t n_rows, const float* rows) {
  note_rows(first_position, n_rows);
  const std::size_t n = static_cast<std::size_t>(n_rows * shape_.elements());
  staged_.insert(staged_.end(), rows, rows + n);
}

void TapStream::write_now(std::int64_t first_position, std::int64_t n_rows, const float* rows,
                          hid_t taps_group, const StreamConfig& config, const std::string& path) {
  ensure_created(taps_group, config, path);
  note_rows(first_position, n_rows);
  const std::string object = std::string("/") + schema::kTaps + "/" + full_name_;
  data_.append(static_cast<hsize_t>(n_rows), H5T_NATIVE_FLOAT, rows,
               {path, object + "/" + schema::kTapData});
  append_runs(path);
}

void TapStream::append_runs(const std::string& path) {
  const hsize_t new_runs = runs_.size() - runs_ds_.size();
  if (new_runs > 0) {
    runs_ds_.append(
        new_runs, H5T_NATIVE_INT64, runs_[runs_ds_.size()].data(),
        {path, std::string("/") + schema::kTaps + "/" + full_name_ + "/" + schema::kTapRuns});
  }
}

hsize_t TapStream::chunk_rows(const StreamConfig& config) const {
  const std::uint64_t row_bytes = static_cast<std::uint64_t>(shape_.elements()) * sizeof(float);
  return std::clamp<std::uint64_t>(config.chunk_bytes / row_bytes, 1, kMaxChunkRows);
}

std::uint64_t TapStream::write_bound(const StreamConfig& config) const {
  if (staged_.empty()) return 0;
  return bound(staged_.size() / static_cast<std::size_t>(shape_.elements()), config);
}

std::uint64_t TapStream::write_now_bound(std::int64_t n_rows, const StreamConfig& config) const {
  return bound(static_cast<std::uint64_t>(n_rows), config);
}

std::uint64_t TapStream::bound(std::uint64_t new_rows, const StreamConfig& config) const {
  const std::uint64_t rows = static_cast<std::uint64_t>(rows_written());
  const std::uint64_t per_chunk = chunk_rows(config);
  const std::uint64_t chunk_bytes =
      per_chunk * static_cast<std::uint64_t>(shape_.elements()) * sizeof(float);
  // Writing into a chunk allocates all of it; a compressed partial chunk is rewritten
  // (elsewhere) at every flush, and gzip can expand incompressible data slightly.
  std::uint64_t chunks =
      (rows + new_rows + per_chunk - 1) / per_chunk - (rows + per_chunk - 1) / per_chunk;
  if (config.dataset.compress) chunks = (chunks + 1) * 2;
  std::uint64_t bytes = chunks * chunk_bytes + 1024 + schema::kRunsChunk * 16;
  if (!group_.valid()) bytes += kNewTapMetadataBytes;
  return bytes;
}

void TapStream::create(hid_t taps_group, const StreamConfig& config, const std::string& path) {
  const h5::Where where{path, std::string("/") + schema::kTaps + "/" + full_name_};
  group_ = h5::group_id(
      H5Gcreate2(taps_group, full_name_.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), where,
      "cannot create group");
  h5::write_string_attr(group_.get(), schema::kTapName, name_, where);
  h5::write_int_attr(group_.get(), schema::kTapLayer, layer_, where);
  h5::write_int_array_attr(group_.get(), schema::kTapRowShape, shape_.to_vector(), where);
  h5::write_int_attr(group_.get(), schema::kTapIndex, index_, where);

  std::vector<hsize_t> row_dims;
  for (std::int64_t d : shape_.to_vector()) row_dims.push_back(static_cast<hsize_t>(d));
  data_.create(group_.get(), schema::kTapData, H5T_IEEE_F32LE, row_dims, chunk_rows(config),
               config.dataset, {path, where.object + "/" + schema::kTapData});
  DatasetOptions runs_options;
  runs_options.exact_extent = true;  // a tap has one run unless a filter or a gap splits it
  runs_ds_.create(group_.get(), schema::kTapRuns, H5T_STD_I64LE, {2}, schema::kRunsChunk,
                  runs_options, {path, where.object + "/" + schema::kTapRuns});
}

void TapStream::ensure_created(hid_t taps_group, const StreamConfig& config,
                               const std::string& path) {
  if (!group_.valid()) create(taps_group, config, path);
}

void TapStream::reshape(const RowShape& shape, hid_t taps_group, const std::string& path) {
  if (group_.valid()) {
    close();
    h5::check(H5Ldelete(taps_group, full_name_.c_str(), H5P_DEFAULT),
              {path, std::string("/") + schema::kTaps + "/" + full_name_},
              "cannot replace the pre-created tap");
  }
  shape_ = shape;
}

void TapStream::write_staged(hid_t taps_group, const StreamConfig& config,
                             const std::string& path) {
  if (staged_.empty()) return;
  ensure_created(taps_group, config, path);
  const std::string object = std::string("/") + schema::kTaps + "/" + full_name_;
  const hsize_t n = staged_.size() / static_cast<std::size_t>(shape_.elements());
  data_.append(n, H5T_NATIVE_FLOAT, staged_.data(), {path, object + "/" + schema::kTapData});
  append_runs(path);
  if (staged_.capacity() * sizeof(float) > kReleaseStagingBytes) {
    std::vector<float>().swap(staged_);
  } else {
    staged_.clear();
  }
}

void TapStream::trim(const std::string& path) {
  const std::string object = std::string("/") + schema::kTaps + "/" + full_name_;
  data_.trim({path, object + "/" + schema::kTapData});
  runs_ds_.trim({path, object + "/" + schema::kTapRuns});
}

void TapStream::close() {
  data_.close();
  runs_ds_.close();
  group_.reset();
}

}  // namespace tapdiff
