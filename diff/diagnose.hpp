// Diagnosis at the first divergence (DESIGN.md): signatures (which positions, which tap, the
// error's shape), then hypothesis replay; the result names the bug class, the variant that
// reproduces the actual values with its residual, the runners-up, and the code to inspect.
#pragma once

#include <string>

#include "diff/result.hpp"
#include "tapdiff/trace_reader.hpp"

namespace tapdiff::diff {

// What to inspect for a bug class, one phrase ("the KV cache bookkeeping: ...").
std::string code_area(const std::string& bug_class);

// model_path: the GGUF to replay with; "" uses the expected trace's model_path.
Diagnosis diagnose(const DiffResult& result, const TraceReader& expected, const TraceReader& actual,
                   const std::string& model_path);

// The same at any divergence `at`. Hypotheses replay the op from `inputs`: the actual trace
// (the op ran on the actual run's own inputs), or in lockstep the expected trace (the actual
// run continued from the expected values at every tap).
Diagnosis diagnose_at(const DiffResult& result, const FirstDivergence& at, const TraceReader& expected,
                      const TraceReader& actual, const TraceReader& inputs, const std::string& model_path);

}  // namespace tapdiff::diff
