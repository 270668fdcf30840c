// The one exception type of the tracer: every message names the file, the HDF5 object and
// what was expected, e.g. "trace.h5: /taps/attn_q/data: expected rank 3, got 2".
// The CLI maps TraceError to exit code 2.
#pragma once

#include <stdexcept>
#include <string>

namespace tapdiff {

class TraceError : public std::runtime_error {
public:
  // "<file>: <object>: <problem>"
  TraceError(const std::string& file, const std::string& object, const std::string& problem);

  const std::string& file() const { return file_; }
  const std::string& object() const { return object_; }
  const std::string& problem() const { return problem_; }

private:
  std::string file_;
  std::string object_;
  std::string problem_;
};

}  // namespace tapdiff
