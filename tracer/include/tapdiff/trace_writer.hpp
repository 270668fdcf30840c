// Writes a trace: metadata at open, tap rows as they are produced, a durable commit at the end
// of every step (so a killed process leaves every committed step readable), complete=1 on
// close(). Layout: docs/trace-schema.md.
//
// Disabled taps cost one enabled() call: no allocation, no copy, no HDF5 call. Enabled rows
// are copied into their stack's staging buffer by record() (every layer of a tap name side
// by side) and written by end_step(), one block per stack (earlier past stage_limit_bytes).
// One thread at a time (HDF5 is built serial here). The tracer silences HDF5's error printing
// and, when it initialises HDF5, disables its exit-time cleanup (see docs/trace-schema.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tapdiff/row_shape.hpp"
#include "tapdiff/tap_filter.hpp"
#include "tapdiff/trace_error.hpp"
#include "tapdiff/trace_metadata.hpp"

namespace tapdiff {

struct WriterOptions {
  TapFilter filter;
  // Steps per durable commit. 1: a crash loses at most the step in progress. Larger values
  // flush less often and lose up to that many steps (bench/results/tracer.md); rows still go to
  // the file about once a step, as a stack's staging block fills.
  int commit_every = 1;
  // gzip + shuffle, applied by close(): it writes a compressed copy and renames it over the
  // trace (streaming compressed chunks is not crash-safe in HDF5). Costs a read and a
  // compression of the whole trace at close; a killed run keeps the uncompressed trace.
  bool compress = false;
  int gzip_level = 4;
  bool fsync = false;  // fsync after every commit: survive power loss, not just a kill
  std::size_t chunk_bytes = 64 * 1024;  // target HDF5 chunk size (rows of every slot)
  // Staged rows are written early beyond this, each group staged in memory the last gave back:
  // faulting in fresh memory cost a `tapdiff run` more than extra writes (docs/guide.md, "What
  // tracing costs"). A record larger than the limit goes to the file directly; a prompt's
  // records (more than one row, metadata.prompt_length above 1) go to each stack's batch
  // unstaged.
  std::size_t stage_limit_bytes = 16u << 20;
};

class TraceWriter {
public:
  // Creates (truncates) path and writes the metadata. Throws TraceError.
  TraceWriter(const std::string& path, const TraceMetadata& metadata, WriterOptions options = {});
  // Without close() the trace stays complete=0 and keeps every committed step.
  ~TraceWriter();
  TraceWriter(TraceWriter&&) noexcept;
  TraceWriter& operator=(TraceWriter&&) noexcept;
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // attn.probs is wanted also where only attn.probs.summary, derived from it, is kept.
  bool enabled(std::string_view name, int layer, std::int64_t position) const {
    return filter_.enabled(name, layer, position) ||
           (name == "attn.probs" && filter_.enabled("attn.probs.summary", layer, position));
  }
  bool enabled(std::string_view name, int layer, std::int64_t first_position,
               std::int64_t n_positions) const {
    return filter_.enabled(name, layer, first_position, n_positions) ||
           (name == "attn.probs" && filter_.enabled("attn.probs.summary", layer, first_position, n_positions));
  }
  const TapFilter& filter() const { return filter_; }

  // rows: (n_rows, row_shape...) row-major float32 in host memory, for the consecutive
  // positions first_position .. first_position + n_rows - 1. Rows the filter disables are
  // dropped. name is the short name, layer -1 for global taps. Positions of a tap must
  // increase from record to record. Throws TraceError; a rejected record changes nothing.
  // Recording attn.probs also records attn.probs.summary (tapdiff/attn_summary.hpp) at the end
  // of the step where the filter keeps it, unless the producer records attn.probs.summary of
  // that layer itself.
  void record(std::string_view name, int layer, std::int64_t first_position, std::int64_t n_rows,
              const RowShape& row_shape, const float* rows);

  // Tokens for the next positions (generation appends one per step).
  void append_tokens(const std::int32_t* tokens, std::size_t n);
  void append_token(std::int32_t token) { append_tokens(&token, 1); }

  // Ends a forward step; every commit_every steps, writes and durably commits (flush, then
  // the committed counts readers trust, then flush again).
  void end_step();

  // Commits what is pending, trims datasets to their exact size, sets complete=1.
  void close();

  const std::string& path() const;
  bool failed() const;         // an I/O error happened; only close() (which throws) remains
  std::int64_t steps() const;  // end_step() calls so far
  std::int64_t committed_steps() const;  // steps a reader is guaranteed to see

private:
  void record_rows(std::string_view name, int layer, std::int64_t first_position, std::int64_t n_rows,
                   const RowShape& row_shape, const float* rows);
  void record_derived();  // the step's attn.probs.summary rows

  struct Impl;
  TapFilter filter_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tapdiff
