// The CUDA executor lives in a module of its own (libtapdiff_cuda.so, CUDA builds only) that the
// engine loads the first time a command asks about a device: loading cuBLAS maps 540 MB and
// costs a process 0.15-0.25 s on these machines, which every host run, diff and test paid when
// the engine linked it. These two functions, with C linkage, are all the module exports;
// cuda_loader.cpp finds them with dlsym.
#pragma once

#include <cstddef>

namespace tapdiff::engine {
class Executor;
}

// The module's file, installed in <prefix>/lib/tapdiff/ and packed in the GPU bundle's
// lib/tapdiff/, beside bin/tapdiff's ../lib.
#define TAPDIFF_CUDA_MODULE_FILE "libtapdiff_cuda.so"

extern "C" {

// 1 when a CUDA device and cuBLAS initialize; otherwise 0, with the reason written to why (at
// most cap bytes, NUL-terminated).
using TapdiffCudaAvailable = int(char* why, std::size_t cap);
// A new CUDA executor on device 0 (the caller deletes it), or nullptr with the reason in why.
using TapdiffCudaExecutorNew = tapdiff::engine::Executor*(char* why, std::size_t cap);

}
