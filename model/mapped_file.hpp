// A read-only memory mapping of a whole file (RAII). Empty files map to an empty span.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tapdiff {

// Which file a mapping holds, as fstat saw it when mapping: same device, inode, size,
// modification and status-change times is the same content (model/hash_cache.hpp remembers
// hashes by it). The change time cannot be set back, as the modification time can.
struct FileIdentity {
  std::uint64_t device = 0, inode = 0, size = 0;
  std::int64_t mtime_s = 0, mtime_ns = 0, ctime_s = 0, ctime_ns = 0;
  bool operator<(const FileIdentity& o) const;
};

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
  const FileIdentity& identity() const { return identity_; }

private:
  void release() noexcept;
  std::string path_;
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
  FileIdentity identity_;
};

}  // namespace tapdiff
