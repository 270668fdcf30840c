// Memory for many floats that are all written before they are read: not zeroed. In 4 KiB pages:
// with the kernel's default THP defrag mode, a huge page asked for with MADV_HUGEPAGE compacts
// memory at its first touch once no free one is left, which cost a traced run more than it saved
// (docs/guide.md, "What tracing costs").
#pragma once

#include <cstddef>
#include <memory>

namespace tapdiff {

// A buffer reused for ever larger contents: grows (dropping its contents), never shrinks.
class FloatBuffer {
public:
  float* reserve(std::size_t n) {
    if (n > capacity_) {
      memory_.reset();
      memory_.reset(new float[n]);  // default-initialized: not zeroed
      capacity_ = n;
    }
    return memory_.get();
  }
  float* data() const { return memory_.get(); }
  std::size_t capacity() const { return capacity_; }

private:
  std::unique_ptr<float[]> memory_;
  std::size_t capacity_ = 0;
};

}  // namespace tapdiff
