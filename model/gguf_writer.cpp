#include "model/gguf_writer.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fmt/format.h>
#include <stdexcept>

#include "model/error.hpp"

namespace tapdiff {
namespace {

struct VectorSink {
  std::vector<std::uint8_t>& out;
  void put(const void* p, std::size_t n) {
    const auto* b = static_cast<const std::uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  }
  std::uint64_t written() const { return out.size(); }
};

struct FileSink {
  std::FILE* f;
  const std::string& path;
  std::uint64_t n = 0;
  void put(const void* p, std::size_t len) {
    if (len && std::fwrite(p, 1, len, f) != len)
      throw InputError(path, "write", fmt::format("write failed after {} bytes: {}", n,
                                                  std::strerror(errno)));
    n += len;
  }
  std::uint64_t written() const { return n; }
};

template <typename Sink, typename T>
void put_scalar(Sink& s, T v) {
  s.put(&v, sizeof(T));
}

template <typename Sink>
void put_string(Sink& s, const std::string& str) {
  put_scalar<Sink, std::uint64_t>(s, str.size());
  s.put(str.data(), str.size());
}

template <typename Sink>
void put_value(Sink& s, const GgufValue& v) {
  switch (v.type()) {
    case GgufValueType::UINT8: put_scalar(s, static_cast<std::uint8_t>(v.as_uint())); break;
    case GgufValueType::INT8: put_scalar(s, static_cast<std::int8_t>(v.as_int())); break;
    case GgufValueType::UINT16: put_scalar(s, static_cast<std::uint16_t>(v.as_uint())); break;
    case GgufValueType::INT16: put_scalar(s, static_cast<std::int16_t>(v.as_int())); break;
    case GgufValueType::UINT32: put_scalar(s, static_cast<std::uint32_t>(v.as_uint())); break;
    case GgufValueType::INT32: put_scalar(s, static_cast<std::int32_t>(v.as_int())); break;
    case GgufValueType::UINT64: put_scalar(s, v.as_uint()); break;
    case GgufValueType::INT64: put_scalar(s, v.as_int()); break;
    case GgufValueType::FLOAT32: put_scalar(s, static_cast<float>(v.as_float())); break;
    case GgufValueType::FLOAT64: put_scalar(s, v.as_float()); break;
    case GgufValueType::BOOL: put_scalar(s, static_cast<std::uint8_t>(v.as_bool())); break;
    case GgufValueType::STRING: put_string(s, v.as_string()); break;
    case GgufValueType::ARRAY:
      put_scalar(s, static_cast<std::uint32_t>(v.array_type()));
      put_scalar<Sink, std::uint64_t>(s, v.as_array().size());
      for (const auto& item : v.as_array()) {
        if (item.type() != v.array_type())
          throw std::invalid_argument("GgufWriter: array element type differs from the array's");
        put_value(s, item);
      }
      break;
  }
}

template <typename Sink>
void pad_to(Sink& s, std::uint64_t alignment) {
  static const std::uint8_t zeros[256] = {};
  std::uint64_t pad = (alignment - s.written() % alignment) % alignment;
  while (pad > 0) {
    const std::size_t n = pad < sizeof(zeros) ? pad : sizeof(zeros);
    s.put(zeros, n);
    pad -= n;
  }
}

}  // namespace

GgufWriter::GgufWriter(std::uint32_t version) : version_(version) {
  if (version != 2 && version != 3) throw std::invalid_argument("GgufWriter: version must be 2 or 3");
}

GgufWriter GgufWriter::from(const GgufFile& file) {
  GgufWriter w(file.version());
  for (const auto& [key, value] : file.metadata()) w.set(key, value);
  for (const auto& t : file.tensors())
    w.add_tensor(t.name, t.type, t.ne, std::vector<std::uint8_t>(t.data, t.data + t.n_bytes));
  return w;
}

void GgufWriter::set(const std::string& key, GgufValue value) {
  for (auto& [k, v] : metadata_)
    if (k == key) {
      v = std::move(value);
      return;
    }
  metadata_.emplace_back(key, std::move(value));
}

namespace {

std::uint64_t encoded_bytes(const std::string& name, GgmlType type, const std::vector<std::int64_t>& ne) {
  const auto& traits = ggml_type_traits(type);
  if (ne.empty() || ne.size() > static_cast<std::size_t>(kGgufMaxDims))
    throw std::invalid_argument(fmt::format("GgufWriter: tensor {} needs 1..4 dims", name));
  std::int64_t n = 1;
  for (auto d : ne) n *= d;
  if (ne[0] % traits.block_elems != 0)
    throw std::invalid_argument(fmt::format("GgufWriter: tensor {}: {} needs ne[0] % {} == 0",
                                            name, traits.name, traits.block_elems));
  return std::uint64_t(n / traits.block_elems * traits.block_bytes);
}

void check_size(const std::string& name, std::uint64_t expected, std::size_t got) {
  if (got != expected)
    throw std::invalid_argument(fmt::format("GgufWriter: tensor {}: expected {} bytes, got {}", name, expected, got));
}

}  // namespace

void GgufWriter::add_tensor(const std::string& name, GgmlType type, std::vector<std::int64_t> ne,
                            std::vector<std::uint8_t> bytes) {
  const std::uint64_t n_bytes = encoded_bytes(name, type, ne);
  check_size(name, n_bytes, bytes.size());
  add(Tensor{name, type, std::move(ne), n_bytes, std::move(bytes), nullptr});
}

void GgufWriter::add_tensor(const std::string& name, GgmlType type, std::vector<std::int64_t> ne, MakeBytes make) {
  const std::uint64_t n_bytes = encoded_bytes(name, type, ne);
  add(Tensor{name, type, std::move(ne), n_bytes, {}, std::move(make)});
}

void GgufWriter::add(Tensor tensor) {
  for (const auto& t : tensors_)
    if (t.name == tensor.name)
      throw std::invalid_argument(fmt::format("GgufWriter: duplicate tensor {}", tensor.name));
  tensors_.push_back(std::move(tensor));
}

void GgufWriter::add_tensor_f32(const std::string& name, std::vector<std::int64_t> ne,
                                const std::vector<float>& values) {
  std::vector<std::uint8_t> bytes(values.size() * sizeof(float));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  add_tensor(name, GgmlType::F32, std::move(ne), std::move(bytes));
}

std::uint64_t GgufWriter::alignment() const {
  for (const auto& [k, v] : metadata_)
    if (k == "general.alignment") return v.as_uint();
  return kGgufDefaultAlignment;
}

template <typename Sink>
void GgufWriter::emit(Sink& s) const {
  const std::uint64_t align = alignment();
  put_scalar(s, kGgufMagic);
  put_scalar(s, version_);
  put_scalar<Sink, std::uint64_t>(s, tensors_.size());
  put_scalar<Sink, std::uint64_t>(s, metadata_.size());
  for (const auto& [key, value] : metadata_) {
    put_string(s, key);
    put_scalar(s, static_cast<std::uint32_t>(value.type()));
    put_value(s, value);
  }
  std::uint64_t offset = 0;
  for (const auto& t : tensors_) {
    put_string(s, t.name);
    put_scalar(s, static_cast<std::uint32_t>(t.ne.size()));
    for (auto d : t.ne) put_scalar(s, static_cast<std::uint64_t>(d));
    put_scalar(s, static_cast<std::uint32_t>(t.type));
    put_scalar(s, offset);
    offset += (t.n_bytes + align - 1) / align * align;
  }
  if (tensors_.empty()) return;
  pad_to(s, align);
  for (const auto& t : tensors_) {
    if (t.make) {
      const std::vector<std::uint8_t> made = t.make();
      check_size(t.name, t.n_bytes, made.size());
      s.put(made.data(), made.size());
    } else {
      s.put(t.bytes.data(), t.bytes.size());
    }
    pad_to(s, align);
  }
}

std::vector<std::uint8_t> GgufWriter::to_bytes() const {
  std::vector<std::uint8_t> out;
  VectorSink sink{out};
  emit(sink);
  return out;
}

void GgufWriter::write(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw InputError(path, "output", fmt::format("cannot create: {}", std::strerror(errno)));
  try {
    FileSink sink{f, path};
    emit(sink);
    if (std::fflush(f) != 0)
      throw InputError(path, "write", fmt::format("flush failed: {}", std::strerror(errno)));
  } catch (...) {
    std::fclose(f);
    std::remove(tmp.c_str());
    throw;
  }
  if (std::fclose(f) != 0 || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    throw InputError(path, "write", fmt::format("cannot finish the file: {}", std::strerror(err)));
  }
}

}  // namespace tapdiff
