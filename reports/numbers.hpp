// Number spelling shared by the renderers, so a value reads the same in every format.
#pragma once

#include <string>

namespace tapdiff::reports {

std::string sci(double value, int digits = 2);  // "3.20e-02"; "0"; "nan", "inf", "-inf"
std::string fixed(double value, int digits);    // "0.912345"; non-finite as sci()
std::string percent(double rate);               // 0.9167 -> "91.67%"
std::string cosine_text(double cosine);         // 6 decimals: 0.999999 is not 1
// b's error grew this many times over its inputs' error (nmse / input_nmse): "×2.9e+07",
// "" when the inputs are exact or a value is not finite.
std::string power_of_ten(int exponent);  // "10⁻¹²", "10³", "1" (axis labels)
std::string jump_text(double nmse, double input_nmse);

}  // namespace tapdiff::reports
