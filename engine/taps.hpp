// Tap recording from executor memory. A tap whose (name, layer, positions) the trace's filter
// disables costs one enabled() call: no synchronization, no copy, no allocation. An enabled
// tap is read in place from host memory, or copied from the device (which synchronizes);
// 16-bit data (the KV cache) is widened to float32 first.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "engine/device/elem_type.hpp"
#include "tapdiff/row_shape.hpp"

namespace tapdiff {
class TraceWriter;
}

namespace tapdiff::engine {

class Executor;

class TapRecorder {
public:
  TapRecorder(TraceWriter* trace, Executor& ex) : trace_(trace), ex_(ex) {}

  bool enabled(std::string_view name, int layer, std::int64_t first_position,
               std::int64_t n_rows) const;

  // rows: (n_rows, shape...) float32 in executor memory, positions first_position onwards.
  void record(std::string_view name, int layer, std::int64_t first_position, std::int64_t n_rows,
              const RowShape& shape, const float* rows);
  // The same for rows stored as `type`.
  void record(std::string_view name, int layer, std::int64_t first_position, std::int64_t n_rows,
              const RowShape& shape, const void* rows, ElemType type);

private:
  TraceWriter* trace_;
  Executor& ex_;
  std::vector<float> staging_;        // host copy of an enabled tap, grown on demand
  std::vector<std::uint16_t> raw16_;  // 16-bit rows copied from the device
};

}  // namespace tapdiff::engine
