// tapdiff's exit codes (DESIGN.md "CLI"): what CI scripts and `git bisect run` rely on.
#pragma once

namespace tapdiff {

inline constexpr int kExitPass = 0;
inline constexpr int kExitDiverged = 1;
inline constexpr int kExitInputError = 2;
inline constexpr int kExitCannotTest = 125;

}  // namespace tapdiff
