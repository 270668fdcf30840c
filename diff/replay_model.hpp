// The model as hypothesis replay needs it: config and weights dequantized by model/ on first
// use (one tensor at a time, cached), plus the raw tensor for variants that decode its bytes
// differently.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "model/config.hpp"
#include "model/gguf.hpp"

namespace tapdiff::diff {

class ReplayModel {
public:
  // Throws InputError when the file is unreadable, and when expected_sha256 is given and the
  // file's hash differs (replaying with another model's weights would mislead).
  ReplayModel(const std::string& path, const std::string& expected_sha256);

  const ModelConfig& config() const { return config_; }
  const GgufFile& file() const { return file_; }
  // The tensor the forward pass reads as `name`: the GGUF's, or its part of a fused one (phi3's
  // attn_qkv, ffn_up); nullptr when absent. Variants decode its bytes like any tensor's.
  const GgufTensorInfo* tensor(const std::string& name);
  // Dequantized [out][in] (row-major), or empty when absent.
  const std::vector<float>& weight(const std::string& name);

private:
  GgufFile file_;
  ModelConfig config_;
  std::map<std::string, GgufTensorInfo> parts_;
  std::map<std::string, std::vector<float>> cache_;
  std::vector<float> empty_;
};

}  // namespace tapdiff::diff
