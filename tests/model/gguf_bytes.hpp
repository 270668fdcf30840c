// Hand-assembled GGUF bytes for tests: each field appended explicitly, so a test can write any
// malformed value at any place.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace tapdiff::testing {

struct GgufBytes {
  std::vector<std::uint8_t> b;

  template <typename T>
  GgufBytes& put(T v) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof(T));
    return *this;
  }
  GgufBytes& u32(std::uint32_t v) { return put(v); }
  GgufBytes& u64(std::uint64_t v) { return put(v); }
  GgufBytes& str(const std::string& s) {
    u64(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  GgufBytes& header(std::uint64_t n_tensors, std::uint64_t n_kv, std::uint32_t version = 3) {
    return u32(0x46554747).u32(version).u64(n_tensors).u64(n_kv);
  }
  GgufBytes& kv_u32(const std::string& key, std::uint32_t v) { return str(key).u32(4).u32(v); }
  // name, dims (ne order), ggml type id, data offset
  GgufBytes& tensor_info(const std::string& name, const std::vector<std::uint64_t>& ne,
                         std::uint32_t type, std::uint64_t offset) {
    str(name).u32(static_cast<std::uint32_t>(ne.size()));
    for (auto d : ne) u64(d);
    return u32(type).u64(offset);
  }
  GgufBytes& pad(std::size_t alignment = 32) {
    while (b.size() % alignment) b.push_back(0);
    return *this;
  }
  GgufBytes& zeros(std::size_t n) {
    b.insert(b.end(), n, 0);
    return *this;
  }
};

}  // namespace tapdiff::testing
