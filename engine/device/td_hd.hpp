// TD_HD marks a kernel body that both executors run: __host__ __device__ under nvcc, plain
// C++ otherwise. A body is the per-element (or per-row) work of one op; its CUDA launcher
// and its host launcher only decide which indices run where.
#pragma once

#if defined(__CUDACC__)
#define TD_HD __host__ __device__
#else
#define TD_HD
#endif

// TD_UNROLL before a loop of constant count: unrolled by either compiler, so a body's
// arguments derived from the loop index (a shift, an offset) are constants in each copy.
#if defined(__CUDACC__)
#define TD_UNROLL _Pragma("unroll")
#else
#define TD_UNROLL _Pragma("GCC unroll 8")
#endif
