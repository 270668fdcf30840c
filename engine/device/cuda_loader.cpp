// CUDA builds: cuda_device.hpp's two functions, answered by the CUDA module
// (device/cuda_module.hpp), which is loaded at the first call and stays loaded: the executors
// it makes, and the buffers they allocate, run its code until the process ends.
#include <dlfcn.h>

#include <filesystem>
#include <memory>
#include <string>

#include "engine/device/cuda_device.hpp"
#include "engine/device/cuda_module.hpp"
#include "engine/device/error.hpp"
#include "engine/executor.hpp"

namespace tapdiff::engine {
namespace {

struct CudaModule {
  TapdiffCudaAvailable* available = nullptr;
  TapdiffCudaExecutorNew* executor_new = nullptr;
  std::string error;  // why the module could not be loaded
};

// Installed (and in the GPU bundle) the module sits in lib/tapdiff/ beside the program's bin/;
// in the build tree, where CMake built it.
CudaModule load_cuda_module() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path program = fs::read_symlink("/proc/self/exe", ec);
  fs::path path = program.parent_path().parent_path() / "lib" / "tapdiff" / TAPDIFF_CUDA_MODULE_FILE;
  if (ec || !fs::exists(path, ec)) path = TAPDIFF_CUDA_MODULE_BUILD_PATH;
  CudaModule m;
  if (!fs::exists(path, ec)) {
    m.error = "the CUDA executor's module " TAPDIFF_CUDA_MODULE_FILE " is in neither " +
              (program.parent_path().parent_path() / "lib" / "tapdiff").string() + " nor " +
              fs::path(TAPDIFF_CUDA_MODULE_BUILD_PATH).parent_path().string();
    return m;
  }
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    m.error = "loading the CUDA executor's module: " + std::string(dlerror());
    return m;
  }
  m.available = reinterpret_cast<TapdiffCudaAvailable*>(dlsym(handle, "tapdiff_cuda_available"));
  m.executor_new = reinterpret_cast<TapdiffCudaExecutorNew*>(dlsym(handle, "tapdiff_cuda_executor_new"));
  if (m.available == nullptr || m.executor_new == nullptr)
    m.error = path.string() + " lacks tapdiff_cuda_available or tapdiff_cuda_executor_new";
  return m;
}

const CudaModule& cuda_module() {
  static const CudaModule module = load_cuda_module();
  return module;
}

constexpr std::size_t kReasonCap = 1024;

}  // namespace

bool cuda_device_available(std::string* reason) {
  const CudaModule& m = cuda_module();
  std::string why = m.error;
  bool ok = false;
  if (why.empty()) {
    char buffer[kReasonCap] = {};
    ok = m.available(buffer, sizeof buffer) == 1;
    why = buffer;
  }
  if (!ok && reason != nullptr) *reason = why;
  return ok;
}

std::unique_ptr<Executor> make_cuda_executor() {
  std::string reason;
  if (!cuda_device_available(&reason)) throw NoDeviceError("no CUDA device: " + reason);
  char buffer[kReasonCap] = {};
  std::unique_ptr<Executor> executor(cuda_module().executor_new(buffer, sizeof buffer));
  if (executor == nullptr) throw EngineError(buffer);
  return executor;
}

}  // namespace tapdiff::engine
