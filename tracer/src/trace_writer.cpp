#include "tapdiff/trace_writer.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <filesystem>
#include <set>
#include <unordered_map>

#include "compress_copy.hpp"
#include "extendable.hpp"
#include "h5.hpp"
#include "h5_attr.hpp"
#include "metadata_io.hpp"
#include "record_checks.hpp"
#include "schema.hpp"
#include "space_reserve.hpp"
#include "tap_stack.hpp"
#include "tapdiff/attn_summary.hpp"
#include "tapdiff/tap_catalogue.hpp"
#include "tapdiff/tap_key_table.hpp"

namespace tapdiff {
namespace {

namespace sc = schema;
constexpr std::uint64_t kMetadataMargin = 1u << 20;  // object headers, B-tree nodes, heaps
constexpr std::uint64_t kTapMetadataBytes = 16 * 1024;

std::string object(const char* name) { return std::string("/") + name; }

constexpr std::string_view kAttnProbsTap = "attn.probs";
constexpr std::string_view kAttnSummaryTap = "attn.probs.summary";

// attn.probs.summary is derived here from attn.probs rows in the catalogue's layout; a trace
// without those says why the summary is missing too.
TraceMetadata with_summary_availability(const TraceMetadata& metadata) {
  TraceMetadata m = metadata;
  const std::string summary(kAttnSummaryTap), probs(kAttnProbsTap);
  if (m.unavailable.count(summary)) return m;
  if (const auto why = m.unavailable.find(probs); why != m.unavailable.end())
    m.unavailable[summary] = "derived from attn.probs, which this producer does not record: " + why->second;
  else if (const auto layout = m.layouts.find(probs); layout != m.layouts.end())
    m.unavailable[summary] = "derived only from attn.probs rows in the catalogue's layout [n_head, n_ctx]; this "
                             "trace stores them as " + layout->second.to_string();
  return m;
}

}  // namespace

struct TraceWriter::Impl {
  enum class State { open, closed, failed };

  std::string path;
  WriterOptions options;
  StreamConfig config;
  State state = State::open;
  std::string failure;

  h5::Id file;
  h5::Id taps_group;
  h5::Id attr_complete;
  h5::Id attr_steps;
  h5::Id attr_tokens;
  Extendable tokens;
  Extendable committed;
  SpaceReserve reserve;

  struct TapRef {
    std::size_t stack;
    std::size_t slot;
  };
  StagingPool staging;  // the stacks' staging memory: declared first, destroyed last
  std::vector<std::unique_ptr<TapStack>> stacks;
  std::unordered_map<std::string, std::vector<std::size_t>> stacks_by_name;
  detail::TapKeyTable<TapRef> taps;
  std::int64_t n_taps = 0;  // rows of /committed
  std::vector<std::int32_t> pending_tokens;   // (n,) appended since the last write
  std::vector<std::int64_t> committed_table;  // (n_taps, kCommittedWidth): rows, runs, batch rows
  std::uint64_t staged_bytes = 0;
  std::int64_t steps = 0;
  std::int64_t committed_steps = 0;
  // attn.probs.summary rows derived in this step, recorded at its end unless the producer
  // records that layer's summary itself (a copy of a trace does).
  struct DerivedSummary {
    int layer;
    std::int64_t first_position, n_rows, n_head;
    std::vector<float> rows;
  };
  bool derives_summary = true;     // attn.probs rows come in the catalogue's layout
  std::vector<DerivedSummary> derived_summaries;
  std::set<int> summary_recorded;  // layers whose producer records attn.probs.summary itself

  void open(const TraceMetadata& metadata, const TapFilter& filter);
  void precreate_catalogue(const TraceMetadata& metadata, const TapFilter& filter);
  void usable() const;
  std::size_t stack_for(std::string_view name, const RowShape& shape);  // index in stacks
  TapRef add_tap(std::string_view name, int layer, const RowShape& shape);
  TapRef tap_for_record(std::string_view name, int layer, const RowShape& shape);
  void write_out();              // every stack's staged rows, and the tokens
  void write_out(TapStack& s);  // one stack's staged rows
  void commit();
  void finish();
  void flush(const char* why);
  void release() noexcept;

  // Runs fn; an HDF5 failure inside leaves the writer failed (it can only be closed then).
  template <class Fn>
  void guarded(Fn&& fn) {
    try {
      fn();
    } catch (const TraceError& e) {
      state = State::failed;
      failure = e.what();
      throw;
    }
  }
};

void TraceWriter::Impl::open(const TraceMetadata& metadata, const TapFilter& filter) {
  const h5::Where root{path, "/"};
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty() && !std::filesystem::is_directory(parent, ec)) {
    throw TraceError(path, "/",
                     "cannot create the trace: directory " + parent.string() + " does not exist");
  }
  const h5::Id fapl = h5::plist_id(H5Pcreate(H5P_FILE_ACCESS), root, "cannot create");
  // No lock: readers (h5py, h5dump, tapdiff) may look at a trace while it is being written.
  h5::check(H5Pset_file_locking(fapl.get(), false, true), root, "cannot disable file locking");
  // Metadata sub-allocated from 1 MiB blocks mostly lands below the end of allocation that
  // the previous flush recorded, so a kill mid-flush rarely leaves pointers past it.
  h5::check(H5Pset_meta_block_size(fapl.get(), 1 << 20), root,
            "cannot set the metadata block size");
  // Built under a temporary name and renamed after its first commit: a trace file either
  // does not exist yet or is valid, and an older trace at path survives a failed start.
  const std::string partial = path + ".partial";
  file = h5::file_id(H5Fcreate(partial.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), root,
                     "cannot create the trace file");
  reserve = SpaceReserve(file.get(), path);
  reserve.ensure(kMetadataMargin);

  write_metadata(file.get(), path, metadata, filter.spec());
  attr_complete = h5::create_int_attr(file.get(), sc::kComplete, 0, root);
  attr_steps = h5::create_int_attr(file.get(), sc::kCommittedSteps, 0, root);
  attr_tokens = h5::create_int_attr(file.get(), sc::kCommittedTokens, 0, root);
  taps_group =
      h5::group_id(H5Gcreate2(file.get(), sc::kTaps, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                   {path, object(sc::kTaps)}, "cannot create group");
  tokens.create(file.get(), sc::kTokens, H5T_STD_I32LE, {}, sc::kTokensChunk, DatasetOptions{},
                {path, object(sc::kTokens)});
  DatasetOptions zeroed;
  zeroed.zero_fill = true;
  committed.create(file.get(), sc::kCommitted, H5T_STD_I64LE, {sc::kCommittedWidth}, sc::kCommittedChunk, zeroed,
                   {path, object(sc::kCommitted)});
  if (metadata.dims && metadata.dims->complete()) precreate_catalogue(metadata, filter);
  pending_tokens = metadata.tokens;
  commit();
  if (std::rename(partial.c_str(), path.c_str()) != 0) {
    const int error = errno;
    std::remove(partial.c_str());
    throw TraceError(path, "/",
                     std::string("cannot create the trace file: ") + std::strerror(error));
  }
}

// Adding a group (or a slot) rewrites the /taps symbol table (or the stack's attributes) in
// place, and a kill in that flush can make the group unreadable (HDF5 1.10 without SWMR).
// Creating every catalogue stack with its slots before the file gets its name keeps that
// window out of the run; taps outside the catalogue are still created when first written.
void TraceWriter::Impl::precreate_catalogue(const TraceMetadata& metadata, const TapFilter& filter) {
  const TapDims& dims = *metadata.dims;
  std::vector<std::pair<const TapSpec*, int>> enabled;
  for (const TapSpec& spec : tap_catalogue()) {
    // A mixture of experts' taps, or a dense FFN's: whichever the dims say the model has.
    if (!emitted_by(spec, TapModelFeatures{true, true, dims.n_expert > 0})) continue;
    const int first = spec.scope == TapScope::global ? -1 : 0;
    const int last = spec.scope == TapScope::global ? -1 : static_cast<int>(dims.n_layer) - 1;
    for (int layer = first; layer <= last; ++layer) {
      if (filter.tap_enabled(spec.name, layer)) enabled.emplace_back(&spec, layer);
    }
  }
  reserve.ensure(kMetadataMargin + enabled.size() * kTapMetadataBytes);
  for (const auto& [spec, layer] : enabled) {
    const auto layout = metadata.layouts.find(std::string(spec->name));
    add_tap(spec->name, layer,
            RowShape(layout == metadata.layouts.end() ? catalogue_row_shape(*spec, dims)
                                                      : stored_row_shape(*spec, layout->second, dims)));
  }
  for (const auto& s : stacks) s->ensure_created(taps_group.get(), config, path);
}

void TraceWriter::Impl::usable() const {
  if (state == State::closed) throw TraceError(path, "/", "the trace is already closed");
  if (state == State::failed) {
    throw TraceError(path, "/", "the writer failed earlier and can only be closed: " + failure);
  }
}

std::size_t TraceWriter::Impl::stack_for(std::string_view name, const RowShape& shape) {
  std::vector<std::size_t>& of_name = stacks_by_name[std::string(name)];
  for (std::size_t i : of_name) {
    if (stacks[i]->shape() == shape) return i;
  }
  std::string group(name);
  if (!of_name.empty()) group += sc::kStackSuffix + std::to_string(of_name.size() + 1);
  of_name.push_back(stacks.size());
  stacks.push_back(std::make_unique<TapStack>(std::string(name), std::move(group), shape, staging));
  return stacks.size() - 1;
}

TraceWriter::Impl::TapRef TraceWriter::Impl::add_tap(std::string_view name, int layer,
                                                     const RowShape& shape) {
  const std::size_t at = stack_for(name, shape);
  const TapRef ref{at, stacks[at]->add_slot(layer, n_taps++)};
  return taps.insert(name, layer, ref);
}

// The tap's slot; a tap without rows yet that is recorded with another row shape than it was
// created with (a shape bug is a finding, not a reason to drop the tap) moves to a stack of
// that shape, leaving an empty slot behind.
TraceWriter::Impl::TapRef TraceWriter::Impl::tap_for_record(std::string_view name, int layer,
                                                            const RowShape& shape) {
  const TapRef* known = taps.find(name, layer);
  if (known == nullptr) return add_tap(name, layer, shape);
  const TapStack& stack = *stacks[known->stack];
  if (stack.shape() == shape) return *known;
  if (stack.rows_recorded(known->slot) == 0) return add_tap(name, layer, shape);
  throw TraceError(path, stack.object(),
                   stack.tap_text(known->slot) + "row shape " + shape.to_string() +
                       " differs from " + stack.shape().to_string() + " recorded earlier");
}

void TraceWriter::Impl::write_out() {
  std::uint64_t bound =
      kMetadataMargin + (pending_tokens.size() + sc::kTokensChunk) * sizeof(std::int32_t);
  for (const auto& s : stacks) bound += s->write_bound(config);
  reserve.ensure(bound);
  for (const auto& s : stacks) s->write_staged(taps_group.get(), config, path);
  staged_bytes = 0;
  tokens.append(pending_tokens.size(), H5T_NATIVE_INT32, pending_tokens.data(),
                {path, object(sc::kTokens)});
  pending_tokens.clear();
}

void TraceWriter::Impl::write_out(TapStack& s) {
  staged_bytes -= s.staged_bytes();
  reserve.ensure(kMetadataMargin + s.write_bound(config));
  s.write_staged(taps_group.get(), config, path);
}

void TraceWriter::Impl::flush(const char* why) {
  h5::check(H5Fflush(file.get(), H5F_SCOPE_LOCAL), {path, "/"}, why);
}

// Two flushes: the rows first, then the counts that make them visible to readers. A kill at
// any point leaves counts that only cover rows whose flush returned.
void TraceWriter::Impl::commit() {
  write_out();
  flush("cannot flush the step's rows");
  committed_table.assign(static_cast<std::size_t>(n_taps) * sc::kCommittedWidth, 0);
  for (const auto& s : stacks) {
    for (std::size_t slot = 0; slot < s->slots(); ++slot) {
      const std::size_t i = static_cast<std::size_t>(s->index(slot)) * sc::kCommittedWidth;
      committed_table[i] = s->rows_written(slot);
      committed_table[i + 1] = s->runs_written(slot);
      committed_table[i + 2] = s->batch_rows(slot);
    }
  }
  const h5::Where root{path, "/"};
  committed.write(0, static_cast<hsize_t>(n_taps), H5T_NATIVE_INT64, committed_table.data(),
                  {path, object(sc::kCommitted)});
  h5::rewrite_int_attr(attr_steps, steps, root, sc::kCommittedSteps);
  h5::rewrite_int_attr(attr_tokens, static_cast<std::int64_t>(tokens.size()), root,
                       sc::kCommittedTokens);
  flush("cannot flush the committed counts");
  if (options.fsync) {
    void* handle = nullptr;
    if (H5Fget_vfd_handle(file.get(), H5P_DEFAULT, &handle) >= 0 && handle != nullptr &&
        ::fsync(*static_cast<int*>(handle)) != 0) {
      throw TraceError(path, "/", "fsync failed");
    }
  }
  committed_steps = steps;
}

void TraceWriter::Impl::finish() {
  commit();
  reserve.ensure(kMetadataMargin);
  for (const auto& s : stacks) s->trim(path);
  tokens.trim({path, object(sc::kTokens)});
  committed.trim({path, object(sc::kCommitted)});
  h5::rewrite_int_attr(attr_complete, 1, {path, "/"}, sc::kComplete);
  flush("cannot flush at close");
  reserve.release_unused();
  for (const auto& s : stacks) s->close();
  tokens.close();
  committed.close();
  attr_complete.reset();
  attr_steps.reset();
  attr_tokens.reset();
  taps_group.reset();
  if (!file.close()) h5::fail({path, "/"}, "cannot close the trace file");
}

void TraceWriter::Impl::release() noexcept {
  if (file.valid()) reserve.release_unused();
  for (const auto& s : stacks) s->close();
  tokens.close();
  committed.close();
  attr_complete.reset();
  attr_steps.reset();
  attr_tokens.reset();
  taps_group.reset();
  file.reset();
}

TraceWriter::TraceWriter(const std::string& path, const TraceMetadata& metadata,
                         WriterOptions options)
    : filter_(options.filter), impl_(std::make_unique<Impl>()) {
  h5::init_library();
  Impl& w = *impl_;
  w.path = path;
  check_metadata(path, metadata);
  if (options.commit_every < 1) throw TraceError(path, "/", "commit_every must be >= 1");
  if (options.gzip_level < 0 || options.gzip_level > 9) {
    throw TraceError(path, "/", "gzip_level must be in 0..9");
  }
  if (options.chunk_bytes < 1) throw TraceError(path, "/", "chunk_bytes must be >= 1");
  w.options = std::move(options);
  w.config.chunk_bytes = w.options.chunk_bytes;
  w.config.batch_rows = metadata.prompt_length;
  const TraceMetadata declared = with_summary_availability(metadata);
  w.derives_summary = declared.unavailable.count(std::string(kAttnSummaryTap)) == 0;
  try {
    w.open(declared, filter_);
  } catch (...) {
    w.release();
    std::remove((path + ".partial").c_str());
    throw;
  }
}

TraceWriter::~TraceWriter() {
  if (impl_) impl_->release();
}

TraceWriter::TraceWriter(TraceWriter&&) noexcept = default;
TraceWriter& TraceWriter::operator=(TraceWriter&&) noexcept = default;

void TraceWriter::record(std::string_view name, int layer, std::int64_t first_position,
                         std::int64_t n_rows, const RowShape& row_shape, const float* rows) {
  Impl& w = *impl_;
  w.usable();
  check_record(w.path, name, layer, first_position, n_rows, row_shape, rows);
  // A producer that computes the summary itself (on a device, without the probabilities, or
  // copying a trace) records it; the writer then derives nothing for that layer.
  if (name == kAttnSummaryTap && w.summary_recorded.insert(layer).second) {
    auto& derived = w.derived_summaries;
    derived.erase(std::remove_if(derived.begin(), derived.end(),
                                 [layer](const Impl::DerivedSummary& d) { return d.layer == layer; }),
                  derived.end());
  }
  if (name != kAttnProbsTap || !w.derives_summary || row_shape.rank() != 2 || w.summary_recorded.count(layer) ||
      !filter_.tap_enabled(kAttnSummaryTap, layer)) {
    record_rows(name, layer, first_position, n_rows, row_shape, rows);
    return;
  }
  const std::int64_t n_head = row_shape[0], width = row_shape[1];
  Impl::DerivedSummary d{layer, first_position, n_rows, n_head,
                         std::vector<float>(std::size_t(n_rows * n_head * kAttnSummaryFields))};
  for (std::int64_t r = 0; r < n_rows; ++r)
    summarize_attention_row(rows + r * n_head * width, n_head, width, first_position + r,
                            d.rows.data() + r * n_head * kAttnSummaryFields);
  record_rows(name, layer, first_position, n_rows, row_shape, rows);  // a rejected record derives nothing
  w.derived_summaries.push_back(std::move(d));
}

void TraceWriter::record_derived() {
  Impl& w = *impl_;
  auto derived = std::move(w.derived_summaries);
  w.derived_summaries.clear();
  for (const Impl::DerivedSummary& d : derived)
    record_rows(kAttnSummaryTap, d.layer, d.first_position, d.n_rows, RowShape({d.n_head, kAttnSummaryFields}),
                d.rows.data());
}

void TraceWriter::record_rows(std::string_view name, int layer, std::int64_t first_position, std::int64_t n_rows,
                              const RowShape& row_shape, const float* rows) {
  Impl& w = *impl_;
  if (!filter_.tap_enabled(name, layer)) return;
  const RangeSet& positions = filter_.positions();
  std::int64_t first_enabled = -1;
  positions.for_each_run(first_position, n_rows, [&](std::int64_t p, std::int64_t) {
    if (first_enabled < 0) first_enabled = p;
  });
  if (first_enabled < 0) return;

  const Impl::TapRef ref = w.tap_for_record(name, layer, row_shape);
  TapStack& s = *w.stacks[ref.stack];
  s.check_position(ref.slot, first_enabled, w.path);
  const std::int64_t row_size = row_shape.elements();
  // A batched step (the prompt) goes to the stack's batch as it came: no staging, one write.
  if (s.takes_batch(ref.slot, n_rows, w.config)) {
    w.guarded([&] {
      positions.for_each_run(first_position, n_rows, [&](std::int64_t p, std::int64_t n) {
        w.reserve.ensure(kMetadataMargin + std::uint64_t(n * row_size) * sizeof(float));
        if (s.takes_batch(ref.slot, n, w.config))
          s.write_batch(ref.slot, p, n, rows + (p - first_position) * row_size, w.taps_group.get(), w.config, w.path);
        else
          s.write_direct(ref.slot, p, n, rows + (p - first_position) * row_size, w.taps_group.get(), w.config, w.path);
      });
    });
    return;
  }
  // A record the staging buffer could only take at more than the stage limit (one layer of a
  // long prefill) goes to the file directly, after what is staged.
  if (s.staging_bytes_after(ref.slot, n_rows) > w.options.stage_limit_bytes) {
    w.guarded([&] {
      w.write_out();
      positions.for_each_run(first_position, n_rows, [&](std::int64_t p, std::int64_t n) {
        w.reserve.ensure(kMetadataMargin + std::uint64_t(n * row_size) * sizeof(float));
        s.write_direct(ref.slot, p, n, rows + (p - first_position) * row_size, w.taps_group.get(), w.config, w.path);
      });
    });
    return;
  }
  if (!s.suits_staging(ref.slot, n_rows)) w.guarded([&] { w.write_out(s); });
  const std::uint64_t before = s.staged_bytes();
  positions.for_each_run(first_position, n_rows, [&](std::int64_t p, std::int64_t n) {
    s.stage(ref.slot, p, n, rows + (p - first_position) * row_size);
  });
  w.staged_bytes += s.staged_bytes() - before;
  if (w.staged_bytes > w.options.stage_limit_bytes) w.guarded([&] { w.write_out(); });
}

void TraceWriter::append_tokens(const std::int32_t* tokens, std::size_t n) {
  Impl& w = *impl_;
  w.usable();
  if (n > 0 && tokens == nullptr) throw TraceError(w.path, "/tokens", "tokens is null");
  w.pending_tokens.insert(w.pending_tokens.end(), tokens, tokens + n);
}

void TraceWriter::end_step() {
  Impl& w = *impl_;
  w.usable();
  record_derived();
  ++w.steps;
  if (w.steps - w.committed_steps >= w.options.commit_every) w.guarded([&] { w.commit(); });
}

void TraceWriter::close() {
  Impl& w = *impl_;
  if (w.state == Impl::State::closed) return;
  if (w.state == Impl::State::failed) {
    w.release();
    w.state = Impl::State::closed;
    throw TraceError(w.path, "/", "closed incomplete after an earlier failure: " + w.failure);
  }
  try {
    record_derived();
    w.finish();
    w.state = Impl::State::closed;
    if (w.options.compress) compress_trace(w.path, w.options.gzip_level);
  } catch (const TraceError& e) {
    w.failure = e.what();
    w.release();
    w.state = Impl::State::closed;
    throw;
  }
}

const std::string& TraceWriter::path() const { return impl_->path; }
bool TraceWriter::failed() const { return impl_->state == Impl::State::failed; }
std::int64_t TraceWriter::steps() const { return impl_->steps; }
std::int64_t TraceWriter::committed_steps() const { return impl_->committed_steps; }

}  // namespace tapdiff
