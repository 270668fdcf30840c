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

double time_tracer(const TapWorkload& w, int prefill, int rows_per_step, int commit_every, bool compress,
                   const std::string& path) {
  const std::vector<std::string> names = tap_names(w.taps);
  // (rows of the largest step, width): every tap records the same buffer; the writer copies it anyway.
  std::vector<float> rows(static_cast<std::size_t>(std::max(prefill, rows_per_step)) *
                          static_cast<std::size_t>(w.width));
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i % 977) * 0.25f;
  TraceMetadata meta;
  meta.prompt_length = prefill > 0 ? prefill : rows_per_step;  // the first step: sizes the batch chunks
  WriterOptions options;
  options.commit_every = commit_every;
  options.compress = compress;
  const auto start = Clock::now();
  TraceWriter trace(path, meta, options);
  for (int first = 0; first < w.positions;) {
    const int n = first == 0 && prefill > 0 ? prefill : rows_per_step;
    for (int l = 0; l < w.layers; ++l) {
      for (const std::string& name : names) {
        trace.record(name, l, first, n, {w.width}, rows.data());
      }
    }
    trace.end_step();
    first += n;
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

namespace {

// A chunked dataset written without fill values and without a chunk cache (as the tracer
// writes).
hid_t create_chunked(hid_t parent, const char* name, hid_t type, const std::vector<hsize_t>& dims,
                     const std::vector<hsize_t>& max_dims, const std::vector<hsize_t>& chunk) {
  const int rank = static_cast<int>(dims.size());
  const hid_t space = H5Screate_simple(rank, dims.data(), max_dims.data());
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  check(H5Pset_chunk(dcpl, rank, chunk.data()), "chunk");
  check(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER), "fill");
  check(H5Pset_obj_track_times(dcpl, false), "times");
  const hid_t dapl = H5Pcreate(H5P_DATASET_ACCESS);
  check(H5Pset_chunk_cache(dapl, H5D_CHUNK_CACHE_NSLOTS_DEFAULT, 0, H5D_CHUNK_CACHE_W0_DEFAULT),
        "chunk cache");
  const hid_t data = H5Dcreate2(parent, name, type, space, H5P_DEFAULT, dcpl, dapl);
  check(data < 0 ? -1 : 0, "create dataset");
  H5Pclose(dapl);
  H5Pclose(dcpl);
  H5Sclose(space);
  return data;
}

// A float32 or int64 dataset of `rows` x row_dims, extendable along rows, chunked by chunk_rows.
hid_t create_rows(hid_t parent, const char* name, hid_t type, std::vector<hsize_t> row_dims,
                  hsize_t chunk_rows) {
  std::vector<hsize_t> dims{0}, max_dims{H5S_UNLIMITED}, chunk{chunk_rows};
  for (hsize_t d : row_dims) {
    dims.push_back(d);
    max_dims.push_back(d);
    chunk.push_back(d);
  }
  return create_chunked(parent, name, type, dims, max_dims, chunk);
}

// Writes `rows` (n rows of row_dims) at first_row, growing the extent to whole chunks.
void write_rows(hid_t data, hsize_t first_row, hsize_t n, const std::vector<hsize_t>& row_dims,
                hsize_t chunk_rows, hid_t mem_type, const void* rows) {
  std::vector<hsize_t> start{first_row}, count{n};
  for (hsize_t d : row_dims) {
    start.push_back(0);
    count.push_back(d);
  }
  std::vector<hsize_t> extent(count.size());
  hid_t file_space = H5Dget_space(data);
  H5Sget_simple_extent_dims(file_space, extent.data(), nullptr);
  if (first_row + n > extent[0]) {
    H5Sclose(file_space);
    extent[0] = (first_row + n + chunk_rows - 1) / chunk_rows * chunk_rows;
    check(H5Dset_extent(data, extent.data()), "extent");
    file_space = H5Dget_space(data);
  }
  check(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start.data(), nullptr, count.data(),
                            nullptr),
        "select");
  const hid_t mem = H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr);
  check(H5Dwrite(data, mem_type, mem, file_space, H5P_DEFAULT, rows), "write");
  H5Sclose(mem);
  H5Sclose(file_space);
}

// A (layers, rows, width) float32 dataset, extendable along rows, chunked (1, chunk_rows, width).
hid_t create_layer_major(hid_t parent, const char* name, hsize_t layers, hsize_t width, hsize_t chunk_rows) {
  return create_chunked(parent, name, H5T_IEEE_F32LE, {layers, 0, width}, {layers, H5S_UNLIMITED, width},
                        {1, chunk_rows, width});
}

// Rows [first, first + n) of every layer of a create_layer_major dataset, a layer a write, each
// from `rows` ((n, width), as the layer produced them).
void write_layer_major(hid_t data, hsize_t first, hsize_t n, hsize_t layers, hsize_t width, hsize_t chunk_rows,
                       const float* rows) {
  const hsize_t extent[3] = {layers, (first + n + chunk_rows - 1) / chunk_rows * chunk_rows, width};
  check(H5Dset_extent(data, extent), "extent");
  const hid_t file_space = H5Dget_space(data);
  const hsize_t count[3] = {1, n, width};
  const hid_t mem = H5Screate_simple(3, count, nullptr);
  for (hsize_t l = 0; l < layers; ++l) {
    const hsize_t start[3] = {l, first, 0};
    check(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start, nullptr, count, nullptr), "select");
    check(H5Dwrite(data, H5T_NATIVE_FLOAT, mem, file_space, H5P_DEFAULT, rows), "write");
  }
  H5Sclose(mem);
  H5Sclose(file_space);
}

void write_attr(hid_t object, const char* name, hid_t type, hsize_t n, const void* value) {
  const hid_t space = n == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, nullptr);
  const hid_t attr = H5Acreate2(object, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  check(H5Awrite(attr, type, value), "attribute");
  H5Aclose(attr);
  H5Sclose(space);
}

// The tap group's attributes as the schema has them: name, layer, row_shape, index.
void write_tap_attrs(hid_t group, const std::string& name, std::int64_t layer,
                     std::int64_t width, std::int64_t index) {
  const hid_t str = H5Tcopy(H5T_C_S1);
  H5Tset_size(str, name.size());
  write_attr(group, "name", str, 0, name.data());
  H5Tclose(str);
  write_attr(group, "layer", H5T_NATIVE_INT64, 0, &layer);
  write_attr(group, "row_shape", H5T_NATIVE_INT64, 1, &width);
  write_attr(group, "index", H5T_NATIVE_INT64, 0, &index);
}

}  // namespace

double time_raw_layout(const TapWorkload& w, int rows_per_step, RawLayout layout,
                       const std::string& path) {
  const std::vector<std::string> names = tap_names(w.taps);
  const hsize_t width = static_cast<hsize_t>(w.width);
  const hsize_t layers = static_cast<hsize_t>(w.layers);
  const hsize_t per_step = static_cast<hsize_t>(rows_per_step);
  const std::int64_t n_taps = std::int64_t{w.layers} * w.taps;
  // Every tap records the same rows; the per-name layout writes (rows, layers, width) blocks.
  std::vector<float> rows(per_step * layers * width);
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i % 977) * 0.25f;
  const std::vector<std::int64_t> counts(static_cast<std::size_t>(n_taps) * 2, 1);
  const std::int64_t first_run[2] = {0, 0};

  const auto start = Clock::now();
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (file < 0) throw std::runtime_error("raw HDF5: cannot create " + path);
  const hid_t taps = H5Gcreate2(file, "taps", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  const hid_t committed = create_rows(file, "committed", H5T_STD_I64LE, {2}, 256);
  std::vector<hid_t> groups, data, runs;
  const hsize_t tap_chunk = std::max<hsize_t>(1, 65536 / (width * sizeof(float)));
  const hsize_t layer_chunk = std::max(tap_chunk, per_step);
  if (layout == RawLayout::per_tap) {
    for (int l = 0; l < w.layers; ++l) {
      for (const std::string& name : names) {
        const std::string full = "blk." + std::to_string(l) + "." + name;
        groups.push_back(H5Gcreate2(taps, full.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
        write_tap_attrs(groups.back(), name, l, w.width, std::int64_t(groups.size()) - 1);
        data.push_back(create_rows(groups.back(), "data", H5T_IEEE_F32LE, {width}, tap_chunk));
        runs.push_back(create_rows(groups.back(), "runs", H5T_STD_I64LE, {2}, 64));
      }
    }
  } else {
    for (const std::string& name : names) {
      groups.push_back(H5Gcreate2(taps, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
      write_tap_attrs(groups.back(), name, -1, w.width, std::int64_t(groups.size()) - 1);
      data.push_back(layout == RawLayout::layer_major
                         ? create_layer_major(groups.back(), "data", layers, width, layer_chunk)
                         : create_rows(groups.back(), "data", H5T_IEEE_F32LE, {layers, width}, 1));
      runs.push_back(create_rows(groups.back(), "runs", H5T_STD_I64LE, {2}, 64));
    }
  }
  for (hsize_t first = 0; first < static_cast<hsize_t>(w.positions); first += per_step) {
    for (std::size_t i = 0; i < data.size(); ++i) {
      if (layout == RawLayout::per_tap) {
        write_rows(data[i], first, per_step, {width}, tap_chunk, H5T_NATIVE_FLOAT, rows.data());
      } else if (layout == RawLayout::layer_major) {
        write_layer_major(data[i], first, per_step, layers, width, layer_chunk, rows.data());
      } else {
        write_rows(data[i], first, per_step, {layers, width}, 1, H5T_NATIVE_FLOAT, rows.data());
      }
      if (first == 0) write_rows(runs[i], 0, 1, {2}, 64, H5T_NATIVE_INT64, first_run);
    }
    check(H5Fflush(file, H5F_SCOPE_LOCAL), "flush");
    write_rows(committed, 0, static_cast<hsize_t>(n_taps), {2}, 256, H5T_NATIVE_INT64,
               counts.data());
    check(H5Fflush(file, H5F_SCOPE_LOCAL), "flush");
  }
  for (std::size_t i = 0; i < data.size(); ++i) {
    H5Dclose(runs[i]);
    H5Dclose(data[i]);
    H5Gclose(groups[i]);
  }
  H5Dclose(committed);
  H5Gclose(taps);
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
