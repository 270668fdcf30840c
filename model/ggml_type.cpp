#include "model/ggml_type.hpp"

#include <stdexcept>

namespace tapdiff {

std::optional<GgmlTypeTraits> ggml_type_traits(std::uint32_t id) {
  for (const auto& t : kGgmlTypes)
    if (static_cast<std::uint32_t>(t.type) == id) return t;
  return std::nullopt;
}

const GgmlTypeTraits& ggml_type_traits(GgmlType type) {
  for (const auto& t : kGgmlTypes)
    if (t.type == type) return t;
  throw std::logic_error("ggml_type_traits: type not in kGgmlTypes");
}

std::string_view ggml_type_name(GgmlType type) { return ggml_type_traits(type).name; }

std::optional<GgmlType> ggml_type_from_name(std::string_view name) {
  for (const auto& t : kGgmlTypes)
    if (t.name == name) return t.type;
  return std::nullopt;
}

}  // namespace tapdiff
