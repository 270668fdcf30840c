// This tapdiff was configured without libllama: `--backend llama.cpp` says why and how to get it.
#include <stdexcept>

#include "adapters/llama_cpp/llama_run.hpp"

namespace tapdiff::adapters::llama_cpp {

namespace {
constexpr const char* kWhy =
    "this tapdiff was built without llama.cpp: CMake found no libllama (the llama-cpp-python package in "
    "build/venv, which scripts/bootstrap.sh installs; see docs/guide.md, \"Debug your llama.cpp backend\")";
}

bool available(std::string* why) {
  if (why != nullptr) *why = kWhy;
  return false;
}

struct LlamaRun::Impl {};

LlamaRun::LlamaRun(const std::string&, const LlamaOptions&, int) { throw std::invalid_argument(kWhy); }
LlamaRun::~LlamaRun() = default;
void LlamaRun::describe(TraceMetadata&) const {}
std::vector<int> LlamaRun::generate(const std::vector<int>&, int, const TapDims&, bool, TraceWriter*,
                                    const StepCallback&) {
  throw std::invalid_argument(kWhy);
}

}  // namespace tapdiff::adapters::llama_cpp
