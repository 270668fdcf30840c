// libFuzzer target: the trace reader on hostile content in well-formed HDF5. An input is a
// program of edits (attributes set to any value or type, datasets replaced, grown or
// overwritten, links removed) applied with the HDF5 C API to a valid trace; the reader then
// opens the result and reads every tap as `tapdiff diff` does. Anything but TraceError is a bug.
//
// Raw byte mutations of the HDF5 file would mostly exercise libhdf5's own parser, which hangs
// (H5HG_read) and sizes mallocs from corrupt global heaps within a minute of fuzzing: bugs that
// are not tapdiff's to fix, and would drown the reader's own.
#include <fuzzer/FuzzedDataProvider.h>
#include <hdf5.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <unistd.h>
#include <vector>

#include "tapdiff/trace_reader.hpp"
#include "tapdiff/trace_writer.hpp"

namespace {

const char* const kObjects[] = {"/", "/taps/attn_q", "/taps/output", "/hparams"};
const char* const kAttributes[] = {
    "format",           "format_version",   "producer",  "complete",      "committed_steps",
    "committed_tokens", "prompt_length",    "name",      "layers",        "row_shape",
    "index",            "tap_filter_names", "precision", "model_sha256", "n_layer"};
const char* const kArrayAttributes[] = {"row_shape", "layers", "index"};
const char* const kDatasets[] = {"/tokens",            "/committed",         "/taps/attn_q/data",
                                 "/taps/attn_q/batch", "/taps/attn_q/runs",  "/taps/output/data",
                                 "/taps/output/batch", "/taps/output/runs"};
const char* const kLinks[] = {"/tokens",           "/committed",         "/taps/output", "/taps/attn_q/runs",
                              "/taps/attn_q/batch", "/taps/output/data", "/hparams"};

template <typename T, std::size_t N>
const T& pick(FuzzedDataProvider& in, const T (&items)[N]) {
  return items[in.ConsumeIntegralInRange<std::size_t>(0, N - 1)];
}

// Small values, powers of two up to 2^62 (either sign), or any 64-bit value.
std::int64_t interesting_int(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange(0, 3)) {
    case 0: return in.ConsumeIntegralInRange<std::int64_t>(-2, 8);
    case 1: return std::int64_t{1} << in.ConsumeIntegralInRange(0, 62);
    case 2: return -(std::int64_t{1} << in.ConsumeIntegralInRange(0, 62));
    default: return in.ConsumeIntegral<std::int64_t>();
  }
}

// Extents up to 2^25: past the reader's 2^24 position limit, small enough that libhdf5 itself
// stays fast (it visits every chunk index entry when a dataset shrinks).
hsize_t interesting_extent(FuzzedDataProvider& in, int max_log2 = 25) {
  const std::int64_t v = interesting_int(in);
  const hsize_t magnitude = v < 0 ? hsize_t(-(v + 1)) : hsize_t(v);
  return magnitude % ((hsize_t{1} << max_log2) + 1);
}

void write_attribute(hid_t file, const char* object, const char* name, hid_t type,
                     const std::vector<hsize_t>& dims, const void* value) {
  if (H5Aexists_by_name(file, object, name, H5P_DEFAULT) > 0)
    H5Adelete_by_name(file, object, name, H5P_DEFAULT);
  const hid_t space = dims.empty() ? H5Screate(H5S_SCALAR)
                                   : H5Screate_simple(int(dims.size()), dims.data(), nullptr);
  const hid_t attr =
      H5Acreate_by_name(file, object, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (attr >= 0) {
    H5Awrite(attr, type, value);
    H5Aclose(attr);
  }
  H5Sclose(space);
}

void set_string(hid_t file, const char* object, const char* name, const std::string& value) {
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, value.size() + 1);
  write_attribute(file, object, name, type, {}, value.c_str());
  H5Tclose(type);
}

// Writes `values` as row `row` (of slot `slot` in a stack's 3-D runs) of an int64 dataset whose
// last dimension is values.size(), growing it first when it can grow.
void write_row(hid_t file, const char* dataset, hsize_t row, hsize_t slot,
               const std::vector<std::int64_t>& v) {
  const hid_t ds = H5Dopen2(file, dataset, H5P_DEFAULT);
  if (ds < 0) return;
  const hid_t space = H5Dget_space(ds);
  hsize_t dims[3] = {0, 0, 0};
  const int rank = H5Sget_simple_extent_ndims(space);
  if ((rank == 2 || rank == 3) && H5Sget_simple_extent_dims(space, dims, nullptr) == rank &&
      dims[rank - 1] == v.size() && (rank == 2 || slot < dims[1])) {
    if (row >= dims[0]) {
      hsize_t grown[3] = {row + 1, dims[1], dims[2]};
      H5Dset_extent(ds, grown);
    }
    const hid_t file_space = H5Dget_space(ds);
    const hsize_t start[3] = {row, rank == 2 ? 0 : slot, 0};
    const hsize_t count[3] = {1, rank == 2 ? dims[1] : 1, v.size()};
    if (H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start, nullptr, count, nullptr) >= 0) {
      const hid_t mem = H5Screate_simple(rank, count, nullptr);
      H5Dwrite(ds, H5T_NATIVE_INT64, mem, file_space, H5P_DEFAULT, v.data());
      H5Sclose(mem);
    }
    H5Sclose(file_space);
  }
  H5Sclose(space);
  H5Dclose(ds);
}

void grow_first_dim(hid_t file, const char* dataset, hsize_t rows) {
  const hid_t ds = H5Dopen2(file, dataset, H5P_DEFAULT);
  if (ds < 0) return;
  const hid_t space = H5Dget_space(ds);
  std::vector<hsize_t> dims(std::size_t(std::max(H5Sget_simple_extent_ndims(space), 0)));
  // Grow only: shrinking a grown dataset makes libhdf5 walk every chunk (slow, not ours).
  if (!dims.empty() && H5Sget_simple_extent_dims(space, dims.data(), nullptr) >= 0 &&
      rows > dims[0]) {
    dims[0] = rows;
    H5Dset_extent(ds, dims.data());
  }
  H5Sclose(space);
  H5Dclose(ds);
}

// A new, chunked, unwritten dataset of any type and extent in place of `dataset`.
void replace_dataset(hid_t file, const char* dataset, FuzzedDataProvider& in) {
  const hid_t types[] = {H5T_IEEE_F32LE, H5T_IEEE_F64LE, H5T_STD_I32LE, H5T_STD_I64LE};
  const hid_t type = pick(in, types);
  std::vector<hsize_t> dims(in.ConsumeIntegralInRange<std::size_t>(1, 5));
  std::vector<hsize_t> chunk(dims.size());
  for (std::size_t i = 0; i < dims.size(); ++i) {
    dims[i] = interesting_extent(in, i == 0 ? 25 : 12);
    chunk[i] = std::max<hsize_t>(1, std::min<hsize_t>(dims[i], i == 0 ? 4096 : 8));
  }
  H5Ldelete(file, dataset, H5P_DEFAULT);
  const hid_t space = H5Screate_simple(int(dims.size()), dims.data(), nullptr);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, int(chunk.size()), chunk.data());
  const hid_t ds = H5Dcreate2(file, dataset, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  if (ds >= 0) H5Dclose(ds);
  H5Pclose(dcpl);
  H5Sclose(space);
}

void apply_edit(hid_t file, FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange(0, 7)) {
    case 0: {
      const std::int64_t v = interesting_int(in);
      write_attribute(file, pick(in, kObjects), pick(in, kAttributes), H5T_NATIVE_INT64, {}, &v);
      break;
    }
    case 1:
      set_string(file, pick(in, kObjects), pick(in, kAttributes), in.ConsumeRandomLengthString(40));
      break;
    case 2: {
      std::vector<std::int64_t> v(in.ConsumeIntegralInRange<std::size_t>(0, 5));
      for (auto& x : v) x = interesting_int(in);
      write_attribute(file, pick(in, kObjects), pick(in, kArrayAttributes), H5T_NATIVE_INT64,
                      {v.size()}, v.data());
      break;
    }
    case 3: {
      const char* object = pick(in, kObjects);
      const char* name = pick(in, kAttributes);
      if (H5Aexists_by_name(file, object, name, H5P_DEFAULT) > 0)
        H5Adelete_by_name(file, object, name, H5P_DEFAULT);
      break;
    }
    case 4: {
      const char* dataset = pick(in, kDatasets);
      const hsize_t row = in.ConsumeIntegralInRange<hsize_t>(0, 9);
      const hsize_t slot = in.ConsumeIntegralInRange<hsize_t>(0, 1);
      write_row(file, dataset, row, slot, {interesting_int(in), interesting_int(in)});
      break;
    }
    case 5: {
      const char* dataset = pick(in, kDatasets);
      grow_first_dim(file, dataset, interesting_extent(in));
      break;
    }
    case 6: replace_dataset(file, pick(in, kDatasets), in); break;
    default: H5Ldelete(file, pick(in, kLinks), H5P_DEFAULT); break;
  }
}

// A valid trace: a stack of two layer taps and a global one, at positions 0..3 (a prompt of two
// in each stack's batch, then two decode steps), read once.
std::vector<char> base_trace(const std::string& path) {
  tapdiff::TraceMetadata m;
  m.producer = tapdiff::Producer::external;
  m.model_path = "fuzz.gguf";
  m.model_sha256 = std::string(64, 'a');
  m.prompt_length = 2;
  m.tokens = {1, 2, 3, 4};
  {
    tapdiff::TraceWriter w(path, m);
    for (int p = 0; p < 4; p += p == 0 ? 2 : 1) {
      const int n = p == 0 ? 2 : 1;
      const std::vector<float> q(8 * n, float(p)), logits(16 * n, -float(p));
      w.record("attn_q", 0, p, n, tapdiff::RowShape{8}, q.data());
      w.record("attn_q", 1, p, n, tapdiff::RowShape{8}, q.data());
      w.record("output", -1, p, n, tapdiff::RowShape{16}, logits.data());
      w.end_step();
    }
    w.close();
  }
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // One file per fuzzing process (libFuzzer's -jobs runs several).
  static const std::string path = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") +
                                  "/tapdiff_fuzz_trace_" + std::to_string(getpid()) + ".h5";
  static const std::vector<char> base = base_trace(path);
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(base.data(), std::streamsize(base.size()));

  FuzzedDataProvider in(data, size);
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  if (file < 0) std::abort();
  for (int i = 0; i < 16 && in.remaining_bytes() > 0; ++i) apply_edit(file, in);
  H5Fclose(file);

  try {
    const tapdiff::TraceReader reader(path);
    for (const tapdiff::TapInfo& tap : reader.taps()) (void)reader.read(tap);
  } catch (const tapdiff::TraceError&) {
  }
  std::remove(path.c_str());
  return 0;
}
