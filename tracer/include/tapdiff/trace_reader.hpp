// Reads a trace: validates format, version, required attributes and dataset shapes at open
// (TraceError naming file and object otherwise), then reads tap rows by position range
// without loading the trace whole. For an incomplete trace (a killed writer) it reads only
// what was committed.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tapdiff/tap_catalogue.hpp"
#include "tapdiff/tap_filter.hpp"
#include "tapdiff/tap_layout.hpp"
#include "tapdiff/trace_error.hpp"
#include "tapdiff/trace_metadata.hpp"

namespace tapdiff {

// Claims beyond these are refused at open (TraceError), before anything is allocated for
// them: an HDF5 dataset can declare any extent without storing it, so counts alone prove
// nothing. Positions (and committed tokens) are context indices; a row is one tap at one
// position (the largest real ones, logits and KV cache read-backs, hold a few million values).
inline constexpr std::int64_t kTraceMaxPositions = std::int64_t{1} << 24;
inline constexpr std::int64_t kTraceMaxTaps = std::int64_t{1} << 20;
inline constexpr std::int64_t kTraceMaxRowElements = std::int64_t{1} << 32;
// A tap's committed rows must be stored in the file: at most this many bytes of float32 rows per
// byte the dataset occupies (deflate cannot compress more than 1032:1), so reading one tap never
// allocates more than a small multiple of the file's size.
inline constexpr std::int64_t kTraceMaxExpansion = 2048;

// Rows [first_row, first_row + n_rows) hold consecutive positions from first_position.
struct PositionRun {
  std::int64_t first_row = 0;
  std::int64_t first_position = 0;
  std::int64_t n_rows = 0;
};

struct TapInfo {
  std::string name;  // short name
  int layer = -1;
  std::string full_name;  // blk.{layer}.{name}, or name for a global tap
  std::string stack;      // its stack: the HDF5 group under /taps
  std::size_t slot = 0;   // its slot in the stack
  std::vector<std::int64_t> row_shape;  // a row as read() returns it: in the catalogue's layout
  std::int64_t row_size = 0;            // product of row_shape
  std::int64_t n_rows = 0;              // committed rows
  std::int64_t batch_rows = 0;          // of them, rows 0 .. batch_rows - 1 are in the stack's batch
  std::int64_t batch_chunk_rows = 0;    // a slot's rows one chunk of that batch holds (0: no batch)
  std::vector<PositionRun> runs;
  // A declared layout (/layouts): how the file stores the rows and how read() aligns them.
  std::vector<std::int64_t> stored_shape;  // row_shape when no layout is declared
  std::int64_t stored_size = 0;
  std::shared_ptr<const RowAlignment> alignment;
  std::string layout_note;  // what aligning did, or why a declared layout was not applied

  // The catalogue row the tap's rows are (part of): row_shape unless the trace holds a shard.
  const std::vector<std::int64_t>& whole_shape() const { return alignment ? alignment->whole_shape : row_shape; }
  bool sharded() const { return alignment && alignment->sharded(); }

  std::int64_t first_position() const;
  std::int64_t last_position() const;
  std::vector<std::int64_t> positions() const;  // (n_rows,), increasing
};

struct TapRows {
  std::vector<std::int64_t> positions;  // (n,)
  std::vector<std::int64_t> row_shape;
  std::int64_t row_size = 0;
  std::vector<float> values;  // (n, row_size) row-major

  std::size_t size() const { return positions.size(); }
  const float* row(std::size_t i) const {
    return values.data() + i * static_cast<std::size_t>(row_size);
  }
};

class TraceReader {
public:
  explicit TraceReader(const std::string& path);  // throws TraceError
  ~TraceReader();
  TraceReader(TraceReader&&) noexcept;
  TraceReader& operator=(TraceReader&&) noexcept;
  TraceReader(const TraceReader&) = delete;
  TraceReader& operator=(const TraceReader&) = delete;

  const std::string& path() const;
  FormatVersion format_version() const;
  const TraceMetadata& metadata() const;  // metadata().tokens: the committed tokens
  bool complete() const;
  std::int64_t committed_steps() const;
  const TapFilterSpec& filter() const;

  const std::vector<TapInfo>& taps() const;  // execution order, then unknown taps by name
  // Rows as wide as the run's context (attn.probs: [n_head, n_ctx]) read over their first n_ctx
  // keys, as a run of n_ctx positions holds them: how diff compares a longer run's rows with a
  // shorter one's. Only below the trace's own n_ctx, and only with /dims. Returns the taps it
  // now reads so.
  std::vector<const TapInfo*> read_context_as(std::int64_t n_ctx);
  const TapInfo* find(std::string_view name, int layer) const;
  const TapInfo& tap(std::string_view name, int layer) const;  // throws TraceError

  // Rows whose positions lie in [first_position, last_position]. Throws TraceError.
  TapRows read(const TapInfo& tap, std::int64_t first_position = 0,
               std::int64_t last_position = std::numeric_limits<std::int64_t>::max()) const;
  // The same in two steps, into the caller's memory (a reader of many taps allocates once):
  // the positions of those rows, then the rows (positions.size() * tap.row_size floats).
  std::vector<std::int64_t> positions_in(const TapInfo& tap, std::int64_t first_position,
                                         std::int64_t last_position) const;
  void read_into(const TapInfo& tap, std::int64_t first_position, std::int64_t last_position, float* out) const;
  // The taps stored side by side with `tap` (docs/trace-schema.md, "/taps/<stack>"): the number
  // of slots in its stack, and the rows that hold tap's positions [first, last] of every slot,
  // as stored and in one read: row i of slot s at out + (i * stack_slots + s) * stored_size.
  std::int64_t stack_slots(const TapInfo& tap) const;
  void read_stack_into(const TapInfo& tap, std::int64_t first_position, std::int64_t last_position,
                       float* out) const;

  std::vector<EmittedTap> emitted_taps() const;  // for check_catalogue()

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tapdiff
