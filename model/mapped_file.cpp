#include "model/mapped_file.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <tuple>
#include <unistd.h>
#include <utility>

#include "model/error.hpp"

namespace tapdiff {

bool FileIdentity::operator<(const FileIdentity& o) const {
  return std::tie(device, inode, size, mtime_s, mtime_ns, ctime_s, ctime_ns) <
         std::tie(o.device, o.inode, o.size, o.mtime_s, o.mtime_ns, o.ctime_s, o.ctime_ns);
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw InputError(path, "file", std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw InputError(path, "file", "expected a regular file");
  }
  size_ = static_cast<std::size_t>(st.st_size);
  identity_ = {std::uint64_t(st.st_dev), std::uint64_t(st.st_ino), std::uint64_t(st.st_size),
               std::int64_t(st.st_mtim.tv_sec), std::int64_t(st.st_mtim.tv_nsec),
               std::int64_t(st.st_ctim.tv_sec), std::int64_t(st.st_ctim.tv_nsec)};
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw InputError(path, "file", std::string("cannot map: ") + std::strerror(err));
    }
    data_ = static_cast<const std::uint8_t*>(p);
#ifdef MADV_HUGEPAGE
    // A decode step reads every weight of the mapping. Asked for huge pages, a kernel whose file
    // system caches large folios reads the pages it does not hold yet 2 MiB at a time and maps
    // each with one entry (the 7B fixture read back from disk on Linux 6.18, ext4: 3.77 of its
    // 3.8 GiB mapped so, against 2.6 without asking). Advice only: where it is refused or the
    // file is cached already, nothing changes.
    ::madvise(p, size_, MADV_HUGEPAGE);
#endif
  }
  ::close(fd);
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)), identity_(other.identity_) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    identity_ = other.identity_;
  }
  return *this;
}

void MappedFile::release() noexcept {
  if (data_) ::munmap(const_cast<std::uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace tapdiff
