// The CUDA executor's GEMM (CUDA builds only): cublasSgemm for float32 operands; for 16-bit
// weights, B (float32 activations already rounded to the weight type, so exactly
// representable) is packed into a 16-bit scratch and cublasGemmEx runs with a float32 C and
// CUBLAS_COMPUTE_32F accumulation.
#pragma once

#include <cublas_v2.h>

#include "engine/device/buffer.hpp"
#include "engine/device/stream.hpp"
#include "engine/gemm/gemm.hpp"

namespace tapdiff::engine {

class CublasGemm {
public:
  explicit CublasGemm(CudaStream stream);
  ~CublasGemm();
  CublasGemm(const CublasGemm&) = delete;
  CublasGemm& operator=(const CublasGemm&) = delete;

  void run(const GemmArgs& g);

private:
  cublasHandle_t handle_ = nullptr;
  CudaStream stream_ = nullptr;
  void* scratch_ = nullptr;  // 16-bit copy of B, grown on demand
  std::size_t scratch_bytes_ = 0;
};

}  // namespace tapdiff::engine
