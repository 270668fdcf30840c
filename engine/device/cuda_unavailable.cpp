// Builds without nvcc: the CUDA executor does not exist.
#include <memory>
#include <string>

#include "engine/device/cuda_device.hpp"
#include "engine/device/error.hpp"
#include "engine/executor.hpp"

namespace tapdiff::engine {
namespace {
constexpr const char* kReason =
    "this build has no CUDA executor (configured with TAPDIFF_CUDA=OFF or without nvcc)";
}

bool cuda_device_available(std::string* reason) {
  if (reason != nullptr) *reason = kReason;
  return false;
}

std::unique_ptr<Executor> make_cuda_executor() { throw NoDeviceError(kReason); }

}  // namespace tapdiff::engine
