// `tapdiff import`: tensors another program dumped (a directory of .npy and .safetensors files,
// as transformers' model-addition debugger writes them with full tensors) turned into a tapdiff
// trace through a small name map, so an engine with no tapdiff code can still be diffed.
//
// The map (JSON):
//   {"tokens": [1, 403, 407],            token ids at positions 0..; required
//    "prompt_length": 3,                 optional, default: every token
//    "precision": "f32",                 optional
//    "model": {"path": "m.gguf", "sha256": "..."},   optional: what diagnosis replays with
//    "taps": {"model.layers.{layer}.self_attn.q_proj": "attn_q", "lm_head": "output",
//             "model.layers.{layer}.self_attn.attn_weights":
//                 {"tap": "attn.probs", "axes": ["batch", "head", "position", "key"]}, ...}}
// Each tensor's name (a .npy file's stem, a safetensors key) is matched against the patterns;
// {layer} matches a layer number, and only per-layer taps take it. A tensor is
// (positions, row...) or (1, positions, row...): its rows are positions 0.. of its tap. "axes"
// names a tensor's axes when they are laid out otherwise: "position" once, "batch" for axes of
// size 1 to drop, any other name for the row's axes, kept in their order. A row of more axes
// than the catalogue's one-axis row is flattened ([head, dim] -> [head * dim]). What was
// permuted or flattened is said in ImportResult::aligned.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tapdiff::adapters {

struct ImportResult {
  std::size_t taps = 0;                // taps written
  std::int64_t positions = 0;          // the most rows of any tap
  std::vector<std::string> unmapped;   // tensors no pattern matched (listed, not an error)
  std::vector<std::string> aligned;    // "blk.0.attn.probs: axes (batch, head, position, key) -> ..."
};

// Throws InputError naming the file (the map or a dump) and the field that is wrong.
ImportResult import_dumps(const std::string& dump_dir, const std::string& map_path, const std::string& output);

}  // namespace tapdiff::adapters
