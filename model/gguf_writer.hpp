// Writes GGUF v3 (or v2) files: metadata in insertion order, tensors in insertion order, each
// tensor's data aligned to `general.alignment` (default 32), padding bytes zero. A file read
// with GgufFile and written back with GgufWriter::from is byte-identical.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/gguf.hpp"

namespace tapdiff {

class GgufWriter {
public:
  explicit GgufWriter(std::uint32_t version = 3);
  static GgufWriter from(const GgufFile& file);

  // Sets a key; a key set again keeps its first position.
  void set(const std::string& key, GgufValue value);
  // `bytes` must hold exactly the encoded size of `ne` elements of `type`.
  void add_tensor(const std::string& name, GgmlType type, std::vector<std::int64_t> ne,
                  std::vector<std::uint8_t> bytes);
  void add_tensor_f32(const std::string& name, std::vector<std::int64_t> ne,
                      const std::vector<float>& values);
  // A tensor whose bytes `make` produces when the file is written (then dropped), so a model
  // larger than memory can be generated: only the tensor being written is held.
  using MakeBytes = std::function<std::vector<std::uint8_t>()>;
  void add_tensor(const std::string& name, GgmlType type, std::vector<std::int64_t> ne, MakeBytes make);

  std::vector<std::uint8_t> to_bytes() const;
  // Writes to `path` through a temporary file renamed into place, so a failed write never
  // leaves a truncated model where a good one was.
  void write(const std::string& path) const;

private:
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<std::int64_t> ne;
    std::uint64_t n_bytes;
    std::vector<std::uint8_t> bytes;  // or, when empty,
    MakeBytes make;
  };
  void add(Tensor tensor);
  template <typename Sink>
  void emit(Sink& sink) const;
  std::uint64_t alignment() const;

  std::uint32_t version_;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<Tensor> tensors_;
};

}  // namespace tapdiff
