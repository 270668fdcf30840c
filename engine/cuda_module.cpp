// libtapdiff_cuda.so's entry points (device/cuda_module.hpp): device detection and the CUDA
// executor. cudaGetDeviceCount fails with error 35 (insufficient driver) on machines without a
// GPU driver, and cublasCreate fails with NOT_INITIALIZED where the driver exists but no usable
// device does; both mean "no device". The entry points throw nothing: a reason travels as text.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <cstring>
#include <exception>
#include <string>
#include <type_traits>

#include "cuda_module_tag.hpp"
#include "engine/cuda_executor.hpp"
#include "engine/device/cuda_module.hpp"

namespace tapdiff::engine {
namespace {

void write_reason(const std::string& reason, char* why, std::size_t cap) {
  if (cap == 0) return;
  const std::size_t n = reason.size() < cap - 1 ? reason.size() : cap - 1;
  std::memcpy(why, reason.data(), n);
  why[n] = '\0';
}

// Empty when a device and cuBLAS can be used; otherwise why not.
std::string device_unavailable_reason() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();
    return fmt::format("cudaGetDeviceCount: {} ({}, error {})", cudaGetErrorString(status),
                       cudaGetErrorName(status), static_cast<int>(status));
  }
  if (count == 0) return "cudaGetDeviceCount: no CUDA device";
  cublasHandle_t handle = nullptr;
  const cublasStatus_t blas = cublasCreate(&handle);
  if (blas != CUBLAS_STATUS_SUCCESS)
    return fmt::format("cublasCreate: {} ({})", cublasGetStatusString(blas), cublasGetStatusName(blas));
  cublasDestroy(handle);
  return {};
}

}  // namespace
}  // namespace tapdiff::engine

extern "C" __attribute__((visibility("default"))) const char* tapdiff_cuda_module_tag() {
  return TAPDIFF_CUDA_MODULE_TAG;
}

extern "C" __attribute__((visibility("default"))) int tapdiff_cuda_available(char* why, std::size_t cap) {
  try {
    const std::string reason = tapdiff::engine::device_unavailable_reason();
    tapdiff::engine::write_reason(reason, why, cap);
    return reason.empty() ? 1 : 0;
  } catch (const std::exception& e) {
    tapdiff::engine::write_reason(e.what(), why, cap);
    return 0;
  }
}

extern "C" __attribute__((visibility("default"))) tapdiff::engine::Executor* tapdiff_cuda_executor_new(
    char* why, std::size_t cap) {
  try {
    return new tapdiff::engine::CudaExecutor();
  } catch (const std::exception& e) {
    tapdiff::engine::write_reason(e.what(), why, cap);
    return nullptr;
  }
}

// The signatures the loader looks up, checked against the ones it expects.
static_assert(std::is_same_v<decltype(tapdiff_cuda_module_tag), TapdiffCudaModuleTag>);
static_assert(std::is_same_v<decltype(tapdiff_cuda_available), TapdiffCudaAvailable>);
static_assert(std::is_same_v<decltype(tapdiff_cuda_executor_new), TapdiffCudaExecutorNew>);
