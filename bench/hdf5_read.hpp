// Raw HDF5 read of a whole file: the yardstick `tapdiff diff`'s throughput is judged by.
#pragma once

#include <string>

namespace tapdiff::bench {

// Seconds to open `path` and read every dataset in it completely with H5Dread (into memory of
// the dataset's own type), with no tapdiff code involved.
double time_hdf5_read_all(const std::string& path);

}  // namespace tapdiff::bench
