// What `tapdiff inspect MODEL.gguf` shows: metadata (arrays summarized), the tensor table and
// the derived ModelConfig, as JSON or as aligned text.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "model/gguf.hpp"

namespace tapdiff {

struct ModelConfig;

nlohmann::json describe_gguf_json(const GgufFile& file);
// The derived config alone (inspect's "config"; repro manifests' "hparams").
nlohmann::json config_json(const ModelConfig& config);
std::string describe_gguf_text(const GgufFile& file);

}  // namespace tapdiff
