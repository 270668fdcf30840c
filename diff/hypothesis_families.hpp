// The hypothesis families, one per kind of op (diff/hypotheses.hpp assembles them). Each
// appends the correct computation of its tap (the baseline) and its named variants.
#pragma once

#include <string>
#include <vector>

#include "diff/hypotheses.hpp"
#include "diff/replay_rows.hpp"

namespace tapdiff::diff {

void projection_candidates(const std::string& name, int layer, ReplayInputs& in, std::vector<Candidate>& out);
void embedding_candidates(ReplayInputs& in, std::vector<Candidate>& out);
void norm_candidates(const std::string& name, int layer, ReplayInputs& in, std::vector<Candidate>& out);
void rope_candidates(const std::string& name, int layer, ReplayInputs& in, std::vector<Candidate>& out);
void attention_candidates(const std::string& name, int layer, ReplayInputs& in, std::vector<Candidate>& out);
void cache_candidates(const std::string& name, int layer, ReplayInputs& in, std::vector<Candidate>& out);
void residual_candidates(const std::string& name, int layer, ReplayInputs& in, std::vector<Candidate>& out);
void activation_candidates(int layer, ReplayInputs& in, std::vector<Candidate>& out);
// A mixture of experts (diff/hypotheses_experts.cpp): ffn.routing from ffn_gate_inp,
// ffn_gate_exps and ffn_up_exps from ffn_norm and ffn.routing, ffn.act_exps from them.
void routing_candidates(int layer, ReplayInputs& in, std::vector<Candidate>& out);
void experts_projection_candidates(const std::string& name, int layer, ReplayInputs& in, std::vector<Candidate>& out);
void experts_activation_candidates(int layer, ReplayInputs& in, std::vector<Candidate>& out);
// ffn_down from ffn.routing and ffn.act_exps.
void experts_down_candidates(int layer, ReplayInputs& in, std::vector<Candidate>& out);
// `row` (whole heads of head_dim) rotated at `position` as the model rotates layer `layer`: its base,
// pairing, frequency factors (as the run's context picks them) and scaling.
Row rotated_as_model(ReplayInputs& in, int layer, const Row& row, std::int64_t position);
// The residual stream x (tap x_name at x_layer) scaled by c between its tap and the ops that read
// it: the variant's text and class (an embedding scale where x is token_embd and c is √n_embd, as
// Gemma scales its embeddings; else the residual stream's).
struct ScaledStream {
  std::string variant, bug_class;
};
ScaledStream scaled_stream(const std::string& x_name, int x_layer, double c, const ModelConfig& config);
// The stream the residual add `resid` (resid.attn, resid.ffn) at `layer` added at position p, as
// the actual trace holds it: resid - the block's output (gemma2: its post-norm); empty when the
// trace lacks those taps.
Row stream_added_by(const std::string& resid, int layer, ReplayInputs& in, std::int64_t p);

// Zeros of the width of tap (name, layer): a row never written, by design the only kind of
// variant that may explain an all-zero actual.
Candidate never_written(const std::string& variant, const std::string& bug_class, ReplayInputs& in,
                        const std::string& name, int layer);

// The matrix a projection multiplies by: blk.{layer}.{name}.weight, the head's output.weight or,
// tied, token_embd.weight.
std::string weight_of(const std::string& name, int layer, const ModelConfig& c);
// The elements a mask holds, for a variant's text: "elements 0..31 only (32 of 64: the k/v
// width)", "elements 48..63 only (16 of 64: head 3 only)".
std::string elements_text(const std::vector<bool>& mask, const ModelConfig& c);
// Any tap with a baseline in `out`: the correct values as a buffer of the wrong type or size
// left them (rounded to f16 or bf16 in an f32 run; only a first part of the row written).
void storage_candidates(const std::string& name, int layer, ReplayInputs& in, std::vector<Candidate>& out);

// Any tap: its value taken from another buffer of the same shape, or left from the previous
// position (the output never written for this one).
void buffer_candidates(const std::string& name, int layer, ReplayInputs& in, std::vector<Candidate>& out);

}  // namespace tapdiff::diff
