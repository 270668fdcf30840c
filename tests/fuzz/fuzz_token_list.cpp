// libFuzzer target: the CLI's token-list parser (--tokens 1,2,3). Bad text may only end in
// std::invalid_argument; accepted text must hold only non-negative ids.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string_view>

#include "app/token_list.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    for (const int id : tapdiff::parse_token_list(text)) {
      if (id < 0) std::abort();
    }
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
