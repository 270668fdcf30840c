#include "diff/replay_model.hpp"

#include <fmt/format.h>

#include "model/dequantize.hpp"
#include "model/error.hpp"
#include "model/fused_weights.hpp"
#include "model/sha256.hpp"

namespace tapdiff::diff {

ReplayModel::ReplayModel(const std::string& path, const std::string& expected_sha256)
    : file_(GgufFile::open(path)), config_(load_model_config(file_)) {
  if (!expected_sha256.empty()) {
    const std::string actual = sha256_hex(file_.bytes(), file_.file_size());
    if (actual != expected_sha256)
      throw InputError(path, "sha256",
                       fmt::format("expected {} (the model the traces were recorded with), got {}",
                                   expected_sha256, actual));
  }
}

const GgufTensorInfo* ReplayModel::tensor(const std::string& name) {
  if (!fused_part(config_, name)) return file_.find_tensor(name);
  if (const auto it = parts_.find(name); it != parts_.end()) return &it->second;
  const auto part = weight_tensor(file_, config_, name);
  return part ? &parts_.emplace(name, *part).first->second : nullptr;
}

const std::vector<float>& ReplayModel::weight(const std::string& name) {
  auto it = cache_.find(name);
  if (it != cache_.end()) return it->second;
  const GgufTensorInfo* t = tensor(name);
  if (!t) return empty_;
  return cache_.emplace(name, dequantize_tensor(*t)).first->second;
}

}  // namespace tapdiff::diff
