// GGUF v2/v3 container: metadata values, tensor infos, and a bounds-checked reader over a
// read-only mapping. Layout (all little-endian):
//   magic "GGUF" | version u32 | n_tensors u64 | n_kv u64
//   n_kv × (key string, value type u32, value)       string = u64 length + bytes
//   n_tensors × (name string, n_dims u32, ne[n_dims] u64, type u32, offset u64)
//   padding to `general.alignment` (default 32) | tensor data (offsets relative to here)
// ne[0] is the fastest-varying dimension: a [out, in] row-major matrix has ne = {in, out}.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "model/ggml_type.hpp"
#include "model/mapped_file.hpp"

namespace tapdiff {

inline constexpr std::uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as little-endian u32
inline constexpr std::uint64_t kGgufDefaultAlignment = 32;
inline constexpr int kGgufMaxDims = 4;
// Claims beyond these are refused while parsing, before anything is allocated for them (a
// sparse file can "hold" any tensor). The largest tensor of a 405B model has 2.1e9 elements and
// the largest vocabularies 256k entries: both limits leave a wide margin.
inline constexpr std::uint64_t kGgufMaxTensorElements = std::uint64_t{1} << 34;
inline constexpr std::uint64_t kGgufMaxArrayItems = std::uint64_t{1} << 24;

enum class GgufValueType : std::uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
  BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
std::string_view gguf_value_type_name(GgufValueType type);

// One metadata value. Integers keep their GGUF width in `type()`; floats are held as double
// (exact for FLOAT32); arrays hold values of one element type, possibly arrays themselves.
class GgufValue {
public:
  GgufValue() = default;
  static GgufValue uint(GgufValueType type, std::uint64_t v);
  static GgufValue sint(GgufValueType type, std::int64_t v);
  static GgufValue real(GgufValueType type, double v);
  static GgufValue u32(std::uint32_t v) { return uint(GgufValueType::UINT32, v); }
  static GgufValue i32(std::int32_t v) { return sint(GgufValueType::INT32, v); }
  static GgufValue f32(float v) { return real(GgufValueType::FLOAT32, v); }
  static GgufValue boolean(bool v);
  static GgufValue string(std::string v);
  static GgufValue array(GgufValueType elem_type, std::vector<GgufValue> items);
  static GgufValue strings(const std::vector<std::string>& items);
  static GgufValue floats(const std::vector<float>& items);
  static GgufValue int32s(const std::vector<std::int32_t>& items);

  GgufValueType type() const { return type_; }
  GgufValueType array_type() const { return array_type_; }
  bool is_unsigned() const;
  bool is_signed() const;
  bool is_integer() const { return is_unsigned() || is_signed(); }
  bool is_float() const { return type_ == GgufValueType::FLOAT32 || type_ == GgufValueType::FLOAT64; }

  // Unchecked views; callers check type() first (GgufFile's getters do).
  std::uint64_t as_uint() const { return u_; }
  std::int64_t as_int() const { return i_; }
  double as_float() const { return f_; }
  bool as_bool() const { return u_ != 0; }
  const std::string& as_string() const { return s_; }
  const std::vector<GgufValue>& as_array() const { return items_; }

  // "u32 7", "string \"llama\"", "array<string>[512]": for error messages and inspect.
  std::string describe() const;
  bool operator==(const GgufValue& other) const;

private:
  GgufValueType type_ = GgufValueType::UINT8;
  GgufValueType array_type_ = GgufValueType::UINT8;
  std::uint64_t u_ = 0;
  std::int64_t i_ = 0;
  double f_ = 0;
  std::string s_;
  std::vector<GgufValue> items_;
};

struct GgufTensorInfo {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<std::int64_t> ne;     // ggml order: ne[0] fastest
  std::uint64_t offset = 0;         // relative to the data section
  std::uint64_t n_elements = 0;
  std::uint64_t n_bytes = 0;
  const std::uint8_t* data = nullptr;  // inside the owning GgufFile's bytes

  std::string shape_string() const;  // "[64, 172]" in ne order
};

// A parsed GGUF file. Every count, length, offset and size was checked against the file's
// size while parsing; `data` pointers stay valid as long as the GgufFile lives.
class GgufFile {
public:
  static GgufFile open(const std::string& path);
  // Parses bytes already in memory (tests, fuzzing); `name` is used in error messages.
  static GgufFile from_bytes(std::string name, std::vector<std::uint8_t> bytes);

  const std::string& path() const { return path_; }
  std::uint32_t version() const { return version_; }
  std::uint64_t alignment() const { return alignment_; }
  std::uint64_t data_offset() const { return data_offset_; }  // absolute file offset
  std::uint64_t file_size() const { return size_; }
  const std::uint8_t* bytes() const { return bytes_; }
  // The hash of the bytes parsed; a file opened from disk is hashed once per process
  // (model/sha256.hpp).
  std::string sha256() const;

  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  const GgufValue* find(std::string_view key) const;
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;

  // Typed, required or optional metadata. A missing required key or a value of the wrong type
  // throws InputError naming the file and the key.
  std::uint64_t get_uint(std::string_view key) const;
  std::optional<std::uint64_t> get_uint_opt(std::string_view key) const;
  double get_float(std::string_view key) const;
  std::optional<double> get_float_opt(std::string_view key) const;
  std::string get_string(std::string_view key) const;
  std::optional<std::string> get_string_opt(std::string_view key) const;

  // The tensor `name` with exactly these dims (ggml order), else InputError naming both shapes.
  const GgufTensorInfo& tensor(std::string_view name, const std::vector<std::int64_t>& ne) const;

private:
  GgufFile() = default;
  void parse();

  std::string path_;
  // The owner of bytes_: the mapping of a file opened from disk, or the bytes given.
  std::shared_ptr<const MappedFile> mapped_;
  std::shared_ptr<const std::vector<std::uint8_t>> given_;
  const std::uint8_t* bytes_ = nullptr;
  std::uint64_t size_ = 0;
  std::uint32_t version_ = 0;
  std::uint64_t alignment_ = kGgufDefaultAlignment;
  std::uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::unordered_map<std::string, std::size_t> metadata_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string, std::size_t> tensor_index_;
};

}  // namespace tapdiff
