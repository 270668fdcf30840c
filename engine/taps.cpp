#include "engine/taps.hpp"

#include <fmt/format.h>

#include "engine/device/error.hpp"
#include "engine/executor.hpp"
#include "engine/kernels/convert.hpp"
#include "engine/kernels/host_loop.hpp"
#include "model/error.hpp"
#include "tapdiff/tap_filter.hpp"
#include "tapdiff/trace_reader.hpp"
#include "tapdiff/trace_writer.hpp"

namespace tapdiff::engine {

LockstepSource::LockstepSource(const std::string& path)
    : reader_(std::make_unique<TraceReader>(path)) {}
LockstepSource::~LockstepSource() = default;
LockstepSource::LockstepSource(LockstepSource&&) noexcept = default;
LockstepSource& LockstepSource::operator=(LockstepSource&&) noexcept = default;

std::vector<float> LockstepSource::rows(std::string_view name, int layer,
                                        std::int64_t first_position, std::int64_t n_rows,
                                        std::int64_t row_elements) const {
  const TapInfo* tap = reader_->find(name, layer);
  const std::string object = fmt::format("/taps/{}", name);
  const std::string tap_text = tap_layer_prefix(layer);
  const std::int64_t last = first_position + n_rows - 1;
  if (tap == nullptr && reader_->taps().empty() && !reader_->complete())
    throw InputError(reader_->path(), object,
                     tap_text + "the lockstep source holds no taps: its run was interrupted before its first step "
                                "was committed");
  if (tap == nullptr)
    throw InputError(reader_->path(), object,
                     tap_text +
                         "lockstep needs every tap of the source trace: record it without --taps, "
                         "--layers or --positions filters");
  // A shape bug (ffn-dim-wrong): nothing to inject; the diff reports the shape finding.
  if (tap->row_size != row_elements) return {};
  TapRows rows = reader_->read(*tap, first_position, last);
  if (static_cast<std::int64_t>(rows.size()) != n_rows)
    throw InputError(reader_->path(), object,
                     tap_text + fmt::format("expected positions {}..{}, the trace holds {} of them",
                                            first_position, last, rows.size()));
  return std::move(rows.values);
}

bool TapProbe::enabled(std::string_view name, int layer, std::int64_t first_position,
                       std::int64_t n_rows) const {
  return trace_ != nullptr && trace_->enabled(name, layer, first_position, n_rows);
}

void TapProbe::probe(std::string_view name, int layer, std::int64_t first_position,
                     std::int64_t n_rows, const RowShape& shape, float* rows) {
  probe(name, layer, first_position, n_rows, shape, rows, ElemType::f32);
}

void TapProbe::probe(std::string_view name, int layer, std::int64_t first_position,
                     std::int64_t n_rows, const RowShape& shape, void* rows, ElemType type) {
  record_typed(name, layer, first_position, n_rows, shape, rows, type);
  if (lockstep_ != nullptr) inject(name, layer, first_position, n_rows, shape, rows, type);
}

void TapProbe::continue_from(std::string_view name, int layer, std::int64_t first_position,
                             std::int64_t n_rows, const RowShape& shape, float* rows) {
  if (lockstep_ == nullptr)
    throw EngineError(fmt::format("{}: the input of a model part comes from a lockstep trace; none was given", name));
  inject(name, layer, first_position, n_rows, shape, rows, ElemType::f32);
}

void TapProbe::record(std::string_view name, int layer, std::int64_t first_position,
                      std::int64_t n_rows, const RowShape& shape, const float* rows) {
  record_typed(name, layer, first_position, n_rows, shape, rows, ElemType::f32);
}

void TapProbe::record_typed(std::string_view name, int layer, std::int64_t first_position,
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

// One code path for both executors: the executor's upload (a memcpy on the host, a
// host-to-device copy on CUDA) into the op's output buffer.
void TapProbe::inject(std::string_view name, int layer, std::int64_t first_position,
                      std::int64_t n_rows, const RowShape& shape, void* rows, ElemType type) {
  const std::vector<float> source =
      lockstep_->rows(name, layer, first_position, n_rows, shape.elements());
  if (source.empty()) return;
  const auto n = static_cast<std::int64_t>(source.size());
  if (type == ElemType::f32) {
    ex_.upload(rows, source.data(), source.size() * sizeof(float));
    return;
  }
  raw16_.resize(source.size());
  const ConvertArgs narrow{source.data(), ElemType::f32, raw16_.data(), type, n};
  host_for(n, 4, [&](std::int64_t i) { convert_body(narrow, i); });
  ex_.upload(rows, raw16_.data(), raw16_.size() * sizeof(std::uint16_t));
}

}  // namespace tapdiff::engine
