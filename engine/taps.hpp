// Tap points. A TapProbe records a tap from executor memory and, in lockstep mode, then
// overwrites the op's output in place with the lockstep source's rows for the same (name,
// layer, positions), so the next op runs on the source's (the reference's) values and each op's
// recorded error is its own (docs/diagnosis.md, "Lockstep").
//
// Recording: a tap whose (name, layer, positions) the trace's filter disables costs one
// enabled() call: no synchronization, no copy, no allocation. An enabled tap is read in place
// from host memory, or copied from the device (which synchronizes); 16-bit data (the KV cache)
// is widened to float32 first. Injection does not depend on the filter: every probe injects.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/device/elem_type.hpp"
#include "tapdiff/row_shape.hpp"

namespace tapdiff {
class TraceReader;
class TraceWriter;
}  // namespace tapdiff

namespace tapdiff::engine {

class Executor;

// The trace lockstep injects from. Throws InputError naming the file and the tap when the tap
// or some of its positions are missing. A tap whose rows have another width than the engine's
// op writes (a shape bug) gives no rows: the op keeps its own output and the diff reports the
// shape finding.
class LockstepSource {
public:
  explicit LockstepSource(const std::string& path);  // throws TraceError
  ~LockstepSource();
  LockstepSource(LockstepSource&&) noexcept;
  LockstepSource& operator=(LockstepSource&&) noexcept;

  const TraceReader& trace() const { return *reader_; }
  // Rows first_position .. first_position + n_rows - 1 of (name, layer), (n_rows, row_elements);
  // empty when the source's rows are not row_elements wide.
  std::vector<float> rows(std::string_view name, int layer, std::int64_t first_position,
                          std::int64_t n_rows, std::int64_t row_elements) const;

private:
  std::unique_ptr<TraceReader> reader_;
};

class TapProbe {
public:
  // trace and lockstep may be null (no recording, no injection).
  TapProbe(TraceWriter* trace, const LockstepSource* lockstep, Executor& ex)
      : trace_(trace), lockstep_(lockstep), ex_(ex) {}

  bool enabled(std::string_view name, int layer, std::int64_t first_position,
               std::int64_t n_rows) const;
  bool lockstep() const { return lockstep_ != nullptr; }

  // The tap point of an op's output: record the rows (n_rows, shape...) float32 in executor
  // memory, positions first_position onwards, then inject the source's rows into them.
  void probe(std::string_view name, int layer, std::int64_t first_position, std::int64_t n_rows,
             const RowShape& shape, float* rows);
  // The same for rows stored as `type` (KV cache slots): injection rounds to `type`.
  void probe(std::string_view name, int layer, std::int64_t first_position, std::int64_t n_rows,
             const RowShape& shape, void* rows, ElemType type);

  // Injection only, into rows no op of this run computed: the hidden state entering the first
  // stage of a model part. Throws EngineError without a lockstep source.
  void continue_from(std::string_view name, int layer, std::int64_t first_position, std::int64_t n_rows,
                     const RowShape& shape, float* rows);

  // Record only: a tap no later op reads (attn.probs, a side output of the attention kernel).
  void record(std::string_view name, int layer, std::int64_t first_position, std::int64_t n_rows,
              const RowShape& shape, const float* rows);

private:
  void record_typed(std::string_view name, int layer, std::int64_t first_position,
                    std::int64_t n_rows, const RowShape& shape, const void* rows, ElemType type);
  void inject(std::string_view name, int layer, std::int64_t first_position, std::int64_t n_rows,
              const RowShape& shape, void* rows, ElemType type);

  TraceWriter* trace_;
  const LockstepSource* lockstep_;
  Executor& ex_;
  std::vector<float> staging_;        // host copy of an enabled tap, grown on demand
  std::vector<std::uint16_t> raw16_;  // 16-bit rows copied from or to the device
};

}  // namespace tapdiff::engine
