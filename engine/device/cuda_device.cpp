// CUDA builds: device detection. cudaGetDeviceCount fails with error 35 (insufficient
// driver) on machines without a GPU driver, and cublasCreate fails with NOT_INITIALIZED
// where the driver exists but no usable device does; both mean "no device".
#include "engine/device/cuda_device.hpp"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "engine/cuda_executor.hpp"
#include "engine/device/error.hpp"

namespace tapdiff::engine {

bool cuda_device_available(std::string* reason) {
  auto fail = [&](std::string why) {
    if (reason != nullptr) *reason = std::move(why);
    return false;
  };
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();
    return fail(fmt::format("cudaGetDeviceCount: {} ({}, error {})", cudaGetErrorString(status),
                            cudaGetErrorName(status), static_cast<int>(status)));
  }
  if (count == 0) return fail("cudaGetDeviceCount: no CUDA device");
  cublasHandle_t handle = nullptr;
  const cublasStatus_t blas = cublasCreate(&handle);
  if (blas != CUBLAS_STATUS_SUCCESS)
    return fail(fmt::format("cublasCreate: {} ({})", cublasGetStatusString(blas),
                            cublasGetStatusName(blas)));
  cublasDestroy(handle);
  return true;
}

std::unique_ptr<Executor> make_cuda_executor() {
  std::string reason;
  if (!cuda_device_available(&reason)) throw NoDeviceError("no CUDA device: " + reason);
  return std::make_unique<CudaExecutor>();
}

}  // namespace tapdiff::engine
