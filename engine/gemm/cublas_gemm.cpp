#include "engine/gemm/cublas_gemm.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <stdexcept>

#include "engine/device/cuda_check.hpp"
#include "engine/kernels/convert.hpp"

namespace tapdiff::engine {
namespace {

cublasOperation_t cublas_op(GemmOp op) { return op == GemmOp::T ? CUBLAS_OP_T : CUBLAS_OP_N; }

cudaDataType_t cuda_type(ElemType t) {
  switch (t) {
    case ElemType::f16:
      return CUDA_R_16F;
    case ElemType::bf16:
      return CUDA_R_16BF;
    case ElemType::f32:
      break;
  }
  return CUDA_R_32F;
}

}  // namespace

CublasGemm::CublasGemm(CudaStream stream) : stream_(stream) {
  TD_CUBLAS_CHECK(cublasCreate(&handle_));
  TD_CUBLAS_CHECK(cublasSetStream(handle_, stream_));
  // No TF32 or other reduced-precision shortcuts: float32 math as specified.
  TD_CUBLAS_CHECK(cublasSetMathMode(handle_, CUBLAS_PEDANTIC_MATH));
}

CublasGemm::~CublasGemm() {
  if (scratch_ != nullptr) cudaFree(scratch_);
  if (handle_ != nullptr) cublasDestroy(handle_);
}

void CublasGemm::run(const GemmArgs& g) {
  if (g.m == 0 || g.n == 0) return;
  if (g.a_type == ElemType::f32 && g.b_type == ElemType::f32) {
    TD_CUBLAS_CHECK(cublasSgemm(handle_, cublas_op(g.op_a), cublas_op(g.op_b), g.m, g.n, g.k,
                                &g.alpha, static_cast<const float*>(g.a), g.lda,
                                static_cast<const float*>(g.b), g.ldb, &g.beta, g.c, g.ldc));
    return;
  }
  if (g.a_type == ElemType::f32 || g.b_type != ElemType::f32)
    throw std::invalid_argument(fmt::format("gemm: expected 16-bit A and float32 B, got {} and {}",
                                            elem_type_name(g.a_type), elem_type_name(g.b_type)));
  const std::int64_t extent = gemm_b_extent(g);
  const std::size_t bytes = std::size_t(extent) * elem_size(g.a_type);
  if (bytes > scratch_bytes_) {
    TD_CUDA_CHECK(cudaStreamSynchronize(stream_));  // earlier GEMMs may still read the scratch
    if (scratch_ != nullptr) TD_CUDA_CHECK(cudaFree(scratch_));
    scratch_ = nullptr;
    scratch_bytes_ = 0;
    TD_CUDA_CHECK(cudaMalloc(&scratch_, bytes));
    scratch_bytes_ = bytes;
  }
  convert_cuda(ConvertArgs{g.b, ElemType::f32, scratch_, g.a_type, extent}, stream_);
  TD_CUBLAS_CHECK(cublasGemmEx(handle_, cublas_op(g.op_a), cublas_op(g.op_b), g.m, g.n, g.k,
                               &g.alpha, g.a, cuda_type(g.a_type), g.lda, scratch_,
                               cuda_type(g.a_type), g.ldb, &g.beta, g.c, CUDA_R_32F, g.ldc,
                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace tapdiff::engine
