#include "space_reserve.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tapdiff/trace_error.hpp"

namespace tapdiff {

SpaceReserve::SpaceReserve(hid_t file, const std::string& path) : file_(file), path_(&path) {
  void* handle = nullptr;
  if (H5Fget_vfd_handle(file, H5P_DEFAULT, &handle) >= 0 && handle != nullptr) {
    fd_ = *static_cast<int*>(handle);
  }
  H5Eclear2(H5E_DEFAULT);
}

void SpaceReserve::release_unused() {
  if (fd_ < 0) return;
  haddr_t eoa = 0;
  struct stat st {};
  if (H5Fget_eoa(file_, &eoa) < 0 || fstat(fd_, &st) != 0) {
    H5Eclear2(H5E_DEFAULT);
    return;
  }
  if (static_cast<std::uint64_t>(st.st_size) > eoa &&
      ftruncate(fd_, static_cast<off_t>(eoa)) != 0) {
    fd_ = -1;  // leave the padding (harmless zeros) and stop managing this file
  }
}

void SpaceReserve::ensure(std::uint64_t extra) {
  if (fd_ < 0) return;
  haddr_t eoa = 0;
  if (H5Fget_eoa(file_, &eoa) < 0) {
    H5Eclear2(H5E_DEFAULT);
    return;
  }
  struct stat st {};
  if (fstat(fd_, &st) != 0) return;
  const std::uint64_t target = static_cast<std::uint64_t>(eoa) + extra;
  const std::uint64_t size = static_cast<std::uint64_t>(st.st_size);
  if (target <= size) return;
  int error = 0;
  do {
    error = fallocate(fd_, 0, static_cast<off_t>(size), static_cast<off_t>(target - size)) == 0
                ? 0
                : errno;
  } while (error == EINTR);
  if (error == 0 || error == EOPNOTSUPP || error == ENOSYS) {
    if (error != 0) fd_ = -1;  // no guarantee on this file system; stop asking
    return;
  }
  throw TraceError(*path_, "/",
                   "cannot reserve " + std::to_string(target - size) +
                       " bytes for the next commit: " + std::strerror(error) +
                       (error == ENOSPC ? " (disk full)" : "") +
                       "; every step committed so far stays readable");
}

}  // namespace tapdiff
