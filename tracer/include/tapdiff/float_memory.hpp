// Memory for many floats that are all written before they are read: not zeroed, and in huge
// pages when large. On these machines faulting in fresh memory 4 KiB at a time costs more than
// reading a trace from the page cache into it (bench/results/models.md, "Diff throughput").
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>

namespace tapdiff {

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
using FloatMemory = std::unique_ptr<float[], FreeDeleter>;

FloatMemory allocate_floats(std::size_t n);  // throws std::bad_alloc

// A buffer reused for ever larger contents: grows (dropping its contents), never shrinks.
class FloatBuffer {
public:
  float* reserve(std::size_t n) {
    if (n > capacity_) {
      memory_.reset();
      memory_ = allocate_floats(n);
      capacity_ = n;
    }
    return memory_.get();
  }
  float* data() const { return memory_.get(); }
  std::size_t capacity() const { return capacity_; }

private:
  FloatMemory memory_;
  std::size_t capacity_ = 0;
};

}  // namespace tapdiff
