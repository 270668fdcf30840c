// The CUDA executor lives in a module of its own (libtapdiff_cuda.so, CUDA builds only) that the
// engine loads the first time a command asks about a device: loading cuBLAS maps 540 MB and
// costs a process 0.15 s or more on these machines, which every host run, diff and test paid
// when the engine linked it. These three functions, with C linkage, are all the module exports;
// cuda_loader.cpp finds them with dlsym.
//
// The two sides compile the same engine headers, so CudaExecutor's calls may throw EngineError
// into the program: libstdc++ matches the module's (hidden) typeinfo by name, which holds while
// both use the same shared libstdc++ (never link the module with -static-libstdc++).
#pragma once

#include <cstddef>

namespace tapdiff::engine {
class Executor;
}

// The module's file. Installed and in the GPU bundle, it sits in lib/tapdiff/, beside the
// programs' bin/.
#define TAPDIFF_CUDA_MODULE_FILE "libtapdiff_cuda.so"

extern "C" {

// TAPDIFF_CUDA_MODULE_TAG as the module was built (generated/cuda_module_tag.hpp): a hash of
// the headers it compiled, which the loader compares with its own.
using TapdiffCudaModuleTag = const char*();
// 1 when a CUDA device and cuBLAS initialize; otherwise 0, with the reason written to why (at
// most cap bytes, NUL-terminated).
using TapdiffCudaAvailable = int(char* why, std::size_t cap);
// A new CUDA executor on device 0 (the caller deletes it), or nullptr with the reason in why.
using TapdiffCudaExecutorNew = tapdiff::engine::Executor*(char* why, std::size_t cap);

}
