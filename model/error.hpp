// Errors for bad input: every message names the file, the field, where it sits and what was
// expected, so a user can act on it without a debugger. The CLI maps InputError to exit 2.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace tapdiff {

class InputError : public std::runtime_error {
public:
  // "<file>: <field> (offset <offset>): <problem>"; offset < 0 leaves the offset out.
  InputError(const std::string& file, const std::string& field, const std::string& problem,
             std::int64_t offset = -1);

  const std::string& file() const { return file_; }
  const std::string& field() const { return field_; }
  std::int64_t offset() const { return offset_; }

private:
  std::string file_;
  std::string field_;
  std::int64_t offset_;
};

}  // namespace tapdiff
