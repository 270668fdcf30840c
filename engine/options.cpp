#include "engine/options.hpp"

namespace tapdiff::engine {

std::string_view backend_name(Backend backend) {
  return backend == Backend::cuda ? "cuda" : "host";
}

std::string_view precision_name(Precision precision) {
  switch (precision) {
    case Precision::f16:
      return "f16";
    case Precision::bf16:
      return "bf16";
    case Precision::q8:
      return "q8";
    case Precision::f32:
      break;
  }
  return "f32";
}

ElemType storage_of(Precision precision) {
  switch (precision) {
    case Precision::f16:
      return ElemType::f16;
    case Precision::bf16:
      return ElemType::bf16;
    case Precision::f32:
    case Precision::q8:
      break;
  }
  return ElemType::f32;
}

std::optional<Backend> parse_backend(std::string_view name) {
  if (name == "host") return Backend::host;
  if (name == "cuda") return Backend::cuda;
  return std::nullopt;
}

std::optional<Precision> parse_precision(std::string_view name) {
  for (Precision p : {Precision::f32, Precision::f16, Precision::bf16, Precision::q8})
    if (precision_name(p) == name) return p;
  return std::nullopt;
}

}  // namespace tapdiff::engine
