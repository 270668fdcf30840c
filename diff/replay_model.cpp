#include "diff/replay_model.hpp"

#include <fmt/format.h>

#include "model/dequantize.hpp"
#include "model/error.hpp"
#include "model/fused_weights.hpp"

namespace tapdiff::diff {

HParams trace_hparams(const ModelConfig& c) {
  HParams h{{"arch", arch_name(c.arch)},
          {"n_layer", std::int64_t(c.n_layer)},
          {"n_embd", std::int64_t(c.n_embd)},
          {"n_head", std::int64_t(c.n_head)},
          {"n_head_kv", std::int64_t(c.n_head_kv)},
          {"head_dim", std::int64_t(c.head_dim)},
          {"n_ff", std::int64_t(c.n_ff)},
          {"n_vocab", std::int64_t(c.n_vocab)},
          {"n_rot", std::int64_t(c.n_rot)},
          {"rope_freq_base", double(c.rope_freq_base)},
          {"rope_pairing", c.rope_pairing == RopePairing::norm ? "norm" : "neox"},
          {"rms_eps", double(c.rms_eps)},
          {"tied_output", std::int64_t(c.tied_output)},
          {"qkv_bias", std::int64_t(c.qkv_bias)}};
  if (c.moe()) {
    h["n_expert"] = std::int64_t(c.n_expert);
    h["n_expert_used"] = std::int64_t(c.n_expert_used);
  }
  if (c.rope_scaling.scales()) h["rope_scaling"] = rope_scaling_name(c.rope_scaling.type);
  if (c.rope_scaling.type == RopeScalingType::linear || c.rope_scaling.type == RopeScalingType::yarn)
    h["rope_scaling_factor"] = double(c.rope_scaling.factor);
  if (c.attn_scale_dim != c.head_dim) h["attn_scale_dim"] = std::int64_t(c.attn_scale_dim);
  for (const auto& [key, value] : {std::pair{"embedding_multiplier", c.embedding_multiplier},
                                   std::pair{"residual_multiplier", c.residual_multiplier},
                                   std::pair{"attention_multiplier", c.attention_multiplier},
                                   std::pair{"logit_scale", c.logit_scale}})
    if (value > 0) h[key] = double(value);
  if (c.attn_temp_scale != 0) {
    h["attn_temp_scale"] = double(c.attn_temp_scale);
    h["attn_temp_floor"] = std::int64_t(c.attn_temp_floor);
  }
  return h;
}

ReplayModel::ReplayModel(const std::string& path, const std::string& expected_sha256, const HParams& expected_hparams)
    : file_(GgufFile::open(path)), expected_sha256_(expected_sha256), config_(load_model_config(file_)) {
  if (expected_hparams != trace_hparams(config_)) check_sha256();
}

void ReplayModel::check_sha256() const {
  if (sha256_checked_ || expected_sha256_.empty()) return;
  const std::string actual = file_.sha256();
  if (actual != expected_sha256_)
    throw InputError(file_.path(), "sha256",
                     fmt::format("expected {} (the model the traces were recorded with), got {}", expected_sha256_,
                                 actual));
  sha256_checked_ = true;
}

const GgufFile& ReplayModel::file() const {
  check_sha256();
  return file_;
}

const GgufTensorInfo* ReplayModel::tensor(const std::string& name) {
  check_sha256();
  if (!fused_part(config_, name)) return file_.find_tensor(name);
  if (const auto it = parts_.find(name); it != parts_.end()) return &it->second;
  const auto part = weight_tensor(file_, config_, name);
  return part ? &parts_.emplace(name, *part).first->second : nullptr;
}

const std::vector<float>& ReplayModel::weight(const std::string& name) {
  check_sha256();
  auto it = cache_.find(name);
  if (it != cache_.end()) return it->second;
  const GgufTensorInfo* t = tensor(name);
  if (!t) return empty_;
  return cache_.emplace(name, dequantize_tensor(*t)).first->second;
}

}  // namespace tapdiff::diff
