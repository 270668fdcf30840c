// Checked CUDA and cuBLAS calls (CUDA builds only): a failure throws EngineError with the
// statement, file:line and the API's own error string.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

namespace tapdiff::engine {

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* what, const char* file,
                                   int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* what, const char* file,
                                     int line);

inline void check_cuda(cudaError_t status, const char* what, const char* file, int line) {
  if (status != cudaSuccess) throw_cuda_error(status, what, file, line);
}

inline void check_cublas(cublasStatus_t status, const char* what, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS) throw_cublas_error(status, what, file, line);
}

}  // namespace tapdiff::engine

#define TD_CUDA_CHECK(call) ::tapdiff::engine::check_cuda((call), #call, __FILE__, __LINE__)
#define TD_CUBLAS_CHECK(call) ::tapdiff::engine::check_cublas((call), #call, __FILE__, __LINE__)
// After every kernel launch: launch-configuration errors surface here, not at the next sync.
#define TD_CUDA_CHECK_LAUNCH(kernel_name) \
  ::tapdiff::engine::check_cuda(cudaGetLastError(), "launch of " kernel_name, __FILE__, __LINE__)
