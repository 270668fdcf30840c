// How tapdiff's JSON files spell a number: JSON has no NaN or infinity, so those are the strings
// "nan", "inf", "-inf" (docs/report-json.md, "Numbers"). Shared by the reports and repro manifests.
#pragma once

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

namespace tapdiff::reports {

inline nlohmann::ordered_json json_number(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return value;
}

// The value of a field written by json_number (a number or one of its three strings).
inline double json_number_value(const nlohmann::ordered_json& field) {
  return field.is_string() ? std::stod(field.get<std::string>()) : field.get<double>();
}

}  // namespace tapdiff::reports
