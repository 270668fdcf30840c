#include "hdf5_read.hpp"

#include <chrono>
#include <hdf5.h>
#include <stdexcept>
#include <vector>

namespace tapdiff::bench {
namespace {

herr_t read_dataset(hid_t root, const char* name, const H5O_info_t* info, void* buffer) {
  if (info->type != H5O_TYPE_DATASET) return 0;
  const hid_t data = H5Dopen2(root, name, H5P_DEFAULT);
  if (data < 0) return -1;
  const hid_t type = H5Dget_type(data);
  const hid_t space = H5Dget_space(data);
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  auto& bytes = *static_cast<std::vector<char>*>(buffer);
  bytes.resize(std::size_t(n) * H5Tget_size(type));
  const herr_t status = n > 0 ? H5Dread(data, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()) : 0;
  H5Sclose(space);
  H5Tclose(type);
  H5Dclose(data);
  return status < 0 ? -1 : 0;
}

}  // namespace

double time_hdf5_read_all(const std::string& path) {
  const auto start = std::chrono::steady_clock::now();
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file < 0) throw std::runtime_error(path + ": cannot open as HDF5");
  std::vector<char> buffer;
  const herr_t status = H5Ovisit2(file, H5_INDEX_NAME, H5_ITER_NATIVE, read_dataset, &buffer, H5O_INFO_BASIC);
  H5Fclose(file);
  if (status < 0) throw std::runtime_error(path + ": reading a dataset failed");
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace tapdiff::bench
