// ggml tensor types as GGUF stores them: ids, block sizes and bytes per block.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace tapdiff {

// Values are GGUF's on-disk ids (ggml.h `enum ggml_type`).
enum class GgmlType : std::uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  BF16 = 30,
};

struct GgmlTypeTraits {
  GgmlType type;
  std::string_view name;
  std::int64_t block_elems;  // elements per block (1 for plain floats)
  std::int64_t block_bytes;  // bytes per block
};

// The types tapdiff reads, writes, quantizes and dequantizes, in id order.
inline constexpr GgmlTypeTraits kGgmlTypes[] = {
    {GgmlType::F32, "F32", 1, 4},       {GgmlType::F16, "F16", 1, 2},
    {GgmlType::Q4_0, "Q4_0", 32, 18},   {GgmlType::Q4_1, "Q4_1", 32, 20},
    {GgmlType::Q5_0, "Q5_0", 32, 22},   {GgmlType::Q5_1, "Q5_1", 32, 24},
    {GgmlType::Q8_0, "Q8_0", 32, 34},   {GgmlType::Q4_K, "Q4_K", 256, 144},
    {GgmlType::Q5_K, "Q5_K", 256, 176}, {GgmlType::Q6_K, "Q6_K", 256, 210},
    {GgmlType::BF16, "BF16", 1, 2},
};

// Traits of a supported type id, or nullopt for ids tapdiff does not handle.
std::optional<GgmlTypeTraits> ggml_type_traits(std::uint32_t id);
const GgmlTypeTraits& ggml_type_traits(GgmlType type);
std::string_view ggml_type_name(GgmlType type);
std::optional<GgmlType> ggml_type_from_name(std::string_view name);

}  // namespace tapdiff
