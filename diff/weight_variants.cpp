#include "diff/weight_variants.hpp"

#include <algorithm>
#include <cstring>
#include <fmt/format.h>

#include "model/dequantize.hpp"
#include "model/half.hpp"
#include "model/quant_blocks.hpp"
#include "tapdiff/tap_filter.hpp"

namespace tapdiff::diff {
namespace {

bool block_quantized(GgmlType type) {
  return type != GgmlType::F32 && type != GgmlType::F16 && type != GgmlType::BF16;
}

// The elements whose low and high nibbles share bytes: a 4/5-bit block's 32, a K-quant's 64.
std::size_t nibble_group(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1: return kQK;
    case GgmlType::Q4_K: case GgmlType::Q5_K: return 64;
    default: return 0;
  }
}

std::vector<float> decode(const GgufTensorInfo& t, const std::vector<std::uint8_t>& bytes) {
  std::vector<float> out(t.n_elements);
  dequantize_row(t.type, bytes.data(), out.data(), std::int64_t(t.n_elements));
  return out;
}

std::vector<std::uint8_t> raw_bytes(const GgufTensorInfo& t) {
  return std::vector<std::uint8_t>(t.data, t.data + t.n_bytes);
}

std::uint16_t u16_at(const std::uint8_t* p) { return std::uint16_t(p[0] | (p[1] << 8)); }

// The bytes read as n f16 values; past the tensor's n_bytes the buffer held zeros.
std::vector<float> bytes_as_f16(const GgufTensorInfo& t) {
  std::vector<float> out(t.n_elements, 0.0f);
  const std::uint64_t n = std::min<std::uint64_t>(t.n_elements, t.n_bytes / 2);
  for (std::uint64_t i = 0; i < n; ++i) out[i] = fp16_to_fp32(u16_at(t.data + 2 * i));
  return out;
}

// Only the first `kept` bytes read; the rest of the buffer zero.
std::vector<float> truncated(const GgufTensorInfo& t, std::uint64_t kept) {
  std::vector<std::uint8_t> bytes(t.n_bytes, 0);
  std::memcpy(bytes.data(), t.data, std::min(kept, t.n_bytes));
  return decode(t, bytes);
}


// Q4_K / Q5_K with the min term's sign flipped: x = d·sc·q + dmin·m.
std::vector<float> k_quant_min_negated(const GgufTensorInfo& t, std::size_t block_bytes) {
  std::vector<std::uint8_t> bytes = raw_bytes(t);
  constexpr std::size_t kDminHighByte = offsetof(BlockQ4_K, dmin) + 1;
  for (std::size_t at = 0; at + block_bytes <= bytes.size(); at += block_bytes)
    bytes[at + kDminHighByte] ^= 0x80u;  // the f16 sign bit
  return decode(t, bytes);
}

// Q4_1 / Q5_1 decoded another way: value(d, m, q, d_bits, m_bits) for each element, q its
// integer. Each block starts with its fp16 d and m; the integers are read back off the correct
// values.
template <typename Value>
std::vector<float> d_m_redecoded(const GgufTensorInfo& t, const std::vector<float>& correct, std::size_t block_bytes,
                                 Value value) {
  std::vector<float> out(correct);
  for (std::size_t b = 0; b * kQK < out.size() && (b + 1) * block_bytes <= t.n_bytes; ++b) {
    const std::uint16_t d_bits = u16_at(t.data + b * block_bytes), m_bits = u16_at(t.data + b * block_bytes + 2);
    const float d = fp16_to_fp32(d_bits), m = fp16_to_fp32(m_bits);
    if (d == 0) continue;
    for (std::size_t j = b * kQK; j < (b + 1) * kQK; ++j)
      out[j] = value(d, m, std::nearbyint((correct[j] - m) / d), d_bits, m_bits);
  }
  return out;
}

// A float32 vector staged as bf16 and decoded as f16.
std::vector<float> bf16_read_as_f16(const std::vector<float>& values) {
  std::vector<float> out(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) out[i] = fp16_to_fp32(fp32_to_bf16(values[i]));
  return out;
}

// Q8_0 with its fp16 block scale read as bf16.
std::vector<float> q8_0_scale_as_bf16(const GgufTensorInfo& t) {
  std::vector<float> out(t.n_elements);
  for (std::uint64_t b = 0; b < t.n_elements / kQK; ++b) {
    const auto blk = load_block<BlockQ8_0>(t.data, std::int64_t(b));
    const float d = bf16_to_fp32(blk.d);
    for (int j = 0; j < kQK; ++j) out[b * kQK + std::size_t(j)] = d * float(blk.qs[j]);
  }
  return out;
}

// Q8_0 with its int8 quants read as uint8 (negative q become q + 256).
std::vector<float> q8_0_quants_unsigned(const GgufTensorInfo& t) {
  std::vector<float> out(t.n_elements);
  for (std::uint64_t b = 0; b < t.n_elements / kQK; ++b) {
    const auto blk = load_block<BlockQ8_0>(t.data, std::int64_t(b));
    const float d = fp16_to_fp32(blk.d);
    for (int j = 0; j < kQK; ++j) out[b * kQK + std::size_t(j)] = d * float(std::uint8_t(blk.qs[j]));
  }
  return out;
}

// Blocks read at a stride of `stride` bytes instead of their size (the scale's bytes left out of
// the block size); past the tensor's bytes the buffer held zeros.
std::vector<float> block_stride(const GgufTensorInfo& t, std::size_t block_bytes, std::size_t stride) {
  std::vector<std::uint8_t> bytes(t.n_bytes, 0);
  for (std::size_t b = 0; b * block_bytes < bytes.size(); ++b)
    for (std::size_t k = 0; k < block_bytes && b * block_bytes + k < bytes.size(); ++k)
      if (b * stride + k < t.n_bytes) bytes[b * block_bytes + k] = t.data[b * stride + k];
  return decode(t, bytes);
}

// Each block decoded with the scale d (its first two bytes) of the block `shift` places on, a
// block past either end keeping its own: the scale indexed off by one.
std::vector<float> scales_shifted(const GgufTensorInfo& t, std::size_t block_bytes, std::ptrdiff_t shift) {
  std::vector<std::uint8_t> bytes(t.data, t.data + t.n_bytes);
  const auto blocks = std::ptrdiff_t(t.n_bytes / block_bytes);
  for (std::ptrdiff_t b = 0; b < blocks; ++b)
    if (b + shift >= 0 && b + shift < blocks)
      std::copy_n(t.data + (b + shift) * std::ptrdiff_t(block_bytes), 2, bytes.begin() + b * std::ptrdiff_t(block_bytes));
  return decode(t, bytes);
}

// The two halves of every group of `group` elements exchanged: in the 4-bit formats the low
// nibbles of a block's bytes hold its first half, the high nibbles the second.
std::vector<float> halves_swapped(std::vector<float> values, std::size_t group) {
  for (std::size_t at = 0; at + group <= values.size(); at += group)
    std::swap_ranges(values.begin() + std::ptrdiff_t(at), values.begin() + std::ptrdiff_t(at + group / 2),
                     values.begin() + std::ptrdiff_t(at + group / 2));
  return values;
}

// Each group's halves interleaved: element 2j its first half's j, 2j + 1 its second half's j (the
// low and high nibble of byte j unpacked side by side).
std::vector<float> halves_interleaved(const std::vector<float>& values, std::size_t group) {
  std::vector<float> out(values);
  const std::size_t half = group / 2;
  for (std::size_t at = 0; at + group <= values.size(); at += group)
    for (std::size_t j = 0; j < half; ++j) {
      out[at + 2 * j] = values[at + j];
      out[at + 2 * j + 1] = values[at + half + j];
    }
  return out;
}

// Q4_K / Q5_K with sub-blocks 4..7 given only the low 4 bits of their 6-bit scale and min (bits
// 4-5 live in bits 6-7 of scale bytes 0..7, which sub-blocks 0..3 mask off).
std::vector<float> k_quant_scale_high_bits_dropped(const GgufTensorInfo& t, std::size_t block_bytes) {
  std::vector<std::uint8_t> bytes = raw_bytes(t);
  constexpr std::size_t kScales = offsetof(BlockQ4_K, scales);
  for (std::size_t at = 0; at + block_bytes <= bytes.size(); at += block_bytes)
    for (std::size_t j = 0; j < 8; ++j) bytes[at + kScales + j] &= 0x3Fu;
  return decode(t, bytes);
}

}  // namespace

std::vector<WeightVariant> weight_variants(const GgufTensorInfo& t) {
  std::vector<WeightVariant> out;
  std::vector<float> correct = dequantize_tensor(t);
  if (block_quantized(t.type)) {
    out.push_back({fmt::format("the raw {} bytes read as f16 values: no dequantization",
                               ggml_type_name(t.type)),
                   "dequantization", false, bytes_as_f16(t)});
    const std::uint64_t kept = std::min<std::uint64_t>(t.n_elements / 2, t.n_bytes);
    out.push_back({fmt::format("read with a short byte size: {} of its {} bytes (elements / 2), the "
                               "rest zero",
                               kept, t.n_bytes),
                   "weight-loading", false, truncated(t, kept)});
  }
  if (t.type == GgmlType::Q8_0) {
    out.push_back({"Q8_0 blocks decoded with the fp16 scale read as bf16", "dequantization", false,
                   q8_0_scale_as_bf16(t)});
    out.push_back({"Q8_0 quants read as unsigned bytes (int8 read as uint8)", "dequantization", false,
                   q8_0_quants_unsigned(t)});
    out.push_back({"Q8_0 blocks addressed at a stride of 32 bytes instead of 34 (the scale left out of the block size)",
                   "dequantization", false, block_stride(t, sizeof(BlockQ8_0), sizeof(BlockQ8_0::qs))});
  }
  if (t.type == GgmlType::Q4_0)
    out.push_back({"Q4_0 blocks addressed at a stride of 16 bytes instead of 18 (the scale left out of the block size)",
                   "dequantization", false, block_stride(t, sizeof(BlockQ4_0), sizeof(BlockQ4_0::qs))});
  if (const std::size_t group = nibble_group(t.type)) {
    out.push_back({fmt::format("{} nibbles taken in the other order (high nibble first)", ggml_type_name(t.type)),
                   "dequantization", false, halves_swapped(correct, group)});
    out.push_back({fmt::format("{} nibbles unpacked interleaved (byte j's low and high nibble as elements 2j and 2j+1, "
                               "not j and j+{})",
                               ggml_type_name(t.type), group / 2),
                   "dequantization", false, halves_interleaved(correct, group)});
  }
  if (const GgmlTypeTraits& traits = ggml_type_traits(t.type); block_quantized(t.type) && traits.block_elems == kQK)
    for (const std::ptrdiff_t shift : {1, -1})
      out.push_back({fmt::format("{} blocks decoded with the scale of the block {} (the scale's index off by one)",
                                 ggml_type_name(t.type), shift > 0 ? "after them" : "before them"),
                     "dequantization", false, scales_shifted(t, traits.block_bytes, shift)});
  if (t.type == GgmlType::Q4_1 || t.type == GgmlType::Q5_1) {
    const std::size_t block_bytes = t.type == GgmlType::Q4_1 ? sizeof(BlockQ4_1) : sizeof(BlockQ5_1);
    const std::string_view type = ggml_type_name(t.type);
    out.push_back({fmt::format("{} blocks decoded as (q + m) * d instead of d * q + m (the min added before the scale)",
                               type),
                   "dequantization", false,
                   d_m_redecoded(t, correct, block_bytes,
                                 [](float d, float m, float q, std::uint16_t, std::uint16_t) { return (q + m) * d; })});
    out.push_back({fmt::format("{} blocks decoded with the fp16 min read as bf16", type), "dequantization", false,
                   d_m_redecoded(t, correct, block_bytes, [](float d, float, float q, std::uint16_t, std::uint16_t m) {
                     return d * q + bf16_to_fp32(m);
                   })});
    out.push_back({fmt::format("{} blocks decoded with the fp16 scale read as bf16", type), "dequantization", false,
                   d_m_redecoded(t, correct, block_bytes, [](float, float m, float q, std::uint16_t d, std::uint16_t) {
                     return bf16_to_fp32(d) * q + m;
                   })});
  }
  if (t.type == GgmlType::Q4_K || t.type == GgmlType::Q5_K) {
    const std::size_t block_bytes = t.type == GgmlType::Q4_K ? sizeof(BlockQ4_K) : sizeof(BlockQ5_K);
    out.push_back({fmt::format("{} blocks decoded with the min term negated", ggml_type_name(t.type)),
                   "dequantization", false, k_quant_min_negated(t, block_bytes)});
    out.push_back({fmt::format("{} sub-blocks 4..7 decoded with only the low 4 bits of their 6-bit scale and min (the "
                               "high bits in scale bytes 0..7 dropped)",
                               ggml_type_name(t.type)),
                   "dequantization", false, k_quant_scale_high_bits_dropped(t, block_bytes)});
  }
  if (t.ne.size() == 1 && t.name.size() > 5 && t.name.substr(t.name.size() - 5) == ".bias")
    out.push_back({"the bias staged as bf16 and decoded as f16 (bytes read as the wrong type)",
                   "bias", false, bf16_read_as_f16(correct)});
  out.push_back({"all zero: the buffer was allocated but never filled", "weight-loading", false,
                 std::vector<float>(t.n_elements, 0.0f)});
  out.insert(out.begin(), {"the correct decode", "", true, std::move(correct)});
  return out;
}

std::vector<WeightVariant> loader_mixups(const GgufTensorInfo& t, const GgufFile& file) {
  std::vector<WeightVariant> out;
  const auto [rest, layer] = split_full_tap_name(t.name);
  for (const GgufTensorInfo& other : file.tensors()) {
    if (other.name == t.name || other.type != t.type || other.ne != t.ne) continue;
    const auto [other_rest, other_layer] = split_full_tap_name(other.name);
    const bool sibling = other_layer == layer;                               // same layer, another tensor
    const bool neighbour = other_rest == rest && std::abs(other_layer - layer) == 1;  // the same one, next layer
    if (!sibling && !neighbour) continue;
    out.push_back({fmt::format("the bytes of {}: the loader read another tensor of the same type and shape",
                               other.name),
                   "weight-loading", false, dequantize_tensor(other)});
  }
  return out;
}

std::optional<WeightVariant> offset_fitted(const GgufTensorInfo& t, const GgufFile& file, std::int64_t row,
                                           const std::vector<float>& actual,
                                           const std::function<bool(const float*, const float*, std::int64_t)>& close) {
  const GgmlTypeTraits& traits = ggml_type_traits(t.type);
  const std::int64_t cols = t.ne.empty() ? 0 : t.ne[0];
  if (cols <= 0 || std::int64_t(actual.size()) != cols) return std::nullopt;
  const std::int64_t row_bytes = cols / traits.block_elems * traits.block_bytes;
  const std::uint8_t* base = t.data - t.offset - file.data_offset();
  const auto size = std::int64_t(file.file_size());
  const std::int64_t at = std::int64_t(t.data - base) + row * row_bytes;
  // The first block (or 32 plain values) rules most shifts out before a whole row is decoded.
  const std::int64_t head = std::min(cols, traits.block_elems > 1 ? traits.block_elems : std::int64_t(32));
  std::vector<float> decoded(std::size_t(cols), 0.0f);
  const std::int64_t window = std::max<std::int64_t>(2 * row_bytes, 4096);
  for (std::int64_t distance = 1; distance <= window; ++distance)
    for (const std::int64_t k : {distance, -distance}) {
      if (at + k < 0 || at + k + row_bytes > size) continue;
      dequantize_row(t.type, base + at + k, decoded.data(), head);
      if (!close(decoded.data(), actual.data(), head)) continue;
      dequantize_row(t.type, base + at + k, decoded.data(), cols);
      if (!close(decoded.data(), actual.data(), cols)) continue;
      std::vector<std::uint8_t> bytes(t.n_bytes, 0);
      const std::int64_t from = std::int64_t(t.data - base) + k;
      for (std::int64_t i = std::max<std::int64_t>(0, -from); i < std::int64_t(t.n_bytes) && from + i < size; ++i)
        bytes[std::size_t(i)] = base[from + i];
      const std::string rows = k % row_bytes == 0 ? fmt::format(" = {} row{}", std::abs(k / row_bytes),
                                                                std::abs(k / row_bytes) == 1 ? "" : "s")
                                                  : "";
      WeightVariant w{fmt::format("the bytes read {} bytes {} their offset{} (fitted on row {}): the tensor's data "
                                  "offset, header size or alignment off by {}",
                                  std::abs(k), k > 0 ? "after" : "before", rows, row, k),
                      "weight-loading", false, decode(t, bytes)};
      const std::int64_t n_rows = std::int64_t(t.n_elements) / cols;
      w.rows_predicted = k > 0 ? std::make_pair(std::int64_t(0), (std::int64_t(t.n_bytes) - k) / row_bytes)
                               : std::make_pair((-k + row_bytes - 1) / row_bytes, n_rows);
      return w;
    }
  return std::nullopt;
}

}  // namespace tapdiff::diff
