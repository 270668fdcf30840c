#include "engine/device/buffer.hpp"

#include <cstdlib>
#include <cstring>
#include <new>

namespace tapdiff::engine {

Buffer allocate_host(std::size_t bytes) {
  constexpr std::size_t kAlign = 64;
  const std::size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, rounded == 0 ? kAlign : rounded);
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, rounded == 0 ? kAlign : rounded);
  return Buffer(p, bytes, [](void* q) noexcept { std::free(q); });
}

}  // namespace tapdiff::engine
