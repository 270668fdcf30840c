#include "tapdiff/trace_reader.hpp"

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <tuple>

#include "h5.hpp"
#include "tapdiff/row_shape.hpp"
#include "metadata_io.hpp"
#include "schema.hpp"
#include "stack_reader.hpp"
#include "tap_loader.hpp"

namespace tapdiff {
namespace {

namespace sc = schema;

h5::Id open_file(const std::string& path) {
  const h5::Where root{path, "/"};
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw TraceError(path, "/", "no such file");
  if (std::filesystem::is_directory(path, ec)) throw TraceError(path, "/", "is a directory");
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    H5Eclear2(H5E_DEFAULT);
    throw TraceError(path, "/", "not an HDF5 file (or unreadable)");
  }
  const h5::Id fapl = h5::plist_id(H5Pcreate(H5P_FILE_ACCESS), root, "cannot create");
  // A trace may still be open in its writer (which takes no lock either).
  h5::check(H5Pset_file_locking(fapl.get(), false, true), root, "cannot disable file locking");
  return h5::file_id(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()), root,
                     "cannot open the trace file");
}

// Reads rows [0, n) (n < 0: all rows) of an integer dataset whose rows hold `width` values,
// after checking it has at least n rows of that width and n is at most `max_rows`.
std::vector<std::int64_t> read_committed_ints(hid_t file, const char* name, std::size_t width,
                                              std::int64_t n, std::int64_t max_rows,
                                              const std::string& path) {
  const h5::Where where{path, std::string("/") + name};
  const h5::Id ds = open_dataset(file, name, where, H5T_INTEGER, 0, "integer");
  const std::vector<hsize_t> dims = dataset_dims(ds.get(), where);
  const std::size_t rank = width == 1 ? 1 : 2;
  if (dims.size() != rank || (rank == 2 && dims[1] != width)) {
    throw TraceError(
        path, where.object,
        rank == 1 ? "expected a 1-D dataset" : "expected shape [*, " + std::to_string(width) + "]");
  }
  const bool all_rows = n < 0;
  if (all_rows ? dims[0] > static_cast<hsize_t>(max_rows) : n > max_rows) {
    throw TraceError(path, where.object,
                     (all_rows ? std::to_string(dims[0]) + " rows"
                               : "a committed count of " + std::to_string(n)) +
                         " is more than the " + std::to_string(max_rows) +
                         " this reader accepts (refused before reading)");
  }
  if (all_rows) n = static_cast<std::int64_t>(dims[0]);
  if (static_cast<hsize_t>(n) > dims[0]) {
    throw TraceError(path, where.object,
                     "committed count " + std::to_string(n) + " exceeds its " +
                         std::to_string(dims[0]) + " rows");
  }
  std::vector<std::int64_t> values(static_cast<std::size_t>(n) * width);
  if (n == 0) return values;
  const h5::Id space = h5::space_id(H5Dget_space(ds.get()), where, "cannot read");
  const hsize_t start[2] = {0, 0};
  const hsize_t count[2] = {static_cast<hsize_t>(n), width};
  h5::check(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr), where,
            "cannot select rows");
  const h5::Id mem =
      h5::space_id(H5Screate_simple(static_cast<int>(rank), count, nullptr), where, "cannot read");
  h5::check(H5Dread(ds.get(), H5T_NATIVE_INT64, mem.get(), space.get(), H5P_DEFAULT, values.data()),
            where, "cannot read rows 0.." + std::to_string(n - 1));
  return values;
}

// The tap read through `alignment`: its rows as aligned.
void read_aligned(TapInfo& t, std::shared_ptr<const RowAlignment> alignment) {
  t.row_shape = alignment->row_shape;
  t.row_size = 1;
  for (std::int64_t d : t.row_shape) t.row_size *= d;
  t.alignment = std::move(alignment);
}

// Taps the producer stores in a declared layout (/layouts) read as the catalogue lays them out.
// A layout that contradicts the rows' stored shape is not applied: the shape then differs
// from the other trace's, and diff reports that with the note.
void align_declared_layouts(const TraceMetadata& m, const std::string& path, std::vector<TapInfo>& taps) {
  if (m.layouts.empty()) return;
  const std::string where = std::string("/") + sc::kLayouts;
  if (!m.dims || !m.dims->complete())
    throw TraceError(path, where, "a layout is declared in the model's dimensions: expected a complete /dims group");
  struct Declared {
    const TapSpec* spec;
    std::vector<std::int64_t> stored_shape;
    std::shared_ptr<const RowAlignment> alignment;  // made for the first tap stored so
  };
  std::map<std::string, Declared> by_name;
  for (const auto& [name, layout] : m.layouts) {
    const TapSpec* spec = find_tap_spec(name);
    if (!spec) throw TraceError(path, where, "attribute '" + name + "': expected a tap of the catalogue (docs/taps.md)");
    try {
      by_name[name] = {spec, stored_row_shape(*spec, layout, *m.dims), nullptr};
    } catch (const std::invalid_argument& e) {
      throw TraceError(path, where, "attribute '" + name + "' (\"" + layout.to_string() + "\"): " + e.what());
    }
  }
  for (TapInfo& t : taps) {
    const auto it = by_name.find(t.name);
    if (it == by_name.end()) continue;
    Declared& declared = it->second;
    if (t.stored_shape != declared.stored_shape) {
      t.layout_note = "declared layout \"" + m.layouts.at(t.name).to_string() + "\" stores rows of shape " +
                      shape_string(declared.stored_shape) + ", the trace holds " + shape_string(t.stored_shape) +
                      ": read as stored";
      continue;
    }
    if (!declared.alignment)
      declared.alignment = std::make_shared<const RowAlignment>(align_row(*declared.spec, m.layouts.at(t.name), *m.dims));
    read_aligned(t, declared.alignment);
    t.layout_note = declared.alignment->description;
  }
}

std::tuple<int, std::int64_t, int, std::string> sort_key(const TapInfo& t) {
  const auto order = execution_order(t.name, t.layer);
  return {order ? 0 : 1, order.value_or(0), t.layer, t.name};
}

}  // namespace

struct TraceReader::Impl {
  std::string path;
  h5::Id file;
  RootState root;
  std::vector<TapInfo> taps;
  std::unique_ptr<StackReader> stacks;
};

TraceReader::TraceReader(const std::string& path) : impl_(std::make_unique<Impl>()) {
  h5::init_library();
  Impl& r = *impl_;
  r.path = path;
  r.file = open_file(path);
  r.root = read_root(r.file.get(), path);
  const std::vector<std::int64_t> tokens = read_committed_ints(
      r.file.get(), sc::kTokens, 1, r.root.committed_tokens, kTraceMaxPositions, path);
  r.root.metadata.tokens.assign(tokens.begin(), tokens.end());
  const std::size_t width = r.root.version.major < 3 ? 2 : sc::kCommittedWidth;
  const std::vector<std::int64_t> committed =
      read_committed_ints(r.file.get(), sc::kCommitted, width, -1, kTraceMaxTaps, path);
  r.taps = load_taps(r.file.get(), path, committed, width, r.root.complete);
  align_declared_layouts(r.root.metadata, path, r.taps);
  std::sort(r.taps.begin(), r.taps.end(),
            [](const TapInfo& a, const TapInfo& b) { return sort_key(a) < sort_key(b); });
  r.stacks = std::make_unique<StackReader>(r.file.get(), r.path, r.taps);
}

TraceReader::~TraceReader() = default;
TraceReader::TraceReader(TraceReader&&) noexcept = default;
TraceReader& TraceReader::operator=(TraceReader&&) noexcept = default;

const std::string& TraceReader::path() const { return impl_->path; }
FormatVersion TraceReader::format_version() const { return impl_->root.version; }
const TraceMetadata& TraceReader::metadata() const { return impl_->root.metadata; }
bool TraceReader::complete() const { return impl_->root.complete; }
std::int64_t TraceReader::committed_steps() const { return impl_->root.committed_steps; }
const TapFilterSpec& TraceReader::filter() const { return impl_->root.filter; }
const std::vector<TapInfo>& TraceReader::taps() const { return impl_->taps; }

const TapInfo* TraceReader::find(std::string_view name, int layer) const {
  for (const TapInfo& t : impl_->taps) {
    if (t.name == name && t.layer == layer) return &t;
  }
  return nullptr;
}

const TapInfo& TraceReader::tap(std::string_view name, int layer) const {
  if (const TapInfo* t = find(name, layer)) return *t;
  throw TraceError(impl_->path, "/taps/" + std::string(name),
                   tap_layer_prefix(layer) + "no such tap in the trace");
}

namespace {

// The positions [lo, hi] of `run` that lie in [first, last] (lo > hi: none).
std::pair<std::int64_t, std::int64_t> clip(const PositionRun& run, std::int64_t first, std::int64_t last) {
  return {std::max(first, run.first_position), std::min(last, run.first_position + run.n_rows - 1)};
}

// Positions increase with rows, so the rows of positions [first, last] are one contiguous
// range [r0, r1) (r0 = r1 = -1 when there are none).
std::pair<std::int64_t, std::int64_t> row_range(const TapInfo& tap, std::int64_t first, std::int64_t last) {
  std::int64_t r0 = -1, r1 = -1;
  for (const PositionRun& run : tap.runs) {
    const auto [lo, hi] = clip(run, first, last);
    if (lo > hi) continue;
    if (r0 < 0) r0 = run.first_row + (lo - run.first_position);
    r1 = run.first_row + (hi - run.first_position) + 1;
  }
  return {r0, r1};
}

}  // namespace

std::vector<const TapInfo*> TraceReader::read_context_as(std::int64_t n_ctx) {
  std::vector<const TapInfo*> cut;
  const TraceMetadata& m = impl_->root.metadata;
  if (!m.dims || !m.dims->complete() || n_ctx <= 0 || n_ctx >= m.dims->n_ctx) return cut;
  TapDims shorter = *m.dims;
  shorter.n_ctx = n_ctx;
  std::map<std::string, std::shared_ptr<const RowAlignment>> by_name;  // every layer's rows alike
  for (TapInfo& t : impl_->taps) {
    const TapSpec* spec = find_tap_spec(t.name);
    if (!spec || spec->row_rank < 1 || spec->row[std::size_t(spec->row_rank - 1)].first != DimSymbol::n_ctx ||
        spec->row[std::size_t(spec->row_rank - 1)].second)
      continue;
    const auto declared = m.layouts.find(t.name);
    if (declared != m.layouts.end() && !t.alignment) continue;  // its declared layout did not fit: read as stored
    TapLayout layout = declared != m.layouts.end() ? declared->second : TapLayout{};
    // The keys past n_ctx as a pad of the context's axis, which reading drops.
    layout.padded[DimSymbol::n_ctx] = m.dims->n_ctx;
    if (stored_row_shape(*spec, layout, shorter) != t.stored_shape) continue;  // rows the dims do not describe
    auto& alignment = by_name[t.name];
    if (!alignment) alignment = std::make_shared<const RowAlignment>(align_row(*spec, layout, shorter));
    read_aligned(t, alignment);
    cut.push_back(&t);
  }
  return cut;
}

TapRows TraceReader::read(const TapInfo& tap, std::int64_t first_position,
                          std::int64_t last_position) const {
  TapRows out;
  out.row_shape = tap.row_shape;
  out.row_size = tap.row_size;
  out.positions = positions_in(tap, first_position, last_position);
  out.values.resize(out.positions.size() * static_cast<std::size_t>(tap.row_size));
  read_into(tap, first_position, last_position, out.values.data());
  return out;
}

std::vector<std::int64_t> TraceReader::positions_in(const TapInfo& tap, std::int64_t first_position,
                                                    std::int64_t last_position) const {
  std::vector<std::int64_t> positions;
  for (const PositionRun& run : tap.runs) {
    const auto [lo, hi] = clip(run, first_position, last_position);
    for (std::int64_t p = lo; p <= hi; ++p) positions.push_back(p);
  }
  return positions;
}

void TraceReader::read_into(const TapInfo& tap, std::int64_t first_position, std::int64_t last_position,
                            float* out) const {
  h5::init_library();  // this thread's HDF5 error printing off (another than the reader's may call)
  const auto [r0, r1] = row_range(tap, first_position, last_position);
  if (r0 < 0) return;
  if (!tap.alignment || tap.alignment->gather.empty()) {  // (empty: stored as read)
    impl_->stacks->read(tap, r0, r1, out);
    return;
  }
  std::vector<float> stored(static_cast<std::size_t>((r1 - r0) * tap.stored_size));
  impl_->stacks->read(tap, r0, r1, stored.data());
  for (std::int64_t i = 0; i < r1 - r0; ++i)
    tap.alignment->apply(stored.data() + i * tap.stored_size, out + i * tap.row_size);
}

std::int64_t TraceReader::stack_slots(const TapInfo& tap) const {
  h5::init_library();
  return impl_->stacks->slots(tap);
}

void TraceReader::read_stack_into(const TapInfo& tap, std::int64_t first_position, std::int64_t last_position,
                                  float* out) const {
  h5::init_library();
  const auto [r0, r1] = row_range(tap, first_position, last_position);
  if (r0 >= 0) impl_->stacks->read_all_slots(tap, r0, r1, out);
}

std::vector<EmittedTap> TraceReader::emitted_taps() const {
  std::vector<EmittedTap> taps;
  for (const TapInfo& t : impl_->taps) taps.push_back({t.name, t.layer, t.whole_shape()});
  return taps;
}

std::int64_t TapInfo::first_position() const {
  return runs.empty() ? -1 : runs.front().first_position;
}

std::int64_t TapInfo::last_position() const {
  return runs.empty() ? -1 : runs.back().first_position + runs.back().n_rows - 1;
}

std::vector<std::int64_t> TapInfo::positions() const {
  std::vector<std::int64_t> out;
  out.reserve(static_cast<std::size_t>(n_rows));
  for (const PositionRun& run : runs) {
    for (std::int64_t i = 0; i < run.n_rows; ++i) out.push_back(run.first_position + i);
  }
  return out;
}

}  // namespace tapdiff
