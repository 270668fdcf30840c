#include "adapters/tensor_file.hpp"

#include <cstring>
#include <fstream>
#include <iterator>

#include "model/error.hpp"
#include "model/half.hpp"

namespace tapdiff::adapters {

std::vector<std::uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "file", "cannot be opened for reading");
  return std::vector<std::uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::size_t dump_type_size(DumpType type) {
  switch (type) {
    case DumpType::f32: return 4;
    case DumpType::f16:
    case DumpType::bf16: return 2;
    case DumpType::f64: return 8;
  }
  return 4;
}

std::vector<float> to_f32(const std::uint8_t* data, std::size_t count, DumpType type) {
  std::vector<float> out(count);
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint8_t* p = data + i * dump_type_size(type);
    switch (type) {
      case DumpType::f32: std::memcpy(&out[i], p, 4); break;
      case DumpType::f16: out[i] = fp16_to_fp32(std::uint16_t(p[0] | (p[1] << 8))); break;
      case DumpType::bf16: out[i] = bf16_to_fp32(std::uint16_t(p[0] | (p[1] << 8))); break;
      case DumpType::f64: {
        double d;
        std::memcpy(&d, p, 8);
        out[i] = float(d);
        break;
      }
    }
  }
  return out;
}

}  // namespace tapdiff::adapters
