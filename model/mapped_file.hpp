// A read-only memory mapping of a whole file (RAII). Empty files map to an empty span.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tapdiff {

class MappedFile {
public:
  explicit MappedFile(const std::string& path);  // throws InputError naming the path
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;

  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::string& path() const { return path_; }

private:
  void release() noexcept;
  std::string path_;
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace tapdiff
