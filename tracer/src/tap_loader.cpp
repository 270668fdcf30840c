#include "tap_loader.hpp"

#include <algorithm>

#include "h5_attr.hpp"
#include "schema.hpp"
#include "tapdiff/row_shape.hpp"

namespace tapdiff {
namespace {

namespace sc = schema;

std::vector<std::string> group_members(hid_t group, const h5::Where& where) {
  std::vector<std::string> names;
  auto visit = [](hid_t, const char* name, const H5L_info_t*, void* data) -> herr_t {
    static_cast<std::vector<std::string>*>(data)->emplace_back(name);
    return 0;
  };
  hsize_t index = 0;
  h5::check(H5Literate(group, H5_INDEX_NAME, H5_ITER_INC, &index, visit, &names), where,
            "cannot list the taps");
  return names;
}

std::string dims_text(const std::vector<hsize_t>& dims) {
  std::vector<std::int64_t> v(dims.begin(), dims.end());
  return shape_string(v);
}

// Runs must start at row 0, cover increasing rows and increasing positions.
std::vector<PositionRun> validate_runs(const std::vector<std::int64_t>& raw, std::int64_t n_rows,
                                       const h5::Where& where) {
  std::vector<PositionRun> runs;
  const std::size_t n = raw.size() / 2;
  for (std::size_t i = 0; i < n; ++i) {
    PositionRun run{raw[2 * i], raw[2 * i + 1], 0};
    const std::int64_t end = i + 1 < n ? raw[2 * (i + 1)] : n_rows;
    // Bounds before any arithmetic on them: corrupt values must not overflow.
    if (run.first_row < 0 || run.first_row >= n_rows || end < 0 || end > n_rows ||
        run.first_position < 0 || run.first_position >= kTraceMaxPositions) {
      throw TraceError(where.file, where.object,
                       "run " + std::to_string(i) + " (first_row " + std::to_string(run.first_row) +
                           ", first_position " + std::to_string(run.first_position) +
                           "): expected a row in 0.." + std::to_string(n_rows - 1) +
                           " and a position in 0.." + std::to_string(kTraceMaxPositions - 1));
    }
    run.n_rows = end - run.first_row;
    const bool first_ok = i > 0 || run.first_row == 0;
    const bool position_ok =
        run.first_position >= 0 &&
        (runs.empty() || run.first_position > runs.back().first_position + runs.back().n_rows - 1);
    if (!first_ok || run.n_rows < 1 || !position_ok) {
      throw TraceError(where.file, where.object,
                       "run " + std::to_string(i) + " (first_row " + std::to_string(run.first_row) +
                           ", first_position " + std::to_string(run.first_position) +
                           "): expected rows and positions to increase from row 0");
    }
    runs.push_back(run);
  }
  return runs;
}

std::vector<std::int64_t> read_runs(hid_t group, std::int64_t n_runs, const h5::Where& where) {
  const h5::Id runs = open_dataset(group, sc::kTapRuns, where, H5T_INTEGER, 0, "integers");
  const std::vector<hsize_t> dims = dataset_dims(runs.get(), where);
  if (dims.size() != 2 || dims[1] != 2) {
    throw TraceError(where.file, where.object, "expected shape [*, 2], got " + dims_text(dims));
  }
  if (static_cast<hsize_t>(n_runs) > dims[0]) {
    throw TraceError(where.file, where.object,
                     "committed runs " + std::to_string(n_runs) + " exceed its " +
                         std::to_string(dims[0]) + " rows");
  }
  std::vector<std::int64_t> raw(static_cast<std::size_t>(n_runs) * 2);
  if (n_runs == 0) return raw;
  const h5::Id space = h5::space_id(H5Dget_space(runs.get()), where, "cannot read");
  const hsize_t start[2] = {0, 0};
  const hsize_t count[2] = {static_cast<hsize_t>(n_runs), 2};
  h5::check(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr), where,
            "cannot select runs");
  const h5::Id mem = h5::space_id(H5Screate_simple(2, count, nullptr), where, "cannot read");
  h5::check(H5Dread(runs.get(), H5T_NATIVE_INT64, mem.get(), space.get(), H5P_DEFAULT, raw.data()),
            where, "cannot read the committed runs");
  return raw;
}

bool load_tap(hid_t taps, const std::string& member, const std::string& path,
              const std::vector<std::int64_t>& committed, bool complete, TapInfo& tap) {
  const std::string object = std::string("/") + sc::kTaps + "/" + member;
  const h5::Where where{path, object};
  const h5::Id group = h5::group_id(H5Gopen2(taps, member.c_str(), H5P_DEFAULT), where,
                                    "cannot open (is it a group?)");
  if (!complete && !h5::has_attr(group.get(), sc::kTapIndex)) return false;
  const std::int64_t index = h5::read_int_attr(group.get(), sc::kTapIndex, where);
  const std::int64_t n_taps = static_cast<std::int64_t>(committed.size() / 2);
  if (index < 0 || index >= n_taps) {
    if (!complete) return false;
    throw TraceError(path, object,
                     "attribute 'index': " + std::to_string(index) + " is outside /committed (" +
                         std::to_string(n_taps) + " taps)");
  }
  tap.n_rows = committed[static_cast<std::size_t>(index) * 2];
  const std::int64_t n_runs = committed[static_cast<std::size_t>(index) * 2 + 1];
  if (tap.n_rows <= 0 && !complete) return false;
  if (tap.n_rows > kTraceMaxPositions) {
    throw TraceError(path, "/committed",
                     "row " + std::to_string(index) + " (" + member + "): " +
                         std::to_string(tap.n_rows) + " committed positions is more than the " +
                         std::to_string(kTraceMaxPositions) +
                         " this reader accepts (refused before reading)");
  }
  if (tap.n_rows < 0 || n_runs < 0 || (tap.n_rows > 0) != (n_runs > 0) || n_runs > tap.n_rows) {
    throw TraceError(path, "/committed",
                     "row " + std::to_string(index) + " (" + member +
                         "): inconsistent counts: " + std::to_string(tap.n_rows) + " rows in " +
                         std::to_string(n_runs) + " runs");
  }

  tap.name = h5::read_string_attr(group.get(), sc::kTapName, where);
  const std::int64_t layer = h5::read_int_attr(group.get(), sc::kTapLayer, where);
  if (layer < -1 || layer > 1'000'000) {
    throw TraceError(
        path, object,
        "attribute 'layer': expected -1 or a layer index, got " + std::to_string(layer));
  }
  tap.layer = static_cast<int>(layer);
  tap.full_name = full_tap_name(tap.name, tap.layer);
  if (tap.full_name != member) {
    throw TraceError(path, object,
                     "name '" + tap.name + "' and layer " + std::to_string(layer) + " make '" +
                         tap.full_name + "', not the group's name");
  }
  tap.row_shape = h5::read_int_array_attr(group.get(), sc::kTapRowShape, where);
  if (tap.row_shape.empty() || tap.row_shape.size() > RowShape::kMaxRank ||
      std::any_of(tap.row_shape.begin(), tap.row_shape.end(),
                  [](std::int64_t d) { return d < 1; })) {
    throw TraceError(path, object,
                     "attribute 'row_shape': expected 1 to 4 dimensions >= 1, got " +
                         shape_string(tap.row_shape));
  }
  tap.row_size = 1;
  for (std::int64_t d : tap.row_shape) {
    if (d > kTraceMaxRowElements / tap.row_size) {
      throw TraceError(path, object,
                       "attribute 'row_shape': " + shape_string(tap.row_shape) +
                           " is more than the " + std::to_string(kTraceMaxRowElements) +
                           " elements per row this reader accepts");
    }
    tap.row_size *= d;
  }

  const h5::Where data_where{path, object + "/" + sc::kTapData};
  const h5::Id data = open_dataset(group.get(), sc::kTapData, data_where, H5T_FLOAT, 4, "float32");
  const std::vector<hsize_t> dims = dataset_dims(data.get(), data_where);
  if (dims.size() != tap.row_shape.size() + 1) {
    throw TraceError(path, data_where.object,
                     "expected rank " + std::to_string(tap.row_shape.size() + 1) + ", got " +
                         std::to_string(dims.size()));
  }
  for (std::size_t i = 0; i < tap.row_shape.size(); ++i) {
    if (dims[i + 1] != static_cast<hsize_t>(tap.row_shape[i])) {
      throw TraceError(path, data_where.object,
                       "expected shape [*, " + shape_string(tap.row_shape).substr(1) + ", got " +
                           dims_text(dims) + " (row_shape attribute " +
                           shape_string(tap.row_shape) + ")");
    }
  }
  if (static_cast<hsize_t>(tap.n_rows) > dims[0]) {
    throw TraceError(path, data_where.object,
                     "committed rows " + std::to_string(tap.n_rows) + " exceed its " +
                         std::to_string(dims[0]) + " rows");
  }
  const double claimed_bytes = double(tap.n_rows) * double(tap.row_size) * sizeof(float);
  const hsize_t stored_bytes = H5Dget_storage_size(data.get());
  if (claimed_bytes > double(kTraceMaxExpansion) * double(stored_bytes)) {
    throw TraceError(path, data_where.object,
                     "committed rows " + std::to_string(tap.n_rows) + " of " +
                         std::to_string(tap.row_size) + " floats need " +
                         std::to_string(static_cast<std::int64_t>(claimed_bytes)) +
                         " bytes, but the file stores only " + std::to_string(stored_bytes) +
                         " for this dataset (a corrupt count, refused before reading)");
  }
  const h5::Where runs_where{path, object + "/" + sc::kTapRuns};
  tap.runs = validate_runs(read_runs(group.get(), n_runs, runs_where), tap.n_rows, runs_where);
  return tap.n_rows > 0;
}

}  // namespace

std::vector<hsize_t> dataset_dims(hid_t dataset, const h5::Where& where) {
  const h5::Id space = h5::space_id(H5Dget_space(dataset), where, "cannot read the dataspace");
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) h5::fail(where, "cannot read the dataspace");
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  if (rank > 0 && H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0) {
    h5::fail(where, "cannot read the dataspace");
  }
  return dims;
}

h5::Id open_dataset(hid_t location, const char* name, const h5::Where& where,
                    H5T_class_t expected_class, std::size_t expected_size, const char* type_text) {
  if (!h5::link_exists(location, name))
    throw TraceError(where.file, where.object, "missing dataset");
  h5::Id dataset = h5::dataset_id(H5Dopen2(location, name, H5P_DEFAULT), where,
                                  "cannot open (is it a dataset?)");
  const h5::Id type = h5::type_id(H5Dget_type(dataset.get()), where, "cannot read the type");
  const bool class_ok = H5Tget_class(type.get()) == expected_class;
  if (!class_ok || (expected_size != 0 && H5Tget_size(type.get()) != expected_size)) {
    throw TraceError(where.file, where.object,
                     std::string("expected ") + type_text + " elements, got " +
                         (H5Tget_class(type.get()) == H5T_FLOAT     ? "float"
                          : H5Tget_class(type.get()) == H5T_INTEGER ? "integer"
                                                                    : "other") +
                         " of " + std::to_string(H5Tget_size(type.get())) + " bytes");
  }
  return dataset;
}

std::vector<TapInfo> load_taps(hid_t file, const std::string& path,
                               const std::vector<std::int64_t>& committed, bool complete) {
  const h5::Where where{path, std::string("/") + sc::kTaps};
  if (!h5::link_exists(file, sc::kTaps)) throw TraceError(path, where.object, "missing group");
  const h5::Id taps =
      h5::group_id(H5Gopen2(file, sc::kTaps, H5P_DEFAULT), where, "cannot open (is it a group?)");
  std::vector<TapInfo> result;
  for (const std::string& member : group_members(taps.get(), where)) {
    TapInfo tap;
    if (load_tap(taps.get(), member, path, committed, complete, tap))
      result.push_back(std::move(tap));
  }
  return result;
}

}  // namespace tapdiff
