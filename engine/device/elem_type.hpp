// Storage types of engine buffers: activations that a real engine keeps in 16 bits (GEMM
// inputs, the KV cache) and weight matrices are stored as one of these.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tapdiff::engine {

enum class ElemType : std::uint8_t { f32, f16, bf16 };

inline constexpr std::size_t elem_size(ElemType t) { return t == ElemType::f32 ? 4 : 2; }

inline constexpr std::string_view elem_type_name(ElemType t) {
  return t == ElemType::f32 ? "f32" : t == ElemType::f16 ? "f16" : "bf16";
}

}  // namespace tapdiff::engine
