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
  std::string type = "f32";  // f32, f16, bf16, or a 32-element block type (cache_type_modeled())
  // llama.cpp rotates K (and q with it) and V by an orthonormal Hadamard transform before a
  // quantized cache stores them, and the attention output back (its attn_rot_k, attn_rot_v).
  bool rotated_k = false, rotated_v = false;
};

// Whether round_to_cache() models a cache of this type (llama.cpp's name: "q4_0", "iq4_nl").
bool cache_type_modeled(std::string_view type);

// K and V ([positions][kv_dim]) as the cache stores them, and q as the dot product against K
// converts it: to the 16-bit type, or for a block-quantized cache to q8_0 (ggml's vec_dot type
// for K of q8_0, q4_0, q5_0 and iq4_nl; q4_1 and q5_1 take q8_1, whose values are q8_0's).
void round_to_cache(const CacheFormat& cache, std::vector<double>& K, std::vector<double>& V, std::vector<double>& q,
                    std::size_t kv_dim, std::size_t head_dim);

}  // namespace tapdiff::diff
