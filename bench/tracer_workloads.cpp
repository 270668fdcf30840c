#include "tracer_workloads.hpp"

#include <hdf5.h>

#include <chrono>
#include <stdexcept>
#include <vector>

#include "tapdiff/tap_catalogue.hpp"
#include "tapdiff/trace_writer.hpp"

namespace tapdiff::bench {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Tap names: the catalogue's per-layer taps, then numbered extras if asked for more.
std::vector<std::string> tap_names(int n) {
  std::vector<std::string> names;
  for (const TapSpec& spec : tap_catalogue()) {
    if (spec.scope == TapScope::layer) names.emplace_back(spec.name);
  }
  names.resize(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    if (names[static_cast<std::size_t>(i)].empty())
      names[static_cast<std::size_t>(i)] = "extra" + std::to_string(i);
  }
  return names;
}

void check(herr_t status, const char* what) {
  if (status < 0) throw std::runtime_error(std::string("raw HDF5: ") + what);
}

}  // namespace

double time_tracer(const TapWorkload& w, int rows_per_step, int commit_every, bool compress,
                   const std::string& path) {
  const std::vector<std::string> names = tap_names(w.taps);
  // (rows_per_step, width): every tap records the same buffer; the writer copies it anyway.
  std::vector<float> rows(static_cast<std::size_t>(rows_per_step) *
                          static_cast<std::size_t>(w.width));
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i % 977) * 0.25f;
  TraceMetadata meta;
  meta.prompt_length = w.positions;
  WriterOptions options;
  options.commit_every = commit_every;
  options.compress = compress;
  const auto start = Clock::now();
  TraceWriter trace(path, meta, options);
  for (int first = 0; first < w.positions; first += rows_per_step) {
    for (int l = 0; l < w.layers; ++l) {
      for (const std::string& name : names) {
        trace.record(name, l, first, rows_per_step, {w.width}, rows.data());
      }
    }
    trace.end_step();
  }
  trace.close();
  return seconds_since(start);
}

double time_raw(const TapWorkload& w, int rows_per_step, const std::string& path) {
  const hsize_t step_rows = static_cast<hsize_t>(w.layers) * static_cast<hsize_t>(w.taps) *
                            static_cast<hsize_t>(rows_per_step);
  const hsize_t width = static_cast<hsize_t>(w.width);
  std::vector<float> rows(step_rows * width);  // (step_rows, width)
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i % 977) * 0.25f;
  const auto start = Clock::now();
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (file < 0) throw std::runtime_error("raw HDF5: cannot create " + path);
  const hsize_t dims[2] = {0, width};
  const hsize_t max_dims[2] = {H5S_UNLIMITED, width};
  const hsize_t chunk[2] = {std::max<hsize_t>(1, 65536 / (width * sizeof(float))), width};
  const hid_t space = H5Screate_simple(2, dims, max_dims);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  check(H5Pset_chunk(dcpl, 2, chunk), "chunk");
  const hid_t data =
      H5Dcreate2(file, "rows", H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  const hid_t mem = H5Screate_simple(2, std::vector<hsize_t>{step_rows, width}.data(), nullptr);
  for (int first = 0; first < w.positions; first += rows_per_step) {
    const hsize_t done = static_cast<hsize_t>(first / rows_per_step) * step_rows;
    const hsize_t extent[2] = {done + step_rows, width};
    check(H5Dset_extent(data, extent), "extent");
    const hid_t file_space = H5Dget_space(data);
    const hsize_t start_row[2] = {done, 0};
    const hsize_t count[2] = {step_rows, width};
    check(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start_row, nullptr, count, nullptr),
          "select");
    check(H5Dwrite(data, H5T_NATIVE_FLOAT, mem, file_space, H5P_DEFAULT, rows.data()), "write");
    H5Sclose(file_space);
    check(H5Fflush(file, H5F_SCOPE_LOCAL), "flush");
  }
  H5Sclose(mem);
  H5Dclose(data);
  H5Pclose(dcpl);
  H5Sclose(space);
  check(H5Fclose(file), "close");
  return seconds_since(start);
}

double disabled_call_ns(const TapWorkload& w, const std::string& kind, std::int64_t calls,
                        const std::string& path) {
  WriterOptions options;
  std::int64_t position = 0;
  if (kind == "name") {
    options.filter = TapFilter::parse("blk.*.no_such_tap*");
  } else if (kind == "layer") {
    options.filter = TapFilter::parse("", std::to_string(w.layers) + "-");
  } else {
    options.filter = TapFilter::parse("", "", "0-3");
    position = 100;
  }
  TraceWriter trace(path, TraceMetadata{}, options);
  const std::vector<std::string> names = tap_names(w.taps);
  std::int64_t enabled = 0;
  const auto start = Clock::now();
  std::int64_t done = 0;
  while (done < calls) {
    for (int l = 0; l < w.layers && done < calls; ++l) {
      for (const std::string& name : names) {
        enabled += trace.enabled(name, l, position) ? 1 : 0;
        ++done;
      }
    }
  }
  const double seconds = seconds_since(start);
  trace.close();
  if (enabled != 0) throw std::runtime_error("a disabled tap reported enabled");
  return seconds * 1e9 / static_cast<double>(done);
}

}  // namespace tapdiff::bench
