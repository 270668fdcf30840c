// Test helper: copies a GGUF model with one element of one F32 tensor replaced by NaN or Inf.
//   plant_nonfinite IN.gguf OUT.gguf TENSOR INDEX nan|inf|-inf
// Every other byte (metadata, other tensors) is carried over through GgufWriter.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <limits>
#include <string>
#include <vector>

#include "model/gguf.hpp"
#include "model/gguf_writer.hpp"

namespace {

float parse_value(const std::string& text) {
  if (text == "nan") return std::numeric_limits<float>::quiet_NaN();
  if (text == "inf") return std::numeric_limits<float>::infinity();
  if (text == "-inf") return -std::numeric_limits<float>::infinity();
  throw std::invalid_argument("expected nan, inf or -inf, got \"" + text + "\"");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s IN.gguf OUT.gguf TENSOR INDEX nan|inf|-inf\n", argv[0]);
    return 2;
  }
  try {
    const auto in = tapdiff::GgufFile::open(argv[1]);
    const std::string target = argv[3];
    const std::uint64_t index = std::stoull(argv[4]);
    const float value = parse_value(argv[5]);
    tapdiff::GgufWriter out(in.version());
    for (const auto& [key, v] : in.metadata()) out.set(key, v);
    bool planted = false;
    for (const auto& t : in.tensors()) {
      std::vector<std::uint8_t> bytes(t.data, t.data + t.n_bytes);
      if (t.name == target) {
        if (t.type != tapdiff::GgmlType::F32 || index >= t.n_elements)
          throw std::invalid_argument(target + ": expected an F32 tensor with more than " +
                                      std::to_string(index) + " elements");
        std::memcpy(bytes.data() + index * sizeof(float), &value, sizeof(float));
        planted = true;
      }
      out.add_tensor(t.name, t.type, t.ne, std::move(bytes));
    }
    if (!planted) throw std::invalid_argument(target + ": no such tensor");
    out.write(argv[2]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "plant_nonfinite: %s\n", e.what());
    return 2;
  }
  return 0;
}
