#include "adapters/npy.hpp"

#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <regex>

#include "model/error.hpp"

namespace tapdiff::adapters {

DumpedTensor read_npy(const std::string& path) {
  const std::vector<std::uint8_t> bytes = read_bytes(path);
  if (bytes.size() < 10 || std::memcmp(bytes.data(), "\x93NUMPY", 6) != 0)
    throw InputError(path, "magic", "expected a .npy file (\\x93NUMPY)", 0);
  const int major = bytes[6];
  if (major < 1 || major > 3) throw InputError(path, "version", fmt::format("expected 1, 2 or 3, got {}", major), 6);
  const std::size_t len_bytes = major == 1 ? 2 : 4;
  std::size_t header_len = 0;
  for (std::size_t i = 0; i < len_bytes; ++i) header_len |= std::size_t(bytes[8 + i]) << (8 * i);
  const std::size_t data_at = 8 + len_bytes + header_len;
  if (data_at > bytes.size())
    throw InputError(path, "header_len", fmt::format("{} bytes run past the end of the file", header_len), 8);
  const std::string header(bytes.begin() + std::ptrdiff_t(8 + len_bytes), bytes.begin() + std::ptrdiff_t(data_at));

  std::smatch m;
  if (!std::regex_search(header, m, std::regex(R"('descr'\s*:\s*'([^']*)')")))
    throw InputError(path, "descr", "missing from the header");
  const std::string descr = m[1];
  DumpType type;
  if (descr == "<f4" || descr == "=f4") type = DumpType::f32;
  else if (descr == "<f2" || descr == "=f2") type = DumpType::f16;
  else if (descr == "<f8" || descr == "=f8") type = DumpType::f64;
  else throw InputError(path, "descr", fmt::format("expected little-endian float32, float16 or float64, got '{}'", descr));
  if (std::regex_search(header, std::regex(R"('fortran_order'\s*:\s*True)")))
    throw InputError(path, "fortran_order", "expected False (C order): save with np.ascontiguousarray");
  if (!std::regex_search(header, m, std::regex(R"('shape'\s*:\s*\(([^)]*)\))")))
    throw InputError(path, "shape", "missing from the header");

  DumpedTensor t;
  t.file = path;
  t.name = std::filesystem::path(path).stem().string();
  const std::string dims = m[1];
  std::size_t count = 1;
  static const std::regex size(R"(\d+)");
  for (std::sregex_iterator it(dims.begin(), dims.end(), size), end; it != end; ++it) {
    t.shape.push_back(std::stoll(it->str()));
    count *= std::size_t(t.shape.back());
  }
  if (bytes.size() - data_at != count * dump_type_size(type))
    throw InputError(path, "data", fmt::format("expected {} bytes for shape ({}) of '{}', got {}",
                                               count * dump_type_size(type), dims, descr, bytes.size() - data_at),
                     std::int64_t(data_at));
  t.values = to_f32(bytes.data() + data_at, count, type);
  return t;
}

}  // namespace tapdiff::adapters
