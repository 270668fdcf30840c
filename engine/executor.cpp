// The one place that picks an executor for a backend.
#include "engine/device/cuda_device.hpp"
#include "engine/executor.hpp"

namespace tapdiff::engine {

std::unique_ptr<Executor> make_executor(Backend backend) {
  if (backend == Backend::host) return make_host_executor();
  return make_cuda_executor();
}

}  // namespace tapdiff::engine
