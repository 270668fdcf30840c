// The CUDA stream type without the CUDA headers: cudaStream_t is `struct CUstream_st*`, so
// launcher declarations can sit in headers that host-only builds include.
#pragma once

struct CUstream_st;

namespace tapdiff::engine {

using CudaStream = CUstream_st*;

}  // namespace tapdiff::engine
