// Diagnosis at the first divergence (DESIGN.md): signatures (which positions, which tap, the
// error's shape), then hypothesis replay; the result names the bug class, the variant that
// reproduces the actual values with its residual, the runners-up, and the code to inspect.
#pragma once

#include <string>

#include "diff/result.hpp"
#include "tapdiff/trace_reader.hpp"

namespace tapdiff::diff {

// model_path: the GGUF to replay with; "" uses the expected trace's model_path.
Diagnosis diagnose(const DiffResult& result, const TraceReader& expected, const TraceReader& actual,
                   const std::string& model_path);

}  // namespace tapdiff::diff
