// The engine's public options (see generate.hpp).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace tapdiff::engine {

enum class Backend { host, cuda };
enum class Precision { f32, f16, bf16 };

std::string_view backend_name(Backend backend);        // "host", "cuda"
std::string_view precision_name(Precision precision);  // "f32", "f16", "bf16"
std::optional<Backend> parse_backend(std::string_view name);
std::optional<Precision> parse_precision(std::string_view name);

struct EngineOptions {
  Backend backend = Backend::host;
  Precision precision = Precision::f32;
  std::string fault;  // "" = none; a name from fault_catalogue()
  int n_predict = 16;
  // After each forward step: (last position run, token chosen, steps done, steps total).
  std::function<void(int position, int token, int steps_done, int steps_total)> on_step;
};

}  // namespace tapdiff::engine
