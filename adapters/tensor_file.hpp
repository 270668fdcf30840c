// A tensor read from another framework's dump, as float32: its name, shape and values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tapdiff::adapters {

struct DumpedTensor {
  std::string name;                 // the file's stem (.npy) or the tensor's key (.safetensors)
  std::string file;                 // where it came from
  std::vector<std::int64_t> shape;  // row-major
  std::vector<float> values;
};

// The file's bytes; InputError naming the file when it cannot be read.
std::vector<std::uint8_t> read_bytes(const std::string& path);

// Element types the dumps hold, converted to float32 (little-endian).
enum class DumpType { f32, f16, bf16, f64 };
std::vector<float> to_f32(const std::uint8_t* data, std::size_t count, DumpType type);
std::size_t dump_type_size(DumpType type);

}  // namespace tapdiff::adapters
