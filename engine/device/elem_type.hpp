// Storage types of engine buffers: activations that a real engine keeps in 16 bits (GEMM
// inputs, the KV cache) and weight matrices are stored as one of these.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace tapdiff::engine {

enum class ElemType : std::uint8_t { f32, f16, bf16 };

inline constexpr std::size_t elem_size(ElemType t) { return t == ElemType::f32 ? 4 : 2; }

inline constexpr std::string_view elem_type_name(ElemType t) {
  return t == ElemType::f32 ? "f32" : t == ElemType::f16 ? "f16" : "bf16";
}

// fn(std::integral_constant<ElemType, t>{}): a type known at run time as a template argument.
template <typename Fn>
inline void with_elem_type(ElemType t, const Fn& fn) {
  switch (t) {
    case ElemType::f32:
      return fn(std::integral_constant<ElemType, ElemType::f32>{});
    case ElemType::f16:
      return fn(std::integral_constant<ElemType, ElemType::f16>{});
    case ElemType::bf16:
      return fn(std::integral_constant<ElemType, ElemType::bf16>{});
  }
}

}  // namespace tapdiff::engine
