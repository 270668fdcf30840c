// CUDA builds: cuda_device.hpp's two functions, answered by the CUDA module
// (device/cuda_module.hpp), which is loaded at the first call and stays loaded: the executors
// it makes, and the buffers they allocate, run its code until the process ends.
#include <dlfcn.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "cuda_module_tag.hpp"
#include "engine/device/cuda_device.hpp"
#include "engine/device/cuda_module.hpp"
#include "engine/device/error.hpp"
#include "engine/executor.hpp"

namespace tapdiff::engine {
namespace {

struct CudaModule {
  TapdiffCudaAvailable* available = nullptr;
  TapdiffCudaExecutorNew* executor_new = nullptr;
  std::string error;  // why the module cannot be used
};

// Installed (and in the GPU bundle) the module sits in lib/tapdiff/ beside the program's bin/.
// A program in the build tree (tapdiff, the tests, the benches) also looks where CMake built
// it; a program copied or installed elsewhere never loads the build tree's.
std::filesystem::path cuda_module_path(std::string* searched) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path program = fs::read_symlink("/proc/self/exe", ec);
  if (ec) {
    *searched = "nowhere (/proc/self/exe is unreadable: " + ec.message() + ")";
    return {};
  }
  const fs::path beside = program.parent_path().parent_path() / "lib" / "tapdiff";
  *searched = beside.string();
  if (fs::exists(beside / TAPDIFF_CUDA_MODULE_FILE, ec)) return beside / TAPDIFF_CUDA_MODULE_FILE;
  const std::string build_dir = fs::weakly_canonical(TAPDIFF_BUILD_DIR, ec).string() + "/";
  if (ec || program.string().compare(0, build_dir.size(), build_dir) != 0) return {};
  const fs::path built = TAPDIFF_CUDA_MODULE_BUILD_PATH;
  *searched += " or " + built.parent_path().string();
  if (fs::exists(built, ec)) return built;
  return {};
}

CudaModule load_cuda_module() {
  CudaModule m;
  std::string searched;
  const std::filesystem::path path = cuda_module_path(&searched);
  if (path.empty()) {
    m.error = "the CUDA executor's module " TAPDIFF_CUDA_MODULE_FILE " is not in " + searched;
    return m;
  }
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    m.error = "loading the CUDA executor's module: " + std::string(dlerror());
    return m;
  }
  auto* tag = reinterpret_cast<TapdiffCudaModuleTag*>(dlsym(handle, "tapdiff_cuda_module_tag"));
  m.available = reinterpret_cast<TapdiffCudaAvailable*>(dlsym(handle, "tapdiff_cuda_available"));
  m.executor_new = reinterpret_cast<TapdiffCudaExecutorNew*>(dlsym(handle, "tapdiff_cuda_executor_new"));
  if (tag == nullptr || m.available == nullptr || m.executor_new == nullptr) {
    m.error = path.string() + " lacks tapdiff_cuda_module_tag, tapdiff_cuda_available or tapdiff_cuda_executor_new";
  } else if (std::strcmp(tag(), TAPDIFF_CUDA_MODULE_TAG) != 0) {
    m.error = path.string() + " was built from other engine headers than this program (interface " + tag() +
              ", expected " TAPDIFF_CUDA_MODULE_TAG "): install the program and its module from one build";
  }
  if (!m.error.empty()) {
    m.available = nullptr;
    m.executor_new = nullptr;
  }
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
  if (m.available != nullptr) {
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
