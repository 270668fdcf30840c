// GEMM with exactly cuBLAS's column-major semantics, on both executors:
//   C (m × n, ld ldc) = alpha · op(A) · op(B) + beta · C
//   op(A) is m × k: A stored k × m (lda >= k) under T, m × k (lda >= m) under N
//   op(B) is k × n: B stored n × k (ldb >= n) under T, k × n (ldb >= k) under N
// The host executor calls OpenBLAS cblas_sgemm(CblasColMajor, ...); the CUDA executor
// cublasSgemm (f32) or cublasGemmEx (16-bit A and B, float32 C and accumulation). A wrong op
// flag or leading dimension therefore gives the same wrong numbers on both.
//
// The engine's convention: a GGUF weight W [out, in] is row-major, i.e. column-major [in, out]
// with ld = in; a batch X of n rows [n, in] is column-major [in, n] with ld = in. So
// Y [n, out] = X Wᵀ is, in column-major terms, Y [out, n] = Wᵀ X:
//   gemm(T, N, out, n, in, 1, W, in, X, in, 0, Y, out)
#pragma once

#include <cstdint>

#include "engine/device/elem_type.hpp"
#include "engine/kernels/dequant.hpp"

namespace tapdiff::engine {

enum class GemmOp : std::uint8_t { N, T };  // CUBLAS_OP_N, CUBLAS_OP_T

struct GemmArgs {
  GemmOp op_a = GemmOp::N;
  GemmOp op_b = GemmOp::N;
  int m = 0, n = 0, k = 0;
  float alpha = 1.0f;
  const void* a = nullptr;
  ElemType a_type = ElemType::f32;
  int lda = 0;
  const void* b = nullptr;  // activations: float32 values already rounded to a_type
  ElemType b_type = ElemType::f32;
  int ldb = 0;
  float beta = 0.0f;
  float* c = nullptr;  // float32 output
  int ldc = 0;
};

// A product of a weight in its GGUF encoding, as Forward multiplies a weight read by rows:
// C (m × n, ld ldc) = gemm(T, N, m, n, k, 1, W, k, B, ldb, 0, C, ldc) for rows [0, m) of W,
// row-major with k elements a row, decoded as dequantize decodes it. The host's AVX-512 tiles
// decode W a group of rows at a time into cache (gemm_tiles.hpp), where a decoded copy of a
// 7B model's matrix would be written out to memory and read back.
struct EncodedGemmArgs {
  Encoded w = {};
  int m = 0, n = 0, k = 0;
  const float* b = nullptr;
  int ldb = 0;
  float* c = nullptr;
  int ldc = 0;
  ElemType round = ElemType::f32;  // the precision each weight is rounded to first
};

// cuBLAS's argument rules (dimensions >= 0, leading dimensions large enough); throws
// std::invalid_argument naming the argument.
void validate(const GemmArgs& g);
// The same for the product of an encoded W, whose rows are whole blocks of its type.
void validate(const EncodedGemmArgs& g);

// Elements of B as stored (what a converted copy of B must hold).
std::int64_t gemm_b_extent(const GemmArgs& g);

// OpenBLAS, float32 operands only (the host executor stores 16-bit weights as rounded float32).
void gemm_host(const GemmArgs& g);
// The AVX-512 tiles on an encoded W; throws where they do not apply (gemm_tiles_decode).
void gemm_encoded_host(const EncodedGemmArgs& g);

}  // namespace tapdiff::engine
