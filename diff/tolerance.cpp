#include "diff/tolerance.hpp"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "diff/tap_graph.hpp"
#include "model/error.hpp"

namespace tapdiff::diff {

double ToleranceProfile::threshold(std::string_view tap_class) const {
  auto it = nmse.find(tap_class);
  return it == nmse.end() ? default_nmse : it->second;
}

ToleranceProfile builtin_profile(std::string_view name) {
  // NMSE thresholds; see docs/tolerance.md for the measurements behind them.
  ToleranceProfile p;
  p.name = std::string(name);
  if (name == "f32") {
    p.default_nmse = 1e-8;
    p.jump_factor = 10;
    p.own_error_floor_nmse = 3e-10;
  } else if (name == "f16") {
    p.default_nmse = 1e-4;
    p.jump_factor = 10;
  } else if (name == "bf16") {
    p.default_nmse = 3e-3;
    p.jump_factor = 10;
  } else if (name == "q8") {  // activations quantized to 8 bits before each GEMM (llama.cpp)
    // Only the GEMMs' own arithmetic is coarse: an output small next to its terms (an attention
    // sink's value vector) keeps the quantization noise of the terms, 1e-2 of it on
    // SmolLM2-135M. Every other op computes in f32 (attention on a quantized cache is replayed
    // as the cache stored it): what reaches it from a GEMM is inherited, for the jump test and,
    // where a softmax or a SiLU amplifies it, the replay band to judge.
    p.default_nmse = 3e-3;
    p.nmse = {{"projection", 3e-2}, {"logits", 3e-2}};
    p.replay_band_nmse = 3e-2;
    p.jump_factor = 10;
  } else {
    throw std::invalid_argument(
        fmt::format("--profile: unknown tolerance profile \"{}\" (expected f32, f16, bf16, q8 or a "
                    ".json file)",
                    name));
  }
  return p;
}

bool has_profile(std::string_view precision) {
  return precision == "f32" || precision == "f64" || precision == "f16" || precision == "bf16" || precision == "q8";
}

ToleranceProfile profile_for_precision(std::string_view precision) {
  return builtin_profile(has_profile(precision) && precision != "f64" ? precision : "f32");
}

ToleranceProfile profile_for_precisions(std::string_view expected, std::string_view actual) {
  ToleranceProfile a = profile_for_precision(expected);
  ToleranceProfile b = profile_for_precision(actual);
  // Finest first; q8's default is bf16's, its projections coarser.
  const auto rank = [](const ToleranceProfile& p) {
    const std::string_view order[] = {"f32", "f16", "bf16", "q8"};
    return std::find(std::begin(order), std::end(order), p.name) - std::begin(order);
  };
  return rank(a) > rank(b) ? a : b;
}

ToleranceProfile parse_profile(std::string_view text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e400
    throw InputError(source, "profile", fmt::format("expected JSON: {}", e.what()));
  }
  if (!j.is_object()) throw InputError(source, "profile", "expected a JSON object");
  auto number = [&](const nlohmann::json& v, const std::string& field) {
    if (!v.is_number()) throw InputError(source, field, fmt::format("expected a number, got {}", v.dump()));
    const double x = v.get<double>();
    if (!std::isfinite(x) || x <= 0)
      throw InputError(source, field, fmt::format("expected a positive number, got {}", v.dump()));
    return x;
  };
  if (!j.contains("base") || !j["base"].is_string())
    throw InputError(source, "base", "expected a string naming the profile to start from: f32, f16, bf16 or q8");
  ToleranceProfile p;
  try {
    p = builtin_profile(j["base"].get<std::string>());
  } catch (const std::invalid_argument&) {
    throw InputError(source, "base", fmt::format("expected f32, f16, bf16 or q8, got {}", j["base"].dump()));
  }
  p.name = fmt::format("{} ({})", source, p.name);
  for (const auto& [key, value] : j.items()) {
    if (key == "base") continue;
    if (key == "jump_factor") {
      p.jump_factor = number(value, key);
    } else if (key == "default_nmse") {
      p.default_nmse = number(value, key);
    } else if (key == "replay_band_nmse") {  // 0 turns the band off
      p.replay_band_nmse = value.is_number() && value.get<double>() == 0 ? 0.0 : number(value, key);
    } else if (key == "own_error_floor_nmse") {  // 0 turns the suspects off
      p.own_error_floor_nmse = value.is_number() && value.get<double>() == 0 ? 0.0 : number(value, key);
    } else if (key == "nmse") {
      if (!value.is_object()) throw InputError(source, key, "expected an object of tap class → threshold");
      for (const auto& [cls, threshold] : value.items()) {
        const auto classes = tap_classes();
        bool known = false;
        for (auto c : classes) known = known || c == cls;
        if (!known)
          throw InputError(source, "nmse." + cls,
                           fmt::format("unknown tap class (expected one of {})", fmt::join(classes, ", ")));
        p.nmse[cls] = number(threshold, "nmse." + cls);
      }
    } else {
      throw InputError(source, key, "unknown key (expected base, jump_factor, default_nmse, nmse, replay_band_nmse, own_error_floor_nmse)");
    }
  }
  return p;
}

ToleranceProfile load_profile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError(path, "profile", "cannot open the file");
  std::stringstream text;
  text << in.rdbuf();
  return parse_profile(text.str(), path);
}

}  // namespace tapdiff::diff
