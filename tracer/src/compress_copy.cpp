#include "compress_copy.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>

#include "extendable.hpp"
#include "h5_attr.hpp"
#include "metadata_io.hpp"
#include "schema.hpp"
#include "space_reserve.hpp"
#include "tap_stack.hpp"
#include "tapdiff/trace_reader.hpp"

namespace tapdiff {
namespace {

namespace sc = schema;
constexpr std::int64_t kWindowBytes = 8 << 20;  // rows copied per read
constexpr std::uint64_t kMargin = 1u << 20;

std::string object(const char* name) { return std::string("/") + name; }

// Rows of `tap` from row r0 to before r1 (row numbers, not positions), run by run.
template <class Write>
void copy_rows(const TraceReader& in, const TapInfo& tap, std::int64_t r0, std::int64_t r1, Write&& write) {
  for (const PositionRun& run : tap.runs) {
    const std::int64_t lo = std::max(r0, run.first_row);
    const std::int64_t hi = std::min(r1, run.first_row + run.n_rows);
    if (lo >= hi) continue;
    const std::int64_t position = run.first_position + (lo - run.first_row);
    const TapRows rows = in.read(tap, position, position + (hi - lo) - 1);
    write(position, hi - lo, rows.values.data());
  }
}

// Copies one stack. The rows a slot keeps in the stack's `batch` (a prompt's, slot-major) go to
// the copy's batch a slot at a time, in windows of whole chunks: read a few rows of every slot at
// a time, each of attn.probs's tiles of 64 positions would be read again for every few rows. The
// rest go window by window: a window is the same rows of every slot, written in one block where
// the slots agree.
void copy_stack(const TraceReader& in, const std::vector<const TapInfo*>& taps, hid_t taps_group,
                const StreamConfig& config, SpaceReserve& reserve, const std::string& path,
                std::vector<std::int64_t>& committed) {
  const TapInfo& first = *taps.front();
  StagingPool staging;
  TapStack out(first.name, first.stack, RowShape(first.row_shape), staging);
  std::int64_t max_rows = 0;
  std::int64_t first_data_row = std::numeric_limits<std::int64_t>::max();
  for (const TapInfo* tap : taps) {
    out.add_slot(tap->layer, static_cast<std::int64_t>(committed.size() / sc::kCommittedWidth));
    committed.insert(committed.end(), sc::kCommittedWidth, 0);
    max_rows = std::max(max_rows, tap->n_rows);
    first_data_row = std::min(first_data_row, tap->batch_rows);
  }
  const std::int64_t row_bytes = first.row_size * static_cast<std::int64_t>(sizeof(float));

  const auto batch_chunk = std::max<std::int64_t>(1, std::int64_t(out.batch_chunk_rows(config)));
  const std::int64_t slot_window = std::max<std::int64_t>(1, kWindowBytes / (row_bytes * batch_chunk)) * batch_chunk;
  for (std::size_t slot = 0; slot < taps.size(); ++slot) {
    const TapInfo& tap = *taps[slot];
    for (std::int64_t r0 = 0; r0 < tap.batch_rows; r0 += slot_window) {
      const std::int64_t r1 = std::min(r0 + slot_window, tap.batch_rows);
      reserve.ensure(kMargin + 2 * std::uint64_t(r1 - r0) * std::uint64_t(row_bytes));
      copy_rows(in, tap, r0, r1, [&](std::int64_t position, std::int64_t n, const float* rows) {
        out.write_batch(slot, position, n, rows, taps_group, config, path);
      });
    }
  }

  const std::int64_t window =
      std::max<std::int64_t>(1, kWindowBytes / (row_bytes * static_cast<std::int64_t>(taps.size())));
  for (std::int64_t r0 = first_data_row; r0 < max_rows; r0 += window) {
    for (std::size_t slot = 0; slot < taps.size(); ++slot) {
      const TapInfo& tap = *taps[slot];
      copy_rows(in, tap, std::max(r0, tap.batch_rows), r0 + window,
                [&](std::int64_t position, std::int64_t n, const float* rows) { out.stage(slot, position, n, rows); });
    }
    reserve.ensure(kMargin + 2 * out.write_bound(config));
    out.write_staged(taps_group, config, path);
  }
  reserve.ensure(kMargin + out.write_bound(config));
  out.ensure_data(taps_group, config, path);  // every stack has one, if only batch rows were copied
  out.trim(path);
  for (std::size_t slot = 0; slot < taps.size(); ++slot) {
    const std::size_t i = static_cast<std::size_t>(out.index(slot)) * sc::kCommittedWidth;
    committed[i] = out.rows_written(slot);
    committed[i + 1] = out.runs_written(slot);
    committed[i + 2] = out.batch_rows(slot);
  }
  out.close();
}

void write_copy(const TraceReader& in, const std::string& path, int gzip_level) {
  const h5::Where root{path, "/"};
  const h5::Id fapl = h5::plist_id(H5Pcreate(H5P_FILE_ACCESS), root, "cannot create");
  h5::check(H5Pset_file_locking(fapl.get(), false, true), root, "cannot disable file locking");
  h5::Id file = h5::file_id(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), root,
                            "cannot create the compressed copy");
  SpaceReserve reserve(file.get(), path);
  reserve.ensure(kMargin);
  write_metadata(file.get(), path, in.metadata(), in.filter());
  h5::write_int_attr(file.get(), sc::kCommittedSteps, in.committed_steps(), root);
  const std::vector<std::int32_t>& tokens = in.metadata().tokens;
  h5::write_int_attr(file.get(), sc::kCommittedTokens, static_cast<std::int64_t>(tokens.size()),
                     root);

  Extendable token_ds;
  token_ds.create(file.get(), sc::kTokens, H5T_STD_I32LE, {}, sc::kTokensChunk, DatasetOptions{},
                  {path, object(sc::kTokens)});
  token_ds.append(tokens.size(), H5T_NATIVE_INT32, tokens.data(), {path, object(sc::kTokens)});
  token_ds.trim({path, object(sc::kTokens)});

  StreamConfig config;
  config.dataset.compress = true;
  config.dataset.gzip_level = gzip_level;
  const bool batched = std::any_of(in.taps().begin(), in.taps().end(), [](const TapInfo& t) { return t.batch_rows > 0; });
  if (batched) config.batch_rows = in.metadata().prompt_length;  // the copy's batch chunks as the trace's
  const h5::Id taps =
      h5::group_id(H5Gcreate2(file.get(), sc::kTaps, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                   {path, object(sc::kTaps)}, "cannot create group");
  std::map<std::string, std::vector<const TapInfo*>> stacks;  // the taps of each, by slot
  for (const TapInfo& tap : in.taps()) stacks[tap.stack].push_back(&tap);
  std::vector<std::int64_t> committed;  // (n_taps, kCommittedWidth)
  for (auto& [name, taps_of_stack] : stacks) {
    std::sort(taps_of_stack.begin(), taps_of_stack.end(),
              [](const TapInfo* a, const TapInfo* b) { return a->slot < b->slot; });
    copy_stack(in, taps_of_stack, taps.get(), config, reserve, path, committed);
  }
  Extendable committed_ds;
  committed_ds.create(file.get(), sc::kCommitted, H5T_STD_I64LE, {sc::kCommittedWidth}, sc::kCommittedChunk,
                      DatasetOptions{}, {path, object(sc::kCommitted)});
  committed_ds.append(committed.size() / sc::kCommittedWidth, H5T_NATIVE_INT64, committed.data(),
                      {path, object(sc::kCommitted)});
  committed_ds.trim({path, object(sc::kCommitted)});
  h5::write_int_attr(file.get(), sc::kComplete, 1, root);
  h5::check(H5Fflush(file.get(), H5F_SCOPE_LOCAL), root, "cannot flush the compressed copy");
  reserve.release_unused();
  token_ds.close();
  committed_ds.close();
}

// "NAME.gzip-HOST-": the copies this host's processes write beside the trace NAME.
std::string copy_prefix(const std::string& path) {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return path + ".gzip-" + host + "-";
}

// A run killed while it compressed left its copy, named by its host and process id. Copies of
// this host's processes that are gone, untouched for a minute (a process of another PID
// namespace sharing the directory still writes its copy), go before a new one is written.
void remove_abandoned_copies(const std::string& path) {
  namespace fs = std::filesystem;
  const std::string prefix = fs::path(copy_prefix(path)).filename().string();
  const fs::path dir = fs::path(path).parent_path().empty() ? fs::path(".") : fs::path(path).parent_path();
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= prefix.size() + 4 || name.compare(0, prefix.size(), prefix) != 0 ||
        name.compare(name.size() - 4, 4, ".tmp") != 0)
      continue;
    const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - 4);
    if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(digits));
    const auto written = fs::last_write_time(entry.path(), ec);
    if (ec || fs::file_time_type::clock::now() - written < std::chrono::minutes(1)) continue;
    if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) fs::remove(entry.path(), ec);
  }
}

}  // namespace

void compress_trace(const std::string& path, int gzip_level) {
  remove_abandoned_copies(path);
  const std::string copy = copy_prefix(path) + std::to_string(getpid()) + ".tmp";
  try {
    const TraceReader in(path);
    write_copy(in, copy, gzip_level);
  } catch (const TraceError& e) {
    std::remove(copy.c_str());
    throw TraceError(path, "/",
                     "the trace is complete but could not be compressed: " + std::string(e.what()));
  }
  if (std::rename(copy.c_str(), path.c_str()) != 0) {
    std::remove(copy.c_str());
    throw TraceError(path, "/",
                     "the trace is complete but its compressed copy could not replace it");
  }
}

}  // namespace tapdiff
