#include "stack_reader.hpp"

#include <vector>

namespace tapdiff {
namespace {

constexpr std::size_t kChunkCacheBytes = 32u << 20;  // per compressed stack, filled as read
constexpr std::size_t kChunkCacheSlots = 12'421;     // a prime, ~100 x the chunks that fit

h5::Id open_with_chunk_cache(hid_t file, const h5::Where& where, std::size_t bytes) {
  const h5::Id dapl = h5::plist_id(H5Pcreate(H5P_DATASET_ACCESS), where, "cannot create");
  h5::check(H5Pset_chunk_cache(dapl.get(), kChunkCacheSlots, bytes, 0.0), where,
            "cannot set the chunk cache");
  return h5::dataset_id(H5Dopen2(file, where.object.c_str(), dapl.get()), where, "cannot open");
}

}  // namespace

hid_t StackReader::open(const std::string& stack, const h5::Where& where) {
  const auto it = data_.find(stack);
  if (it != data_.end()) return it->second.get();
  h5::Id data = open_with_chunk_cache(file_, where, 0);
  const h5::Id dcpl = h5::plist_id(H5Dget_create_plist(data.get()), where, "cannot read");
  if (H5Pget_nfilters(dcpl.get()) > 0) {
    data.reset();  // HDF5 ignores the access properties of a dataset opened twice
    data = open_with_chunk_cache(file_, where, kChunkCacheBytes);
  }
  return data_.emplace(stack, std::move(data)).first->second.get();
}

void StackReader::read(const TapInfo& tap, std::int64_t r0, std::int64_t r1, float* out) {
  const h5::Where where{path_, "/taps/" + tap.stack + "/data"};
  std::vector<hsize_t> start{static_cast<hsize_t>(r0), tap.slot};
  std::vector<hsize_t> count{static_cast<hsize_t>(r1 - r0), 1};
  for (std::int64_t d : tap.row_shape) {
    start.push_back(0);
    count.push_back(static_cast<hsize_t>(d));
  }
  const hid_t data = open(tap.stack, where);
  const h5::Id space = h5::space_id(H5Dget_space(data), where, "cannot read");
  h5::check(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(),
                                nullptr),
            where, "cannot select rows");
  const h5::Id mem =
      h5::space_id(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr), where,
                   "cannot read");
  h5::check(H5Dread(data, H5T_NATIVE_FLOAT, mem.get(), space.get(), H5P_DEFAULT, out), where,
            "cannot read rows " + std::to_string(r0) + ".." + std::to_string(r1 - 1) + " of slot " +
                std::to_string(tap.slot) + " (" + tap.full_name + ")");
}

}  // namespace tapdiff
