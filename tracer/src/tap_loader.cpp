#include "tap_loader.hpp"

#include <algorithm>
#include <map>

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
// tap: "slot 0 (blk.0.attn_q): ", which slot's runs these are.
std::vector<PositionRun> validate_runs(const std::vector<std::int64_t>& raw, std::int64_t n_rows,
                                       const h5::Where& where, const std::string& tap) {
  std::vector<PositionRun> runs;
  const std::size_t n = raw.size() / 2;
  for (std::size_t i = 0; i < n; ++i) {
    PositionRun run{raw[2 * i], raw[2 * i + 1], 0};
    const std::int64_t end = i + 1 < n ? raw[2 * (i + 1)] : n_rows;
    // Bounds before any arithmetic on them: corrupt values must not overflow.
    if (run.first_row < 0 || run.first_row >= n_rows || end < 0 || end > n_rows ||
        run.first_position < 0 || run.first_position >= kTraceMaxPositions) {
      throw TraceError(where.file, where.object,
                       tap + "run " + std::to_string(i) + " (first_row " +
                           std::to_string(run.first_row) + ", first_position " +
                           std::to_string(run.first_position) + "): expected a row in 0.." + std::to_string(n_rows - 1) +
                           " and a position in 0.." + std::to_string(kTraceMaxPositions - 1));
    }
    run.n_rows = end - run.first_row;
    const bool first_ok = i > 0 || run.first_row == 0;
    const bool position_ok =
        run.first_position >= 0 &&
        (runs.empty() || run.first_position > runs.back().first_position + runs.back().n_rows - 1);
    if (!first_ok || run.n_rows < 1 || !position_ok) {
      throw TraceError(where.file, where.object,
                       tap + "run " + std::to_string(i) + " (first_row " +
                           std::to_string(run.first_row) + ", first_position " +
                           std::to_string(run.first_position) +
                           "): expected rows and positions to increase from row 0");
    }
    runs.push_back(run);
  }
  return runs;
}

// runs[:n_runs, :n_slots] as (n_runs, n_slots, 2) values.
std::vector<std::int64_t> read_runs(hid_t group, std::int64_t n_runs, std::size_t n_slots,
                                    const h5::Where& where) {
  const h5::Id runs = open_dataset(group, sc::kTapRuns, where, H5T_INTEGER, 0, "integers");
  const std::vector<hsize_t> dims = dataset_dims(runs.get(), where);
  if (dims.size() != 3 || dims[1] < n_slots || dims[2] != 2) {
    throw TraceError(where.file, where.object,
                     "expected shape [*, >= " + std::to_string(n_slots) + " slots, 2], got " +
                         dims_text(dims));
  }
  if (static_cast<hsize_t>(n_runs) > dims[0]) {
    throw TraceError(where.file, where.object,
                     "committed runs " + std::to_string(n_runs) + " exceed its " +
                         std::to_string(dims[0]) + " rows");
  }
  std::vector<std::int64_t> raw(static_cast<std::size_t>(n_runs) * n_slots * 2);
  if (n_runs == 0) return raw;
  const h5::Id space = h5::space_id(H5Dget_space(runs.get()), where, "cannot read");
  const hsize_t start[3] = {0, 0, 0};
  const hsize_t count[3] = {static_cast<hsize_t>(n_runs), n_slots, 2};
  h5::check(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr), where,
            "cannot select runs");
  const h5::Id mem = h5::space_id(H5Screate_simple(3, count, nullptr), where, "cannot read");
  h5::check(H5Dread(runs.get(), H5T_NATIVE_INT64, mem.get(), space.get(), H5P_DEFAULT, raw.data()),
            where, "cannot read the committed runs");
  return raw;
}

std::vector<std::int64_t> read_row_shape(hid_t group, const h5::Where& where) {
  std::vector<std::int64_t> shape = h5::read_int_array_attr(group, sc::kTapRowShape, where);
  if (shape.empty() || shape.size() > RowShape::kMaxRank ||
      std::any_of(shape.begin(), shape.end(), [](std::int64_t d) { return d < 1; })) {
    throw TraceError(where.file, where.object,
                     "attribute 'row_shape': expected 1 to 4 dimensions >= 1, got " +
                         shape_string(shape));
  }
  std::int64_t size = 1;
  for (std::int64_t d : shape) {
    if (d > kTraceMaxRowElements / size) {
      throw TraceError(where.file, where.object,
                       "attribute 'row_shape': " + shape_string(shape) + " is more than the " +
                           std::to_string(kTraceMaxRowElements) +
                           " elements per row this reader accepts");
    }
    size *= d;
  }
  return shape;
}

// The group of a stack is named after its tap name, with "#<k>" for a further row shape.
void check_stack_name(const std::string& member, const std::string& name, const h5::Where& where) {
  const bool plain = member == name;
  const bool numbered = member.size() > name.size() + 1 && member.compare(0, name.size(), name) == 0 &&
                        member[name.size()] == sc::kStackSuffix &&
                        std::all_of(member.begin() + static_cast<std::ptrdiff_t>(name.size()) + 1,
                                    member.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!plain && !numbered) {
    throw TraceError(where.file, where.object,
                     "attribute 'name': '" + name + "' does not name this group (expected '" +
                         name + "' or '" + name + sc::kStackSuffix + "<k>')");
  }
}

struct SlotAttrs {
  std::vector<std::int64_t> layers;
  std::vector<std::int64_t> index;
};

SlotAttrs read_slots(hid_t group, const std::string& name, const h5::Where& where) {
  SlotAttrs slots{h5::read_int_array_attr(group, sc::kTapLayers, where),
                  h5::read_int_array_attr(group, sc::kTapIndex, where)};
  if (slots.layers.size() != slots.index.size() || slots.layers.empty()) {
    throw TraceError(where.file, where.object,
                     "attributes 'layers' and 'index': expected one value per slot in each, got " +
                         std::to_string(slots.layers.size()) + " and " +
                         std::to_string(slots.index.size()));
  }
  const bool blk_name = name.compare(0, 4, "blk.") == 0;
  for (std::size_t i = 0; i < slots.layers.size(); ++i) {
    const std::int64_t layer = slots.layers[i];
    if (layer < -1 || layer > 1'000'000 || (layer == -1 && blk_name)) {
      throw TraceError(where.file, where.object,
                       "attribute 'layers': slot " + std::to_string(i) +
                           ": expected a layer index" + (blk_name ? "" : " or -1") + ", got " +
                           std::to_string(layer));
    }
    if (std::find(slots.layers.begin(), slots.layers.begin() + static_cast<std::ptrdiff_t>(i),
                  layer) != slots.layers.begin() + static_cast<std::ptrdiff_t>(i)) {
      throw TraceError(where.file, where.object,
                       "attribute 'layers': layer " + std::to_string(layer) +
                           " appears in two slots");
    }
  }
  return slots;
}

// `data` (rows, slots, *row_shape) or, slot-major, `batch` (slots, rows, *row_shape).
h5::Id open_rows(hid_t group, const char* name, bool slot_major, const std::vector<std::int64_t>& row_shape,
                 std::size_t n_slots, const h5::Where& where) {
  h5::Id data = open_dataset(group, name, where, H5T_FLOAT, 4, "float32");
  const std::vector<hsize_t> dims = dataset_dims(data.get(), where);
  const std::size_t slot_dim = slot_major ? 0 : 1;
  bool ok = dims.size() == row_shape.size() + 2 && dims[slot_dim] >= n_slots;
  for (std::size_t i = 0; ok && i < row_shape.size(); ++i) {
    ok = dims[i + 2] == static_cast<hsize_t>(row_shape[i]);
  }
  if (!ok) {
    throw TraceError(where.file, where.object,
                     "expected shape " +
                         (slot_major ? "[>= " + std::to_string(n_slots) + " slots, *, "
                                     : "[*, >= " + std::to_string(n_slots) + " slots, ") +
                         shape_string(row_shape).substr(1) + ", got " + dims_text(dims) +
                         " (row_shape attribute " + shape_string(row_shape) + ")");
  }
  return data;
}

// The rows of a slot one chunk of a slot-major dataset holds (its second dimension); 0 when it
// is not chunked.
std::int64_t chunk_rows_of(hid_t dataset, std::size_t rank, const h5::Where& where) {
  const h5::Id dcpl = h5::plist_id(H5Dget_create_plist(dataset), where, "cannot read");
  std::vector<hsize_t> chunk(rank);
  if (rank < 2 || H5Pget_chunk(dcpl.get(), int(rank), chunk.data()) != int(rank)) return 0;
  return std::int64_t(chunk[1]);
}

// Appends the taps of one stack: slots with committed rows. In an incomplete trace, a stack
// or slot created in the interrupted step is left out.
void load_stack(hid_t taps, const std::string& member, const std::string& path,
                const std::vector<std::int64_t>& committed, std::size_t width, bool complete,
                std::vector<std::string>& index_owner, std::vector<TapInfo>& out) {
  const std::string object = std::string("/") + sc::kTaps + "/" + member;
  const h5::Where where{path, object};
  const h5::Id group = h5::group_id(H5Gopen2(taps, member.c_str(), H5P_DEFAULT), where,
                                    "cannot open (is it a group?)");
  if (!complete && !h5::has_attr(group.get(), sc::kTapIndex)) return;
  const std::string name = h5::read_string_attr(group.get(), sc::kTapName, where);
  check_stack_name(member, name, where);
  const std::vector<std::int64_t> row_shape = read_row_shape(group.get(), where);
  const SlotAttrs slots = read_slots(group.get(), name, where);
  const std::size_t n_slots = slots.layers.size();

  struct Counts {
    std::int64_t rows = 0;
    std::int64_t runs = 0;
    std::int64_t batch = 0;
  };
  std::vector<Counts> counts(n_slots);
  const std::int64_t n_taps = static_cast<std::int64_t>(committed.size() / width);
  for (std::size_t i = 0; i < n_slots; ++i) {
    const std::int64_t index = slots.index[i];
    const std::string tap = full_tap_name(name, static_cast<int>(slots.layers[i]));
    if (index < 0 || index >= n_taps) {
      if (!complete) continue;
      throw TraceError(path, object,
                       "attribute 'index': slot " + std::to_string(i) + " (" + tap + "): " +
                           std::to_string(index) + " is outside /committed (" +
                           std::to_string(n_taps) + " taps)");
    }
    std::string& owner = index_owner[static_cast<std::size_t>(index)];
    if (!owner.empty()) {
      throw TraceError(path, object,
                       "attribute 'index': slot " + std::to_string(i) + " (" + tap + ") has index " +
                           std::to_string(index) + ", already that of " + owner);
    }
    owner = tap;
    Counts& c = counts[i];
    const std::size_t at = static_cast<std::size_t>(index) * width;
    c.rows = committed[at];
    c.runs = committed[at + 1];
    if (width > 2) c.batch = committed[at + 2];
    if (c.rows > kTraceMaxPositions) {
      throw TraceError(path, "/committed",
                       "row " + std::to_string(index) + " (" + tap + "): " +
                           std::to_string(c.rows) + " committed positions is more than the " +
                           std::to_string(kTraceMaxPositions) +
                           " this reader accepts (refused before reading)");
    }
    if (c.rows < 0 || c.runs < 0 || (c.rows > 0) != (c.runs > 0) || c.runs > c.rows) {
      throw TraceError(path, "/committed",
                       "row " + std::to_string(index) + " (" + tap + "): inconsistent counts: " +
                           std::to_string(c.rows) + " rows in " + std::to_string(c.runs) +
                           " runs");
    }
    if (c.batch < 0 || c.batch > c.rows) {
      throw TraceError(path, "/committed",
                       "row " + std::to_string(index) + " (" + tap + "): " + std::to_string(c.batch) +
                           " rows in the stack's batch, expected 0 to its " + std::to_string(c.rows) +
                           " rows");
    }
  }

  std::int64_t row_size = 1;
  for (std::int64_t d : row_shape) row_size *= d;
  const h5::Where data_where{path, object + "/" + sc::kTapData};
  const h5::Id data = open_rows(group.get(), sc::kTapData, false, row_shape, n_slots, data_where);
  const std::vector<hsize_t> dims = dataset_dims(data.get(), data_where);
  const h5::Where batch_where{path, object + "/" + sc::kTapBatch};
  h5::Id batch;
  std::vector<hsize_t> batch_dims;
  std::int64_t batch_chunk_rows = 0;
  std::int64_t max_runs = 0;
  double claimed_bytes = 0;
  for (std::size_t i = 0; i < n_slots; ++i) {
    const Counts& c = counts[i];
    if (c.rows > c.batch && static_cast<hsize_t>(c.rows) > dims[0]) {
      throw TraceError(path, data_where.object,
                       "slot " + std::to_string(i) + ": committed rows " + std::to_string(c.rows) + " exceed its " +
                           std::to_string(dims[0]) + " rows");
    }
    if (c.batch > 0 && !batch.valid()) {
      batch = open_rows(group.get(), sc::kTapBatch, true, row_shape, n_slots, batch_where);
      batch_dims = dataset_dims(batch.get(), batch_where);
      batch_chunk_rows = chunk_rows_of(batch.get(), batch_dims.size(), batch_where);
    }
    if (c.batch > 0 && static_cast<hsize_t>(c.batch) > batch_dims[1]) {
      throw TraceError(path, batch_where.object,
                       "slot " + std::to_string(i) + ": committed batch rows " + std::to_string(c.batch) +
                           " exceed its " + std::to_string(batch_dims[1]) + " rows");
    }
    max_runs = std::max(max_runs, c.runs);
    claimed_bytes += double(c.rows) * double(row_size) * sizeof(float);
  }
  const hsize_t stored_bytes =
      H5Dget_storage_size(data.get()) + (batch.valid() ? H5Dget_storage_size(batch.get()) : 0);
  if (claimed_bytes > double(kTraceMaxExpansion) * double(stored_bytes)) {
    throw TraceError(path, data_where.object,
                     "committed rows of " + std::to_string(row_size) + " floats need " +
                         std::to_string(static_cast<std::int64_t>(claimed_bytes)) +
                         " bytes, but the file stores only " + std::to_string(stored_bytes) +
                         " for this dataset (a corrupt count, refused before reading)");
  }
  const h5::Where runs_where{path, object + "/" + sc::kTapRuns};
  const std::vector<std::int64_t> runs = read_runs(group.get(), max_runs, n_slots, runs_where);
  for (std::size_t i = 0; i < n_slots; ++i) {
    if (counts[i].rows <= 0) continue;
    TapInfo tap;
    tap.name = name;
    tap.layer = static_cast<int>(slots.layers[i]);
    tap.full_name = full_tap_name(name, tap.layer);
    tap.stack = member;
    tap.slot = i;
    tap.row_shape = row_shape;
    tap.row_size = row_size;
    tap.stored_shape = row_shape;
    tap.stored_size = row_size;
    tap.n_rows = counts[i].rows;
    tap.batch_rows = counts[i].batch;
    if (tap.batch_rows > 0) tap.batch_chunk_rows = batch_chunk_rows;
    std::vector<std::int64_t> raw(static_cast<std::size_t>(counts[i].runs) * 2);
    for (std::size_t r = 0; r < raw.size() / 2; ++r) {
      raw[2 * r] = runs[(r * n_slots + i) * 2];
      raw[2 * r + 1] = runs[(r * n_slots + i) * 2 + 1];
    }
    tap.runs = validate_runs(raw, tap.n_rows, runs_where,
                             "slot " + std::to_string(i) + " (" + tap.full_name + "): ");
    out.push_back(std::move(tap));
  }
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

std::vector<TapInfo> load_taps(hid_t file, const std::string& path, const std::vector<std::int64_t>& committed,
                               std::size_t width, bool complete) {
  const h5::Where where{path, std::string("/") + sc::kTaps};
  if (!h5::link_exists(file, sc::kTaps)) throw TraceError(path, where.object, "missing group");
  const h5::Id taps =
      h5::group_id(H5Gopen2(file, sc::kTaps, H5P_DEFAULT), where, "cannot open (is it a group?)");
  std::vector<TapInfo> result;
  std::vector<std::string> index_owner(committed.size() / width);
  for (const std::string& member : group_members(taps.get(), where)) {
    load_stack(taps.get(), member, path, committed, width, complete, index_owner, result);
  }
  // A tap lives in one slot, and each slot counts its rows in its own row of /committed.
  std::map<std::string, const TapInfo*> by_name;
  for (const TapInfo& t : result) {
    const auto [it, fresh] = by_name.emplace(t.full_name, &t);
    if (!fresh) {
      throw TraceError(path, where.object + "/" + t.stack,
                       "tap " + t.full_name + " is also in slot " + std::to_string(it->second->slot) +
                           " of /taps/" + it->second->stack);
    }
  }
  return result;
}

}  // namespace tapdiff
