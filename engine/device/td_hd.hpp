// TD_HD marks a kernel body that both executors run: __host__ __device__ under nvcc, plain
// C++ otherwise. A body is the per-element (or per-row) work of one op; its CUDA launcher
// and its host launcher only decide which indices run where.
#pragma once

#if defined(__CUDACC__)
#define TD_HD __host__ __device__
#else
#define TD_HD
#endif
