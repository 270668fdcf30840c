#include "model/model_part.hpp"

#include <fmt/format.h>
#include <cstdlib>
#include <stdexcept>

#include "model/config.hpp"
#include "model/error.hpp"
#include "model/gguf_writer.hpp"

namespace tapdiff {
namespace {

constexpr const char* kStages = "tapdiff.part.stages";
constexpr const char* kVocab = "tapdiff.part.n_vocab";

bool flag(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.find(key);
  return v != nullptr && v->as_bool();
}

}  // namespace

int tensor_stage(const std::string& name, int n_layer) {
  if (name.rfind("blk.", 0) == 0) return std::atoi(name.c_str() + 4);
  if (name.rfind("token_embd.", 0) == 0) return -1;
  if (name == "rope_freqs.weight" || name == "rope_factors_long.weight" || name == "rope_factors_short.weight")
    return n_layer + 1;
  return n_layer;
}

std::optional<ModelPart> read_model_part(const GgufFile& f, int n_layer) {
  const GgufValue* stages = f.find(kStages);
  if (stages == nullptr) return std::nullopt;
  ModelPart p;
  if (stages->type() != GgufValueType::ARRAY || stages->as_array().size() != 2)
    throw InputError(f.path(), kStages, "expected an array of two stages [first, last]");
  p.first_stage = static_cast<int>(stages->as_array()[0].as_int());
  p.last_stage = static_cast<int>(stages->as_array()[1].as_int());
  if (p.first_stage < -1 || p.first_stage > p.last_stage || p.last_stage > n_layer)
    throw InputError(f.path(), kStages,
                     fmt::format("expected -1 <= first <= last <= block_count {}, got [{}, {}]", n_layer,
                                 p.first_stage, p.last_stage));
  const auto vocab = f.get_uint_opt(kVocab);
  if (!vocab || *vocab < 1 || *vocab > std::uint64_t(1) << 30)
    throw InputError(f.path(), kVocab, "expected the vocabulary size of the model the part was cut from");
  p.n_vocab = static_cast<int>(*vocab);
  p.tied_output = flag(f, "tapdiff.part.tied_output");
  p.qkv_bias = flag(f, "tapdiff.part.qkv_bias");
  p.rope_freq_factors = flag(f, "tapdiff.part.rope_freq_factors");
  p.fused_qkv = flag(f, "tapdiff.part.fused_qkv");
  return p;
}

bool stages_read(const ModelConfig& c, const std::string& name) {
  const int stage = tensor_stage(name, c.n_layer);
  if (stage == c.n_layer + 1) return c.first_stage < c.n_layer && c.last_stage >= 0;
  if (stage == -1) return c.holds(-1) || (c.tied_output && c.holds(c.n_layer));
  return c.holds(stage);
}

void write_model_part(const GgufFile& model, const ModelConfig& c, int first, int last, const std::string& path) {
  if (first < c.first_stage || last > c.last_stage || first > last)
    throw std::invalid_argument(fmt::format("model part: stages {}..{} are not within the {}..{} that {} holds", first,
                                            last, c.first_stage, c.last_stage, model.path()));
  GgufWriter out(model.version());
  for (const auto& [key, value] : model.metadata())
    if (key.rfind("tapdiff.part.", 0) != 0) out.set(key, value);
  out.set(kStages, GgufValue::array(GgufValueType::INT32, {GgufValue::i32(first), GgufValue::i32(last)}));
  out.set(kVocab, GgufValue::u32(static_cast<std::uint32_t>(c.n_vocab)));
  out.set("tapdiff.part.tied_output", GgufValue::boolean(c.tied_output));
  out.set("tapdiff.part.qkv_bias", GgufValue::boolean(c.qkv_bias));
  out.set("tapdiff.part.rope_freq_factors", GgufValue::boolean(c.rope_freq_factors));
  out.set("tapdiff.part.fused_qkv", GgufValue::boolean(c.fused_qkv));
  ModelConfig part = c;
  part.first_stage = first;
  part.last_stage = last;
  for (const GgufTensorInfo& t : model.tensors()) {
    if (!stages_read(part, t.name)) continue;
    out.add_tensor(t.name, t.type, std::vector<std::int64_t>(t.ne.begin(), t.ne.end()),
                   std::vector<std::uint8_t>(t.data, t.data + t.n_bytes));
  }
  out.write(path);
}

}  // namespace tapdiff
