#include <fmt/format.h>

#include "model/gguf.hpp"

namespace tapdiff {

std::string_view gguf_value_type_name(GgufValueType type) {
  switch (type) {
    case GgufValueType::UINT8: return "u8";
    case GgufValueType::INT8: return "i8";
    case GgufValueType::UINT16: return "u16";
    case GgufValueType::INT16: return "i16";
    case GgufValueType::UINT32: return "u32";
    case GgufValueType::INT32: return "i32";
    case GgufValueType::FLOAT32: return "f32";
    case GgufValueType::BOOL: return "bool";
    case GgufValueType::STRING: return "string";
    case GgufValueType::ARRAY: return "array";
    case GgufValueType::UINT64: return "u64";
    case GgufValueType::INT64: return "i64";
    case GgufValueType::FLOAT64: return "f64";
  }
  return "unknown";
}

GgufValue GgufValue::uint(GgufValueType type, std::uint64_t v) {
  GgufValue out;
  out.type_ = type;
  out.u_ = v;
  out.i_ = static_cast<std::int64_t>(v);
  out.f_ = static_cast<double>(v);
  return out;
}

GgufValue GgufValue::sint(GgufValueType type, std::int64_t v) {
  GgufValue out;
  out.type_ = type;
  out.i_ = v;
  out.u_ = static_cast<std::uint64_t>(v);
  out.f_ = static_cast<double>(v);
  return out;
}

GgufValue GgufValue::real(GgufValueType type, double v) {
  GgufValue out;
  out.type_ = type;
  out.f_ = type == GgufValueType::FLOAT32 ? static_cast<double>(static_cast<float>(v)) : v;
  return out;
}

GgufValue GgufValue::boolean(bool v) {
  GgufValue out = uint(GgufValueType::BOOL, v ? 1 : 0);
  return out;
}

GgufValue GgufValue::string(std::string v) {
  GgufValue out;
  out.type_ = GgufValueType::STRING;
  out.s_ = std::move(v);
  return out;
}

GgufValue GgufValue::array(GgufValueType elem_type, std::vector<GgufValue> items) {
  GgufValue out;
  out.type_ = GgufValueType::ARRAY;
  out.array_type_ = elem_type;
  out.items_ = std::move(items);
  return out;
}

GgufValue GgufValue::strings(const std::vector<std::string>& items) {
  std::vector<GgufValue> values;
  values.reserve(items.size());
  for (const auto& s : items) values.push_back(string(s));
  return array(GgufValueType::STRING, std::move(values));
}

GgufValue GgufValue::floats(const std::vector<float>& items) {
  std::vector<GgufValue> values;
  values.reserve(items.size());
  for (float f : items) values.push_back(f32(f));
  return array(GgufValueType::FLOAT32, std::move(values));
}

GgufValue GgufValue::int32s(const std::vector<std::int32_t>& items) {
  std::vector<GgufValue> values;
  values.reserve(items.size());
  for (auto v : items) values.push_back(i32(v));
  return array(GgufValueType::INT32, std::move(values));
}

bool GgufValue::is_unsigned() const {
  return type_ == GgufValueType::UINT8 || type_ == GgufValueType::UINT16 ||
         type_ == GgufValueType::UINT32 || type_ == GgufValueType::UINT64;
}

bool GgufValue::is_signed() const {
  return type_ == GgufValueType::INT8 || type_ == GgufValueType::INT16 ||
         type_ == GgufValueType::INT32 || type_ == GgufValueType::INT64;
}

std::string GgufValue::describe() const {
  const auto name = gguf_value_type_name(type_);
  if (is_unsigned()) return fmt::format("{} {}", name, u_);
  if (is_signed()) return fmt::format("{} {}", name, i_);
  if (is_float()) return fmt::format("{} {}", name, f_);
  switch (type_) {
    case GgufValueType::BOOL: return u_ ? "bool true" : "bool false";
    case GgufValueType::STRING: {
      constexpr std::size_t kShown = 60;
      if (s_.size() <= kShown) return fmt::format("string \"{}\"", s_);
      return fmt::format("string \"{}…\" ({} bytes)", s_.substr(0, kShown), s_.size());
    }
    case GgufValueType::ARRAY:
      return fmt::format("array<{}>[{}]", gguf_value_type_name(array_type_), items_.size());
    default: return std::string(name);
  }
}

bool GgufValue::operator==(const GgufValue& o) const {
  if (type_ != o.type_) return false;
  if (is_unsigned() || type_ == GgufValueType::BOOL) return u_ == o.u_;
  if (is_signed()) return i_ == o.i_;
  if (is_float()) return f_ == o.f_ || (f_ != f_ && o.f_ != o.f_);
  if (type_ == GgufValueType::STRING) return s_ == o.s_;
  return array_type_ == o.array_type_ && items_ == o.items_;
}

std::string GgufTensorInfo::shape_string() const {
  return fmt::format("[{}]", fmt::join(ne, ", "));
}

}  // namespace tapdiff
