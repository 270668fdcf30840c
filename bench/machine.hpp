// A one-line description of the machine a benchmark ran on, for results files.
#pragma once

#include <string>

namespace tapdiff::bench {

std::string machine_description();  // "AMD EPYC, 2 cores, 23.4 GiB, Debian GNU/Linux 12, g++ 12.2.0"
std::string load_average();         // "1.94 1.90 2.35" (1, 5 and 15 minutes)

}  // namespace tapdiff::bench
