#include "engine/device/cuda_check.hpp"

#include <fmt/format.h>

#include "engine/device/error.hpp"

namespace tapdiff::engine {

void throw_cuda_error(cudaError_t status, const char* what, const char* file, int line) {
  cudaGetLastError();  // reset the (non-sticky) last error so later calls report their own
  throw EngineError(fmt::format("{}:{}: {} failed: {} ({}, error {})", file, line, what,
                                cudaGetErrorString(status), cudaGetErrorName(status),
                                static_cast<int>(status)));
}

void throw_cublas_error(cublasStatus_t status, const char* what, const char* file, int line) {
  throw EngineError(fmt::format("{}:{}: {} failed: {} ({})", file, line, what,
                                cublasGetStatusString(status), cublasGetStatusName(status)));
}

}  // namespace tapdiff::engine
