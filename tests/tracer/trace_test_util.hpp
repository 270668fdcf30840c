// Shared bits of the tracer tests: sample metadata, a tap's values read back, raw HDF5 access.
#pragma once

#include <hdf5.h>

#include <string>
#include <vector>

#include "tapdiff/trace_reader.hpp"
#include "tapdiff/trace_writer.hpp"

namespace tapdiff::test {

inline TraceMetadata sample_metadata() {
  TraceMetadata m;
  m.producer = Producer::engine_host;
  m.producer_version = "0.1.0";
  m.git_commit = "abcdef012345";
  m.model_path = "models/tiny-llama.gguf";
  m.model_sha256 = std::string(64, 'a');
  m.hparams = {
      {"arch", std::string("llama")}, {"n_layer", std::int64_t{2}}, {"rope_freq_base", 10000.0}};
  m.precision = "f32";
  m.fault = "none";
  m.prompt_length = 2;
  m.tokens = {11, 12};
  return m;
}

// Every value of a tap, (rows, row_size).
inline std::vector<float> all_values(const TraceReader& r, const std::string& name, int layer) {
  return r.read(r.tap(name, layer)).values;
}

// File access without locking, as the tracer opens files: HDF5 refuses to open a file twice
// in one process with different locking settings.
inline hid_t unlocked_fapl() {
  const hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_file_locking(fapl, false, true);
  return fapl;
}

inline hid_t open_raw(const std::string& file, unsigned flags) {
  const hid_t fapl = unlocked_fapl();
  const hid_t f = H5Fopen(file.c_str(), flags, fapl);
  H5Pclose(fapl);
  return f;
}

// The extent of a dataset, read with plain HDF5.
inline std::vector<hsize_t> raw_dims(const std::string& file, const std::string& dataset) {
  const hid_t f = open_raw(file, H5F_ACC_RDONLY);
  const hid_t d = H5Dopen2(f, dataset.c_str(), H5P_DEFAULT);
  const hid_t s = H5Dget_space(d);
  std::vector<hsize_t> dims(static_cast<std::size_t>(H5Sget_simple_extent_ndims(s)));
  H5Sget_simple_extent_dims(s, dims.data(), nullptr);
  H5Sclose(s);
  H5Dclose(d);
  H5Fclose(f);
  return dims;
}

}  // namespace tapdiff::test
