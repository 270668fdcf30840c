#include "engine/cuda_executor.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "engine/device/cuda_check.hpp"
#include "engine/gemm/cublas_gemm.hpp"

namespace tapdiff::engine {

CudaExecutor::CudaExecutor() {
  TD_CUDA_CHECK(cudaSetDevice(0));
  cudaDeviceProp prop{};
  TD_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  description_ = fmt::format("CUDA executor ({}, compute capability {}.{}, cuBLAS)", prop.name,
                             prop.major, prop.minor);
  TD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  gemm_ = std::make_unique<CublasGemm>(stream_);
}

CudaExecutor::~CudaExecutor() {
  gemm_.reset();
  if (stream_ != nullptr) {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
}

Buffer CudaExecutor::allocate(std::size_t bytes) {
  void* p = nullptr;
  TD_CUDA_CHECK(cudaMalloc(&p, bytes == 0 ? 1 : bytes));
  Buffer buffer(p, bytes, [](void* q) noexcept { cudaFree(q); });
  TD_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
  return buffer;
}

void CudaExecutor::upload(void* dst, const void* src, std::size_t bytes) {
  // The source may be a temporary: wait for the copy before returning.
  TD_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
  TD_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaExecutor::download(void* dst, const void* src, std::size_t bytes) {
  TD_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  TD_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaExecutor::synchronize() { TD_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

void CudaExecutor::launch(const GemmArgs& a) { gemm_->run(a); }

}  // namespace tapdiff::engine
