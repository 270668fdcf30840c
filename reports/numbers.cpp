#include "reports/numbers.hpp"

#include <fmt/format.h>

#include <cmath>

namespace tapdiff::reports {
namespace {

std::string nonfinite(double value) {
  if (std::isnan(value)) return "nan";
  return value > 0 ? "inf" : "-inf";
}

}  // namespace

std::string sci(double value, int digits) {
  if (!std::isfinite(value)) return nonfinite(value);
  if (value == 0) return "0";
  return fmt::format("{:.{}e}", value, digits);
}

std::string fixed(double value, int digits) {
  if (!std::isfinite(value)) return nonfinite(value);
  return fmt::format("{:.{}f}", value, digits);
}

std::string percent(double rate) {
  if (!std::isfinite(rate)) return nonfinite(rate);
  return fmt::format("{:.2f}%", 100.0 * rate);
}

std::string cosine_text(double cosine) { return fixed(cosine, 6); }

std::string power_of_ten(int exponent) {
  if (exponent == 0) return "1";
  static const char* const digits[] = {"\u2070", "\u00b9", "\u00b2", "\u00b3", "\u2074",
                                       "\u2075", "\u2076", "\u2077", "\u2078", "\u2079"};
  std::string out = exponent < 0 ? "10\u207b" : "10";
  for (char c : std::to_string(std::abs(exponent))) out += digits[c - '0'];
  return out;
}

std::string jump_text(double nmse, double input_nmse) {
  if (!(input_nmse > 0) || !std::isfinite(nmse) || !std::isfinite(input_nmse)) return "";
  return "\u00d7" + sci(nmse / input_nmse, 1);
}

}  // namespace tapdiff::reports
