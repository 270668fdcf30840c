// A KV cache's values as the run stored them, for attention replays: 16-bit and block-quantized
// caches, and llama.cpp's Hadamard rotation of quantized ones.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace tapdiff::diff {

// How a run's KV cache stores K and V.
struct CacheFormat {
  std::string type = "f32";  // f32, f16, bf16, or a 32-element block type (cache_type_modeled)
  // llama.cpp rotates K (and q with it) and V by an orthonormal Hadamard transform before a
  // quantized cache stores them, and the attention output back (its attn_rot_k, attn_rot_v).
  bool rotated_k = false, rotated_v = false;
  // False for a quantized cache the replay cannot store as the run did (a type it does not
  // model, or a llama.cpp trace that does not say whether it rotated): type is then f32.
  bool modeled = true;
};

// Whether the functions below model a cache of this type (llama.cpp's name: "q4_0", "iq4_nl").
bool cache_type_modeled(std::string_view type);

// Rows of K or V (each kv_dim wide) as the cache stores them: rounded to its 16-bit type, or
// quantized in blocks of 32 (in llama.cpp's rotated basis where it rotated them).
void round_k_to_cache(const CacheFormat& cache, std::vector<double>& rows, std::size_t kv_dim, std::size_t head_dim);
void round_v_to_cache(const CacheFormat& cache, std::vector<double>& rows, std::size_t kv_dim, std::size_t head_dim);
// q as the dot product against the cached K converts it: to the 16-bit type, or for a
// block-quantized cache to q8_0 (ggml's vec_dot type for K of q8_0, q4_0, q5_0 and iq4_nl;
// q4_1 and q5_1 take q8_1, whose values are q8_0's), in K's basis.
void round_q_to_cache(const CacheFormat& cache, std::vector<double>& q, std::size_t head_dim);

}  // namespace tapdiff::diff
