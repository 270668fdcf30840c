// The GGUF parser. Nothing here trusts the file: each read is checked against the bytes that
// remain, each count against the smallest space its items could occupy, each product and sum
// against overflow, before anything is allocated or dereferenced.
#include <algorithm>
#include <cstring>
#include <fmt/format.h>
#include <limits>

#include "model/error.hpp"
#include "model/gguf.hpp"
#include "model/mapped_file.hpp"
#include "model/sha256.hpp"

namespace tapdiff {
namespace {

constexpr int kMaxArrayNesting = 8;

class Cursor {
public:
  Cursor(const std::string& file, const std::uint8_t* data, std::uint64_t size)
      : file_(file), data_(data), size_(size) {}

  std::uint64_t pos() const { return pos_; }
  void seek(std::uint64_t at) { pos_ = at; }
  std::uint64_t remaining() const { return size_ - pos_; }

  [[noreturn]] void fail(const std::string& field, const std::string& problem,
                         std::uint64_t at) const {
    throw InputError(file_, field, problem, static_cast<std::int64_t>(at));
  }

  void need(std::uint64_t n, const std::string& field) const {
    if (n > remaining())
      fail(field, fmt::format("expected {} more bytes, the file ends after {}", n, remaining()),
           pos_);
  }

  template <typename T>
  T read(const std::string& field) {
    need(sizeof(T), field);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(const std::string& field) {
    const std::uint64_t at = pos_;
    if (remaining() < sizeof(std::uint64_t)) need(sizeof(std::uint64_t), field + " length");
    const auto len = read<std::uint64_t>(field);
    if (len > remaining())
      fail(field, fmt::format("string length {} runs past the end of the file ({} bytes remain)",
                              len, remaining()),
           at);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return s;
  }

  // A count of items that each occupy at least `min_item_bytes` must fit in what remains.
  void check_count(std::uint64_t count, std::uint64_t min_item_bytes, const std::string& field,
                   std::uint64_t at) const {
    if (min_item_bytes > 0 && count > remaining() / min_item_bytes)
      fail(field, fmt::format("count {} cannot fit: {} items of at least {} bytes each need "
                              "more than the {} bytes left in the file (truncated file or "
                              "corrupt count)",
                              count, count, min_item_bytes, remaining()),
           at);
  }

private:
  const std::string& file_;
  const std::uint8_t* data_;
  std::uint64_t size_;
  std::uint64_t pos_ = 0;
};

bool is_known_value_type(std::uint32_t t) { return t <= 12; }

std::uint64_t min_value_bytes(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8: case GgufValueType::INT8: case GgufValueType::BOOL: return 1;
    case GgufValueType::UINT16: case GgufValueType::INT16: return 2;
    case GgufValueType::UINT32: case GgufValueType::INT32: case GgufValueType::FLOAT32: return 4;
    case GgufValueType::UINT64: case GgufValueType::INT64: case GgufValueType::FLOAT64: return 8;
    case GgufValueType::STRING: return 8;
    case GgufValueType::ARRAY: return 12;
  }
  return 1;
}

GgufValue read_value(Cursor& c, GgufValueType type, const std::string& field, int depth) {
  const std::uint64_t at = c.pos();
  switch (type) {
    case GgufValueType::UINT8: return GgufValue::uint(type, c.read<std::uint8_t>(field));
    case GgufValueType::INT8: return GgufValue::sint(type, c.read<std::int8_t>(field));
    case GgufValueType::UINT16: return GgufValue::uint(type, c.read<std::uint16_t>(field));
    case GgufValueType::INT16: return GgufValue::sint(type, c.read<std::int16_t>(field));
    case GgufValueType::UINT32: return GgufValue::uint(type, c.read<std::uint32_t>(field));
    case GgufValueType::INT32: return GgufValue::sint(type, c.read<std::int32_t>(field));
    case GgufValueType::UINT64: return GgufValue::uint(type, c.read<std::uint64_t>(field));
    case GgufValueType::INT64: return GgufValue::sint(type, c.read<std::int64_t>(field));
    case GgufValueType::FLOAT32: return GgufValue::real(type, c.read<float>(field));
    case GgufValueType::FLOAT64: return GgufValue::real(type, c.read<double>(field));
    case GgufValueType::BOOL: {
      const auto b = c.read<std::uint8_t>(field);
      if (b > 1) c.fail(field, fmt::format("expected a bool (0 or 1), got {}", b), at);
      return GgufValue::boolean(b != 0);
    }
    case GgufValueType::STRING: return GgufValue::string(c.read_string(field));
    case GgufValueType::ARRAY: {
      if (depth >= kMaxArrayNesting)
        c.fail(field, fmt::format("arrays nested deeper than {} levels", kMaxArrayNesting), at);
      const auto elem = c.read<std::uint32_t>(field + " element type");
      if (!is_known_value_type(elem))
        c.fail(field + " element type", fmt::format("expected a value type 0..12, got {}", elem),
               at);
      const auto count_at = c.pos();
      const auto count = c.read<std::uint64_t>(field + " count");
      const auto elem_type = static_cast<GgufValueType>(elem);
      c.check_count(count, min_value_bytes(elem_type), field + " count", count_at);
      if (count > kGgufMaxArrayItems)
        c.fail(field + " count",
               fmt::format("{} items is more than the {} this reader accepts in one array", count,
                           kGgufMaxArrayItems),
               count_at);
      std::vector<GgufValue> items;
      items.reserve(count);
      // Items are named only when one fails (a vocabulary is 50k-150k of them): it is read again
      // under its own name, which the error then carries.
      for (std::uint64_t i = 0; i < count; ++i) {
        const std::uint64_t item_at = c.pos();
        try {
          items.push_back(read_value(c, elem_type, field, depth + 1));
        } catch (const InputError&) {
          c.seek(item_at);
          read_value(c, elem_type, fmt::format("{}[{}]", field, i), depth + 1);
          throw;
        }
      }
      return GgufValue::array(elem_type, std::move(items));
    }
  }
  c.fail(field, "unknown value type", at);
}

}  // namespace

GgufFile GgufFile::open(const std::string& path) {
  auto mapped = std::make_shared<MappedFile>(path);
  GgufFile f;
  f.path_ = path;
  f.bytes_ = mapped->data();
  f.size_ = mapped->size();
  f.mapped_ = std::move(mapped);
  f.parse();
  return f;
}

std::string GgufFile::sha256() const {
  return mapped_ ? sha256_of_mapping(*mapped_) : sha256_hex(bytes_, std::size_t(size_));
}

GgufFile GgufFile::from_bytes(std::string name, std::vector<std::uint8_t> bytes) {
  auto owned = std::make_shared<std::vector<std::uint8_t>>(std::move(bytes));
  GgufFile f;
  f.path_ = std::move(name);
  f.bytes_ = owned->data();
  f.size_ = owned->size();
  f.given_ = std::move(owned);
  f.parse();
  return f;
}

void GgufFile::parse() {
  Cursor c(path_, bytes_, size_);

  const auto magic = c.read<std::uint32_t>("magic");
  if (magic != kGgufMagic) {
    char got[5] = {};
    std::memcpy(got, &magic, 4);
    for (char& ch : got)
      if (ch && (ch < 32 || ch > 126)) ch = '?';
    c.fail("magic", fmt::format("expected \"GGUF\", got \"{}\" (0x{:08x}): not a GGUF file", got, magic), 0);
  }
  version_ = c.read<std::uint32_t>("version");
  if (version_ != 2 && version_ != 3)
    c.fail("version", fmt::format("expected GGUF version 2 or 3, got {}", version_), 4);

  const auto n_tensors = c.read<std::uint64_t>("tensor count");
  const auto n_kv = c.read<std::uint64_t>("metadata count");
  // Smallest possible entries: a key of length 0 plus a type and a u8 value; a tensor info
  // with an empty name, one dimension, a type and an offset.
  c.check_count(n_kv, 8 + 4 + 1, "metadata count", 16);
  metadata_.reserve(n_kv);
  for (std::uint64_t i = 0; i < n_kv; ++i) {
    const auto at = c.pos();
    std::string key = c.read_string(fmt::format("metadata[{}] key", i));
    const std::string field = fmt::format("metadata[{}] \"{}\"", i, key);
    if (metadata_index_.count(key)) c.fail(field, "duplicate metadata key", at);
    const auto type_at = c.pos();
    const auto type = c.read<std::uint32_t>(field + " type");
    if (!is_known_value_type(type))
      c.fail(field + " type", fmt::format("expected a value type 0..12, got {}", type), type_at);
    GgufValue value = read_value(c, static_cast<GgufValueType>(type), field, 0);
    metadata_index_.emplace(key, metadata_.size());
    metadata_.emplace_back(std::move(key), std::move(value));
  }

  if (const GgufValue* a = find("general.alignment")) {
    if (a->type() != GgufValueType::UINT32)
      throw InputError(path_, "general.alignment",
                       fmt::format("expected u32, got {}", a->describe()));
    alignment_ = a->as_uint();
    if (alignment_ == 0 || (alignment_ & (alignment_ - 1)) != 0)
      throw InputError(path_, "general.alignment",
                       fmt::format("expected a nonzero power of two, got {}", alignment_));
  }

  c.check_count(n_tensors, 8 + 4 + 8 + 4 + 8, "tensor count", 8);
  tensors_.reserve(n_tensors);
  for (std::uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    const auto name_at = c.pos();
    t.name = c.read_string(fmt::format("tensor_info[{}] name", i));
    const std::string field = fmt::format("tensor_info[{}] \"{}\"", i, t.name);
    if (tensor_index_.count(t.name)) c.fail(field, "duplicate tensor name", name_at);

    const auto dims_at = c.pos();
    const auto n_dims = c.read<std::uint32_t>(field + " n_dims");
    if (n_dims < 1 || n_dims > kGgufMaxDims)
      c.fail(field + " n_dims", fmt::format("expected 1..{}, got {}", kGgufMaxDims, n_dims),
             dims_at);
    std::uint64_t n_elements = 1;
    for (std::uint32_t d = 0; d < n_dims; ++d) {
      const auto dim_at = c.pos();
      const auto dim = c.read<std::uint64_t>(fmt::format("{} ne[{}]", field, d));
      if (dim < 1 || dim > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        c.fail(fmt::format("{} ne[{}]", field, d),
               fmt::format("expected a dimension in 1..2^63-1, got {}", dim), dim_at);
      if (__builtin_mul_overflow(n_elements, dim, &n_elements) ||
          n_elements > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        c.fail(fmt::format("{} ne[{}]", field, d),
               "the product of the dimensions overflows a 64-bit element count", dim_at);
      t.ne.push_back(static_cast<std::int64_t>(dim));
    }
    if (n_elements > kGgufMaxTensorElements)
      c.fail(field + " ne",
             fmt::format("shape {} claims {} elements, more than the {} (2^34) this reader "
                         "accepts for one tensor",
                         fmt::format("[{}]", fmt::join(t.ne, ", ")), n_elements,
                         kGgufMaxTensorElements),
             dims_at);
    t.n_elements = n_elements;

    const auto type_at = c.pos();
    const auto type_id = c.read<std::uint32_t>(field + " type");
    const auto traits = ggml_type_traits(type_id);
    if (!traits)
      c.fail(field + " type",
             fmt::format("unsupported ggml tensor type {} (supported: F32, F16, BF16, Q8_0, "
                         "Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K)",
                         type_id),
             type_at);
    t.type = traits->type;
    if (t.ne[0] % traits->block_elems != 0)
      c.fail(field + " ne[0]",
             fmt::format("{} needs ne[0] to be a multiple of its block size {}, got {}",
                         traits->name, traits->block_elems, t.ne[0]),
             dims_at);
    if (__builtin_mul_overflow(n_elements / traits->block_elems,
                               static_cast<std::uint64_t>(traits->block_bytes), &t.n_bytes))
      c.fail(field, "tensor byte size overflows 64 bits", dims_at);

    const auto offset_at = c.pos();
    t.offset = c.read<std::uint64_t>(field + " offset");
    if (t.offset % alignment_ != 0)
      c.fail(field + " offset",
             fmt::format("expected a multiple of the alignment {}, got {}", alignment_, t.offset),
             offset_at);
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  const std::uint64_t end_of_infos = c.pos();
  data_offset_ = (end_of_infos + alignment_ - 1) / alignment_ * alignment_;
  if (tensors_.empty()) return;
  if (data_offset_ > size_)
    throw InputError(path_, "tensor data",
                     fmt::format("expected the data section at offset {}, the file ends at {}",
                                 data_offset_, size_),
                     static_cast<std::int64_t>(end_of_infos));

  const std::uint64_t data_size = size_ - data_offset_;
  for (auto& t : tensors_) {
    if (t.offset > data_size || t.n_bytes > data_size - t.offset)
      throw InputError(path_, fmt::format("tensor \"{}\" data", t.name),
                       fmt::format("expected {} bytes at data offset {}, the data section holds "
                                   "only {} bytes",
                                   t.n_bytes, t.offset, data_size),
                       static_cast<std::int64_t>(data_offset_ + std::min(t.offset, data_size)));
    t.data = bytes_ + data_offset_ + t.offset;
  }

  std::vector<const GgufTensorInfo*> by_offset;
  by_offset.reserve(tensors_.size());
  for (const auto& t : tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](auto* a, auto* b) { return a->offset < b->offset; });
  for (std::size_t i = 1; i < by_offset.size(); ++i) {
    const auto* prev = by_offset[i - 1];
    const auto* cur = by_offset[i];
    if (prev->offset + prev->n_bytes > cur->offset)
      throw InputError(path_, fmt::format("tensor \"{}\" data", cur->name),
                       fmt::format("overlaps tensor \"{}\" (bytes {}..{} of the data section)",
                                   prev->name, prev->offset, prev->offset + prev->n_bytes),
                       static_cast<std::int64_t>(data_offset_ + cur->offset));
  }
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = metadata_index_.find(std::string(key));
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::optional<std::uint64_t> GgufFile::get_uint_opt(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->is_unsigned()) return v->as_uint();
  if (v->is_signed() && v->as_int() >= 0) return static_cast<std::uint64_t>(v->as_int());
  throw InputError(path_, std::string(key),
                   fmt::format("expected a non-negative integer, got {}", v->describe()));
}

std::uint64_t GgufFile::get_uint(std::string_view key) const {
  if (auto v = get_uint_opt(key)) return *v;
  throw InputError(path_, std::string(key), "required metadata key is missing");
}

std::optional<double> GgufFile::get_float_opt(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->is_float() || v->is_integer()) return v->as_float();
  throw InputError(path_, std::string(key),
                   fmt::format("expected a number, got {}", v->describe()));
}

double GgufFile::get_float(std::string_view key) const {
  if (auto v = get_float_opt(key)) return *v;
  throw InputError(path_, std::string(key), "required metadata key is missing");
}

std::optional<std::string> GgufFile::get_string_opt(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type() == GgufValueType::STRING) return v->as_string();
  throw InputError(path_, std::string(key),
                   fmt::format("expected a string, got {}", v->describe()));
}

std::string GgufFile::get_string(std::string_view key) const {
  if (auto v = get_string_opt(key)) return *v;
  throw InputError(path_, std::string(key), "required metadata key is missing");
}

const GgufTensorInfo& GgufFile::tensor(std::string_view name,
                                       const std::vector<std::int64_t>& ne) const {
  const GgufTensorInfo* t = find_tensor(name);
  if (!t)
    throw InputError(path_, fmt::format("tensor \"{}\"", name),
                     fmt::format("required tensor is missing (expected shape [{}])",
                                 fmt::join(ne, ", ")));
  if (t->ne != ne)
    throw InputError(path_, fmt::format("tensor \"{}\"", name),
                     fmt::format("expected shape [{}], got {}", fmt::join(ne, ", "),
                                 t->shape_string()));
  return *t;
}

}  // namespace tapdiff
