// The text of python/tapdiff_repro.py, compiled in: `tapdiff repro` writes it into every repro
// directory as repro.py, so the directory needs no tapdiff checkout.
#pragma once

#include <string_view>

namespace tapdiff {

extern const std::string_view kReproScript;

}  // namespace tapdiff
