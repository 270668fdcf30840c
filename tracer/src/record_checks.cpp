#include "record_checks.hpp"

#include <stdexcept>

#include "tapdiff/tap_catalogue.hpp"
#include "tapdiff/tap_filter.hpp"
#include "tapdiff/trace_error.hpp"

namespace tapdiff {
namespace {

constexpr std::size_t kMaxNameLength = 200;
constexpr int kMaxLayer = 1'000'000;
constexpr std::int64_t kMaxRowElements = std::int64_t{1} << 36;

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '-';
}

std::string name_problem(std::string_view name, int layer) {
  if (name.empty()) return "empty tap name";
  if (name.size() > kMaxNameLength) return "tap name longer than 200 characters";
  for (char c : name) {
    if (!name_char(c)) return "tap name may only use letters, digits, '_', '.' and '-'";
  }
  if (name.front() == '.' || name.back() == '.') return "tap name starts or ends with '.'";
  if (layer < 0 && name.substr(0, 4) == "blk.") {
    return "a global tap (layer -1) may not be named blk.*: pass the short name and the layer";
  }
  return {};
}

bool hex_digest(const std::string& text) {
  if (text.size() != 64) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace

void check_record(const std::string& path, std::string_view name, int layer,
                  std::int64_t first_position, std::int64_t n_rows, const RowShape& row_shape,
                  const float* rows) {
  auto reject = [&](const std::string& problem) {
    throw TraceError(path, "/taps/" + std::string(name), tap_layer_prefix(layer) + problem);
  };
  if (const std::string problem = name_problem(name, layer); !problem.empty()) reject(problem);
  if (layer < -1 || layer > kMaxLayer)
    reject("layer " + std::to_string(layer) + " is not in -1.." + std::to_string(kMaxLayer));
  if (first_position < 0) reject("first_position " + std::to_string(first_position) + " < 0");
  if (n_rows < 1) reject("n_rows " + std::to_string(n_rows) + " < 1");
  if (!row_shape.valid()) reject("row shape " + row_shape.to_string() + " has a dimension < 1");
  if (row_shape.elements() > kMaxRowElements / n_rows) reject("record too large");
  if (rows == nullptr) reject("rows is null");
}

void check_metadata(const std::string& path, const TraceMetadata& m) {
  auto reject = [&](const std::string& problem) { throw TraceError(path, "/", problem); };
  if (!m.model_sha256.empty() && !hex_digest(m.model_sha256)) {
    reject("model_sha256: expected 64 lowercase hex digits or empty, got \"" + m.model_sha256 +
           "\"");
  }
  if (m.prompt_length < 0) reject("prompt_length " + std::to_string(m.prompt_length) + " < 0");
  if (m.precision.empty()) reject("precision is empty");
  if (m.fault.empty()) reject("fault is empty (use \"none\")");
  auto check_keys = [&](const char* group, const auto& entries) {
    for (const auto& entry : entries)
      if (entry.first.empty() || entry.first.find('/') != std::string::npos)
        reject(std::string(group) + " key \"" + entry.first + "\" is empty or contains '/'");
  };
  check_keys("hparams", m.hparams);
  check_keys("producer_settings", m.settings);
  check_keys("unavailable", m.unavailable);
  for (const auto& [name, layout] : m.layouts) {
    const TapSpec* spec = find_tap_spec(name);
    if (!spec) reject("layouts[\"" + name + "\"]: expected a tap of the catalogue (docs/taps.md)");
    if (!m.dims || !m.dims->complete()) reject("layouts[\"" + name + "\"]: a layout needs complete dims");
    try {
      stored_row_shape(*spec, layout, *m.dims);
    } catch (const std::invalid_argument& e) {
      reject("layouts[\"" + name + "\"] (\"" + layout.to_string() + "\"): " + e.what());
    }
  }
}

}  // namespace tapdiff
