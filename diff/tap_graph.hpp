// What diff knows about each catalogue tap: its tolerance class and the taps it is computed
// from (for the jump test: a tap diverges when its error jumps beyond its inputs' error).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tapdiff::diff {

// A tap an input comes from. layer_offset -1 means the previous layer (or token_embd before
// layer 0); all_earlier_positions means every position 0..p feeds position p (the KV cache).
struct TapInput {
  std::string_view name;
  int layer_offset = 0;
  bool all_earlier_positions = false;
};

// "embedding", "norm", "projection", "rope", "cache", "attention", "activation", "residual",
// "logits"; "" for names outside the catalogue.
std::string_view tap_class(std::string_view name);
std::vector<std::string_view> tap_classes();

// The inputs of tap `name` at `layer` (global taps: layer -1), resolved to (name, layer) pairs.
struct ResolvedInput {
  std::string name;
  int layer = -1;
  bool all_earlier_positions = false;
};
std::vector<ResolvedInput> tap_inputs(std::string_view name, int layer, int n_layer);

}  // namespace tapdiff::diff
