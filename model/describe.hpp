// What `tapdiff inspect MODEL.gguf` shows: metadata (arrays summarized), the tensor table and
// the derived ModelConfig, as JSON or as aligned text.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "model/gguf.hpp"

namespace tapdiff {

nlohmann::json describe_gguf_json(const GgufFile& file);
std::string describe_gguf_text(const GgufFile& file);

}  // namespace tapdiff
