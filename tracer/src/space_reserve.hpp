// Reserves file space before each commit hands data to HDF5, so that a full disk (ENOSPC),
// a quota or a file size limit (EFBIG) is reported before HDF5 has written anything. HDF5
// 1.10.8 does not recover from a failed write: the file can no longer be flushed and closing
// it crashes at exit. With the reservation, the writer fails cleanly and every committed step
// stays readable.
#pragma once

#include <cstdint>
#include <string>

#include "h5.hpp"

namespace tapdiff {

class SpaceReserve {
public:
  SpaceReserve() = default;
  SpaceReserve(hid_t file, const std::string& path);

  // Makes sure the file can grow to its end-of-allocation + extra bytes. Throws TraceError
  // when the space cannot be had. A file system without fallocate gets no guarantee.
  void ensure(std::uint64_t extra);
  // Gives back what was reserved beyond the end-of-allocation: HDF5 truncates its files only
  // when its own idea of their size changed, so a closed trace would keep the padding.
  void release_unused();

private:
  hid_t file_ = H5I_INVALID_HID;
  const std::string* path_ = nullptr;
  int fd_ = -1;
};

}  // namespace tapdiff
