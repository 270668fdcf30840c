#include "compress_copy.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "extendable.hpp"
#include "h5_attr.hpp"
#include "metadata_io.hpp"
#include "schema.hpp"
#include "space_reserve.hpp"
#include "tap_stream.hpp"
#include "tapdiff/trace_reader.hpp"

namespace tapdiff {
namespace {

namespace sc = schema;
constexpr std::int64_t kWindowBytes = 8 << 20;  // rows copied per read
constexpr std::uint64_t kMargin = 1u << 20;

std::string object(const char* name) { return std::string("/") + name; }

void copy_tap(const TraceReader& in, const TapInfo& tap, std::int64_t index, hid_t taps,
              const StreamConfig& config, SpaceReserve& reserve, const std::string& path,
              std::vector<std::int64_t>& committed) {
  TapStream out(tap.name, tap.layer, RowShape(tap.row_shape), index);
  const std::int64_t window = std::max<std::int64_t>(
      1, kWindowBytes / (tap.row_size * static_cast<std::int64_t>(sizeof(float))));
  for (const PositionRun& run : tap.runs) {
    for (std::int64_t done = 0; done < run.n_rows; done += window) {
      const std::int64_t first = run.first_position + done;
      const std::int64_t n = std::min(window, run.n_rows - done);
      const TapRows rows = in.read(tap, first, first + n - 1);
      out.stage(first, n, rows.values.data());
      reserve.ensure(kMargin + 2 * out.write_bound(config));
      out.write_staged(taps, config, path);
    }
  }
  out.trim(path);
  committed.push_back(out.rows_written());
  committed.push_back(out.runs_written());
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
  const h5::Id taps =
      h5::group_id(H5Gcreate2(file.get(), sc::kTaps, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                   {path, object(sc::kTaps)}, "cannot create group");
  std::vector<std::int64_t> committed;  // (n_taps, 2)
  for (const TapInfo& tap : in.taps()) {
    copy_tap(in, tap, static_cast<std::int64_t>(committed.size() / 2), taps.get(), config, reserve,
             path, committed);
  }
  Extendable committed_ds;
  committed_ds.create(file.get(), sc::kCommitted, H5T_STD_I64LE, {2}, sc::kCommittedChunk,
                      DatasetOptions{}, {path, object(sc::kCommitted)});
  committed_ds.append(committed.size() / 2, H5T_NATIVE_INT64, committed.data(),
                      {path, object(sc::kCommitted)});
  committed_ds.trim({path, object(sc::kCommitted)});
  h5::write_int_attr(file.get(), sc::kComplete, 1, root);
  h5::check(H5Fflush(file.get(), H5F_SCOPE_LOCAL), root, "cannot flush the compressed copy");
  reserve.release_unused();
  token_ds.close();
  committed_ds.close();
}

}  // namespace

void compress_trace(const std::string& path, int gzip_level) {
  const std::string copy = path + ".gzip-" + std::to_string(getpid()) + ".tmp";
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
