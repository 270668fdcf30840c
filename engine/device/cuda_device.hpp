// Whether the CUDA executor can run on this machine, and why not. Implemented by
// cuda_device.cpp in CUDA builds and by cuda_unavailable.cpp otherwise (the build picks one;
// no #ifdef in the code).
#pragma once

#include <memory>
#include <string>

namespace tapdiff::engine {

class Executor;

// True when a CUDA device and cuBLAS can be initialized; otherwise false with the reason
// (e.g. "cudaGetDeviceCount: CUDA driver version is insufficient for CUDA runtime version
// (cudaErrorInsufficientDriver, error 35)").
bool cuda_device_available(std::string* reason);

// The CUDA executor on device 0. Throws NoDeviceError with the reason when there is none.
std::unique_ptr<Executor> make_cuda_executor();

}  // namespace tapdiff::engine
