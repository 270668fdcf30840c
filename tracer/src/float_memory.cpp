#include "tapdiff/float_memory.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <new>

namespace tapdiff {

FloatMemory allocate_floats(std::size_t n) {
  constexpr std::size_t kHugePage = 2u << 20;
  const std::size_t bytes = std::max<std::size_t>(n * sizeof(float), 1);
  void* memory = nullptr;
  if (bytes < kHugePage) {
    memory = std::malloc(bytes);
  } else {
    const std::size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    memory = std::aligned_alloc(kHugePage, rounded);
    if (memory != nullptr) ::madvise(memory, rounded, MADV_HUGEPAGE);
  }
  if (memory == nullptr) throw std::bad_alloc();
  return FloatMemory(static_cast<float*>(memory));
}

}  // namespace tapdiff
