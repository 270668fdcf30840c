// Buffer: a move-only block of executor memory (aligned host memory for the host executor,
// cudaMalloc'ed device memory for the CUDA executor). The executor that allocated it knows how
// to free it; the buffer only carries that function. A buffer without one is a view of memory
// it does not own (the host executor's weights: the mapped model file's bytes).
#pragma once

#include <cstddef>

namespace tapdiff::engine {

class Buffer {
public:
  using Release = void (*)(void*) noexcept;

  Buffer() = default;
  Buffer(void* data, std::size_t bytes, Release release) noexcept
      : data_(data), bytes_(bytes), release_(release) {}
  ~Buffer() { reset(); }
  Buffer(Buffer&& other) noexcept { swap(other); }
  Buffer& operator=(Buffer&& other) noexcept {
    Buffer moved(static_cast<Buffer&&>(other));
    swap(moved);
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  std::size_t bytes() const { return bytes_; }
  bool empty() const { return data_ == nullptr; }

  void reset() noexcept {
    if (data_ != nullptr && release_ != nullptr) release_(data_);
    data_ = nullptr;
    bytes_ = 0;
    release_ = nullptr;
  }

private:
  void swap(Buffer& other) noexcept {
    void* d = data_;
    data_ = other.data_;
    other.data_ = d;
    const std::size_t b = bytes_;
    bytes_ = other.bytes_;
    other.bytes_ = b;
    const Release r = release_;
    release_ = other.release_;
    other.release_ = r;
  }

  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  Release release_ = nullptr;
};

// 64-byte aligned, zero-filled host memory. Throws std::bad_alloc.
Buffer allocate_host(std::size_t bytes);

}  // namespace tapdiff::engine
