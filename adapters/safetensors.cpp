#include "adapters/safetensors.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "model/error.hpp"

namespace tapdiff::adapters {

std::vector<DumpedTensor> read_safetensors(const std::string& path) {
  const std::vector<std::uint8_t> bytes = read_bytes(path);
  if (bytes.size() < 8) throw InputError(path, "header size", "expected 8 bytes, the file is shorter", 0);
  std::uint64_t header_size = 0;
  for (int i = 0; i < 8; ++i) header_size |= std::uint64_t(bytes[std::size_t(i)]) << (8 * i);
  if (header_size > bytes.size() - 8)
    throw InputError(path, "header size", fmt::format("{} bytes run past the end of the file", header_size), 0);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + std::ptrdiff_t(header_size));
  } catch (const nlohmann::json::exception& e) {
    throw InputError(path, "header", fmt::format("expected JSON: {}", e.what()), 8);
  }
  if (!header.is_object()) throw InputError(path, "header", "expected a JSON object", 8);
  const std::size_t data_at = 8 + std::size_t(header_size);
  std::vector<DumpedTensor> out;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string field = "tensor " + name;
    if (!info.is_object() || !info.contains("dtype") || !info.contains("shape") || !info.contains("data_offsets"))
      throw InputError(path, field, "expected an object with dtype, shape and data_offsets");
    const std::string dtype = info["dtype"].is_string() ? info["dtype"].get<std::string>() : "";
    DumpType type;
    if (dtype == "F32") type = DumpType::f32;
    else if (dtype == "F16") type = DumpType::f16;
    else if (dtype == "BF16") type = DumpType::bf16;
    else if (dtype == "F64") type = DumpType::f64;
    else throw InputError(path, field + " dtype", fmt::format("expected F32, F16, BF16 or F64, got {}", info["dtype"].dump()));
    DumpedTensor t;
    t.name = name;
    t.file = path;
    std::size_t count = 1;
    for (const auto& d : info["shape"]) {
      if (!d.is_number_unsigned()) throw InputError(path, field + " shape", fmt::format("expected sizes, got {}", info["shape"].dump()));
      t.shape.push_back(d.get<std::int64_t>());
      count *= std::size_t(t.shape.back());
    }
    const auto& off = info["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      throw InputError(path, field + " data_offsets", fmt::format("expected [begin, end], got {}", off.dump()));
    const auto begin = off[0].get<std::uint64_t>(), end = off[1].get<std::uint64_t>();
    if (end < begin || end - begin != count * dump_type_size(type) || data_at + end > bytes.size())
      throw InputError(path, field + " data_offsets",
                       fmt::format("[{}, {}] for {} values of {} in a data section of {} bytes", begin, end, count,
                                   dtype, bytes.size() - data_at));
    t.values = to_f32(bytes.data() + data_at + begin, count, type);
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace tapdiff::adapters
