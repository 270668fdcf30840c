// The hypothesis families, one per kind of op (diff/hypotheses.hpp assembles them). Each
// appends the correct computation of its tap (the baseline) and its named variants.
#pragma once

#include <string>
#include <vector>

#include "diff/hypotheses.hpp"

namespace tapdiff::diff {

void projection_candidates(const std::string& name, int layer, ReplayInputs& in, std::vector<Candidate>& out);
void embedding_candidates(ReplayInputs& in, std::vector<Candidate>& out);
void norm_candidates(const std::string& name, int layer, ReplayInputs& in, std::vector<Candidate>& out);
void rope_candidates(const std::string& name, int layer, ReplayInputs& in, std::vector<Candidate>& out);
void attention_candidates(const std::string& name, int layer, ReplayInputs& in, std::vector<Candidate>& out);
void cache_candidates(const std::string& name, int layer, ReplayInputs& in, std::vector<Candidate>& out);
void residual_candidates(const std::string& name, int layer, ReplayInputs& in, std::vector<Candidate>& out);
void activation_candidates(int layer, ReplayInputs& in, std::vector<Candidate>& out);
// Zeros of the width of tap (name, layer): a row never written, by design the only kind of
// variant that may explain an all-zero actual.
Candidate never_written(const std::string& variant, const std::string& bug_class, ReplayInputs& in,
                        const std::string& name, int layer);

// Any tap: its value taken from another buffer of the same shape, or left from the previous
// position (the output never written for this one).
void buffer_candidates(const std::string& name, int layer, ReplayInputs& in, std::vector<Candidate>& out);

}  // namespace tapdiff::diff
