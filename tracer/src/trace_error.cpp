#include "tapdiff/trace_error.hpp"

namespace tapdiff {

TraceError::TraceError(const std::string& file, const std::string& object,
                       const std::string& problem)
    : std::runtime_error(file + ": " + object + ": " + problem),
      file_(file),
      object_(object),
      problem_(problem) {}

}  // namespace tapdiff
