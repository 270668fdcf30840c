#include "model/error.hpp"

#include <fmt/format.h>

namespace tapdiff {

static std::string format_input_error(const std::string& file, const std::string& field,
                                      const std::string& problem, std::int64_t offset) {
  if (offset < 0) return fmt::format("{}: {}: {}", file, field, problem);
  return fmt::format("{}: {} (offset {}): {}", file, field, offset, problem);
}

InputError::InputError(const std::string& file, const std::string& field,
                       const std::string& problem, std::int64_t offset)
    : std::runtime_error(format_input_error(file, field, problem, offset)),
      file_(file), field_(field), offset_(offset) {}

}  // namespace tapdiff
