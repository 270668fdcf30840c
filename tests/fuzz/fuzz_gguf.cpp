// libFuzzer target: the GGUF loading path as `tapdiff run` walks it (container, config, weight
// shapes, tokenizer, dequantization). Malformed input may only end in InputError.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/config.hpp"
#include "model/dequantize.hpp"
#include "model/error.hpp"
#include "model/gguf.hpp"
#include "model/tokenizer.hpp"

namespace {

// Dequantizing a tensor the file really holds is safe at any size, but slow: cap the work per
// input so the fuzzer keeps mutating instead of decoding one large tensor.
constexpr std::uint64_t kMaxDequantElements = 1 << 16;

void load_like_the_cli(const tapdiff::GgufFile& file) {
  for (const auto& tensor : file.tensors()) {
    if (tensor.n_elements <= kMaxDequantElements) (void)tapdiff::dequantize_tensor(tensor);
  }
  const tapdiff::ModelConfig config = tapdiff::load_model_config(file);
  tapdiff::validate_weights(file, config);
  (void)tapdiff::Tokenizer::from_gguf(file);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto file = tapdiff::GgufFile::from_bytes(
        "fuzz.gguf", std::vector<std::uint8_t>(data, data + size));
    load_like_the_cli(file);
  } catch (const tapdiff::InputError&) {
  }
  return 0;
}
