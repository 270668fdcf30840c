#include "engine/taps.hpp"

#include "engine/executor.hpp"
#include "engine/kernels/convert.hpp"
#include "engine/kernels/host_loop.hpp"
#include "tapdiff/trace_writer.hpp"

namespace tapdiff::engine {

bool TapRecorder::enabled(std::string_view name, int layer, std::int64_t first_position,
                          std::int64_t n_rows) const {
  return trace_ != nullptr && trace_->enabled(name, layer, first_position, n_rows);
}

void TapRecorder::record(std::string_view name, int layer, std::int64_t first_position,
                         std::int64_t n_rows, const RowShape& shape, const float* rows) {
  record(name, layer, first_position, n_rows, shape, rows, ElemType::f32);
}

void TapRecorder::record(std::string_view name, int layer, std::int64_t first_position,
                         std::int64_t n_rows, const RowShape& shape, const void* rows,
                         ElemType type) {
  if (!enabled(name, layer, first_position, n_rows)) return;
  const std::int64_t n = n_rows * shape.elements();
  const auto count = static_cast<std::size_t>(n);
  const float* host_rows = nullptr;
  if (type == ElemType::f32 && ex_.host_visible()) {
    host_rows = static_cast<const float*>(rows);
  } else {
    staging_.resize(count);
    const void* src = rows;
    if (!ex_.host_visible()) {
      if (type == ElemType::f32) {
        ex_.download(staging_.data(), rows, count * sizeof(float));
      } else {
        raw16_.resize(count);
        ex_.download(raw16_.data(), rows, count * sizeof(std::uint16_t));
        src = raw16_.data();
      }
    }
    if (type != ElemType::f32) {
      const ConvertArgs widen{src, type, staging_.data(), ElemType::f32, n};
      host_for(n, 4, [&](std::int64_t i) { convert_body(widen, i); });
    }
    host_rows = staging_.data();
  }
  trace_->record(name, layer, first_position, n_rows, shape, host_rows);
}

}  // namespace tapdiff::engine
