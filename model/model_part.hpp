// A part of a model: the GGUF's metadata whole, and the tensors of some of its stages only —
// the embedding (stage -1), layers 0..n_layer-1, the head (stage n_layer). tapdiff.part.* keys
// mark it and keep what the config otherwise derives from tensors the part no longer holds
// (the vocabulary size, biases, a tied head, ...). A repro directory (`tapdiff repro`) carries
// the part its op runs in instead of the model; the engine runs the stages a part holds, the
// hidden state entering them taken from a lockstep trace.
#pragma once

#include <optional>
#include <string>

#include "model/gguf.hpp"

namespace tapdiff {

struct ModelConfig;

struct ModelPart {
  int first_stage = -1, last_stage = 0;
  int n_vocab = 0;
  bool tied_output = false, qkv_bias = false, rope_freq_factors = false, fused_qkv = false;
};

// The part's keys, or nullopt for a whole model; InputError for keys out of range.
std::optional<ModelPart> read_model_part(const GgufFile& file, int n_layer);

// The stage tensor `name` belongs to: -1 the embedding, a layer, n_layer the head; rope_freqs,
// which every layer reads, is n_layer + 1.
int tensor_stage(const std::string& name, int n_layer);

// Whether a run of the stages config holds reads tensor `name` (a tied head reads the embedding).
bool stages_read(const ModelConfig& config, const std::string& name);

// Writes the stages first..last of `model` (a whole model or a part holding them) to `path`.
void write_model_part(const GgufFile& model, const ModelConfig& config, int first_stage, int last_stage,
                      const std::string& path);

}  // namespace tapdiff
