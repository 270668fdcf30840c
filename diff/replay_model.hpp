// The model as hypothesis replay needs it: config and weights dequantized by model/ on first
// use (one tensor at a time, cached), plus the raw tensor for variants that decode its bytes
// differently.
//
// Replaying with another model's weights would mislead, so the file's sha256 must be the
// traces'. Hashing a 4 GB file takes seconds, and many replays (activations, RoPE, attention,
// norms without weights) read only the config: where the traces' hyperparameters are exactly
// this file's, the hash waits for the first weight read.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "model/config.hpp"
#include "model/gguf.hpp"
#include "tapdiff/trace_metadata.hpp"

namespace tapdiff::diff {

// The hyperparameters a trace records for its model (/hparams): what tapdiff's own programs
// write, and what ReplayModel compares.
HParams trace_hparams(const ModelConfig& c);

class ReplayModel {
public:
  // Throws InputError when the file is unreadable, and when expected_sha256 is given and the
  // file's hash differs: here where expected_hparams are not trace_hparams(this file's config),
  // else at the first read of the file's tensors (tensor(), weight(), file()).
  ReplayModel(const std::string& path, const std::string& expected_sha256, const HParams& expected_hparams);

  const ModelConfig& config() const { return config_; }
  const GgufFile& file() const;
  // The tensor the forward pass reads as `name`: the GGUF's, or its part of a fused one (phi3's
  // attn_qkv, ffn_up); nullptr when absent. Variants decode its bytes like any tensor's.
  const GgufTensorInfo* tensor(const std::string& name);
  // Dequantized [out][in] (row-major), or empty when absent.
  const std::vector<float>& weight(const std::string& name);
  // Frees the dequantized weights, once nothing refers to them: a caller replaying every layer in
  // turn keeps one layer's in memory, not the model's as float32.
  void drop_weights() { cache_.clear(); }

private:
  void check_sha256() const;

  GgufFile file_;
  std::string expected_sha256_;
  mutable bool sha256_checked_ = false;
  ModelConfig config_;
  std::map<std::string, GgufTensorInfo> parts_;
  std::map<std::string, std::vector<float>> cache_;
  std::vector<float> empty_;
};

}  // namespace tapdiff::diff
