// libFuzzer target: the tolerance-profile JSON parser (--profile FILE). Malformed JSON, wrong
// types and out-of-range values may only end in InputError; an accepted profile holds usable
// thresholds.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "diff/tolerance.hpp"
#include "model/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const tapdiff::diff::ToleranceProfile p = tapdiff::diff::parse_profile(text, "fuzz.json");
    auto usable = [](double x) { return std::isfinite(x) && x > 0; };
    for (const auto& [tap_class, nmse] : p.nmse) {
      if (!usable(nmse) || p.threshold(tap_class) != nmse) std::abort();
    }
    if (!usable(p.default_nmse) || !usable(p.jump_factor)) std::abort();
  } catch (const tapdiff::InputError&) {
  }
  return 0;
}
