// gguf_dequant_dump: the C++ side of the dequantization oracle test (test_dequant_oracle.py).
//   gguf_dequant_dump write-fixture OUT.gguf   a deterministic GGUF exercising every type
//   gguf_dequant_dump dequant IN.gguf OUTDIR   OUTDIR/<tensor name>.f32, raw little-endian
// For every type T in kGgmlTypes the fixture holds
//   src.T  F32 [2*chunk, 4]  seeded values, chunk = max(32, block size) per kind of content
//   q.T    T   [2*chunk, 4]  src.T encoded by tapdiff's quantizer
//   raw.T  T   [2*chunk, 2]  random bytes, fp16/bf16/f32 fields forced finite, so the decoder
//                            is checked on bit patterns our quantizer never writes
// and `tapdiff.fixture.types` lists the type names. Exit 2 on bad input or usage.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/dequantize.hpp"
#include "model/error.hpp"
#include "model/ggml_type.hpp"
#include "model/gguf.hpp"
#include "model/gguf_writer.hpp"
#include "model/quantize.hpp"

namespace tapdiff {
namespace {

constexpr const char* kUsage =
    "usage: gguf_dequant_dump write-fixture OUT.gguf\n"
    "       gguf_dequant_dump dequant IN.gguf OUTDIR\n";

float uniform(std::mt19937& rng) {  // [-1, 1), independent of the library's distributions
  return float(rng() >> 8) * 0x1p-23f - 1.0f;
}

// One chunk of `len` values of kind k (8 kinds: two per row of q.T).
float chunk_value(int kind, std::int64_t i, float u) {
  switch (kind) {
    case 0: return u * float(1 + (i / 32) % 4);  // sub-blocks of different scales
    case 1: return u * 1e-3f + 5e-4f;            // small, mostly positive
    case 2: return u * 300.0f - 150.0f;          // large, negative shift
    case 3: return 0.0f;                         // all zero
    case 4: return i == 7 ? 2.5e4f : (i == 9 ? -1.2e4f : u * 1e-2f);  // outliers
    case 5: return -(u + 1.5f) * 10.0f;          // all negative
    case 6: return 0.37f;                        // constant
    default: return u * 1e-6f;                   // tiny: fp16 subnormals, scales underflow
  }
}

std::vector<float> source_values(std::int64_t chunk, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> x;
  for (int kind = 0; kind < 8; ++kind)
    for (std::int64_t i = 0; i < chunk; ++i) x.push_back(chunk_value(kind, i, uniform(rng)));
  return x;
}

// Clears the top exponent bit of an inf/nan (exponent all ones) so the value is finite:
// NaN payloads and inf scales are not what this oracle is about.
template <typename U>
void make_finite(std::uint8_t* p, U exp_mask, U top_exp_bit) {
  U v;
  std::memcpy(&v, p, sizeof(U));
  if ((v & exp_mask) == exp_mask) v = U(v & ~top_exp_bit);
  std::memcpy(p, &v, sizeof(U));
}

void make_fp16_finite(std::uint8_t* p) { make_finite<std::uint16_t>(p, 0x7c00, 0x4000); }

// Byte offsets of the fp16 scale fields inside one block (quant_blocks.hpp).
std::vector<int> fp16_fields(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0: case GgmlType::Q5_0: case GgmlType::Q8_0: return {0};
    case GgmlType::Q4_1: case GgmlType::Q5_1: case GgmlType::Q4_K: case GgmlType::Q5_K:
      return {0, 2};
    case GgmlType::Q6_K: return {208};
    default: return {};
  }
}

std::vector<std::uint8_t> random_blocks(const GgmlTypeTraits& t, std::int64_t n_blocks,
                                        std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(n_blocks * t.block_bytes));
  for (auto& b : bytes) b = std::uint8_t(rng() >> 24);
  for (std::int64_t b = 0; b < n_blocks; ++b) {
    std::uint8_t* blk = bytes.data() + b * t.block_bytes;
    switch (t.type) {
      case GgmlType::F32: make_finite<std::uint32_t>(blk, 0x7f800000u, 0x40000000u); break;
      case GgmlType::F16: make_fp16_finite(blk); break;
      case GgmlType::BF16: make_finite<std::uint16_t>(blk, 0x7f80, 0x4000); break;
      default:
        for (int offset : fp16_fields(t.type)) make_fp16_finite(blk + offset);
    }
  }
  return bytes;
}

void write_fixture(const std::string& path) {
  GgufWriter w;
  w.set("general.name", GgufValue::string("tapdiff dequantization oracle fixture"));
  std::vector<std::string> names;
  std::uint32_t seed = 1;
  for (const GgmlTypeTraits& t : kGgmlTypes) {
    const std::string name(t.name);
    names.push_back(name);
    const std::int64_t chunk = std::max<std::int64_t>(32, t.block_elems);
    const std::vector<float> x = source_values(chunk, seed++);
    w.add_tensor_f32("src." + name, {2 * chunk, 4}, x);
    w.add_tensor("q." + name, t.type, {2 * chunk, 4}, quantize(t.type, x));
    w.add_tensor("raw." + name, t.type, {2 * chunk, 2},
                 random_blocks(t, 4 * chunk / t.block_elems, seed++));
  }
  w.set("tapdiff.fixture.types", GgufValue::strings(names));
  w.write(path);
}

// Tensor names become file names: no separators, no leading dot.
bool safe_file_name(const std::string& name) {
  if (name.empty() || name[0] == '.') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '_' || c == '-';
  });
}

void write_f32_le(const std::string& path, const std::vector<float>& values) {
  std::vector<std::uint8_t> bytes(values.size() * 4);
  for (std::size_t i = 0; i < values.size(); ++i) {
    std::uint32_t u;
    std::memcpy(&u, &values[i], 4);
    for (int k = 0; k < 4; ++k) bytes[4 * i + k] = std::uint8_t(u >> (8 * k));
  }
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw InputError(path, "output", std::strerror(errno));
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  if (std::fclose(f) != 0 || !ok) throw InputError(path, "output", "write failed");
}

void dequant(const std::string& in, const std::string& outdir) {
  const GgufFile file = GgufFile::open(in);
  std::error_code ec;
  std::filesystem::create_directories(outdir, ec);
  if (ec) throw InputError(outdir, "output directory", ec.message());
  for (const GgufTensorInfo& t : file.tensors()) {
    if (!safe_file_name(t.name))
      throw InputError(in, "tensor name", fmt::format("'{}' is not usable as a file name", t.name));
    std::vector<float> values;
    try {
      values = dequantize_tensor(t);
    } catch (const std::invalid_argument& e) {
      throw InputError(in, "tensor " + t.name, e.what());
    }
    write_f32_le(outdir + "/" + t.name + ".f32", values);
  }
}

int run(const std::vector<std::string>& args) {
  if (args.size() == 2 && args[0] == "write-fixture") {
    write_fixture(args[1]);
    return 0;
  }
  if (args.size() == 3 && args[0] == "dequant") {
    dequant(args[1], args[2]);
    return 0;
  }
  std::fputs(kUsage, stderr);
  return 2;
}

}  // namespace
}  // namespace tapdiff

int main(int argc, char** argv) {
  try {
    return tapdiff::run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const tapdiff::InputError& e) {
    fmt::print(stderr, "gguf_dequant_dump: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "gguf_dequant_dump: internal error: {}\n", e.what());
    return 1;
  }
}
