#include "f32_copy.hpp"

#include <filesystem>

#include "model/dequantize.hpp"
#include "model/gguf.hpp"
#include "model/gguf_writer.hpp"

namespace tapdiff::bench {

bool write_f32_copy(const std::string& src, const std::string& dst) {
  if (std::filesystem::exists(dst)) return false;
  const GgufFile file = GgufFile::open(src);
  GgufWriter writer(file.version());
  for (const auto& [key, value] : file.metadata()) writer.set(key, value);
  writer.set("general.file_type", GgufValue::u32(0));  // LLAMA_FTYPE_ALL_F32
  for (const GgufTensorInfo& t : file.tensors()) writer.add_tensor_f32(t.name, t.ne, dequantize_tensor(t));
  const auto parent = std::filesystem::path(dst).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  writer.write(dst);
  return true;
}

}  // namespace tapdiff::bench
