// Malformed GGUF files: each is rejected with an InputError whose message names the field and
// what was expected; none crashes or reads outside the file (this suite also runs under
// ASan+UBSan in the sanitize preset).
#include <gtest/gtest.h>
#include <limits>
#include <string>

#include "test_rng.hpp"
#include "gguf_bytes.hpp"
#include "model/error.hpp"
#include "model/gguf.hpp"
#include "model/gguf_writer.hpp"

namespace tapdiff {
namespace {

using testing::GgufBytes;
constexpr std::uint32_t kF32 = 0, kQ8_0 = 8;
constexpr std::uint64_t kHuge = 1ull << 63;

std::string parse_error(const std::vector<std::uint8_t>& bytes) {
  try {
    GgufFile::from_bytes("bad.gguf", bytes);
  } catch (const InputError& e) {
    return e.what();
  }
  return "accepted";
}

// A valid file: 2 metadata keys, 2 F32 tensors of 4 and 8 elements.
GgufBytes valid_prefix_until_data() {
  GgufBytes g;
  g.header(2, 2).kv_u32("a.count", 3);
  g.str("a.names").u32(9).u32(8).u64(2).str("x").str("yz");
  g.tensor_info("first", {4}, kF32, 0).tensor_info("second", {2, 4}, kF32, 32);
  return g;
}

std::vector<std::uint8_t> valid_file() {
  GgufBytes g = valid_prefix_until_data();
  g.pad().zeros(32 + 32);
  return g.b;
}

struct MalformedCase {
  const char* what;
  std::vector<std::uint8_t> bytes;
  const char* expected;  // substring of the message
};

std::vector<MalformedCase> malformed_cases() {
  std::vector<MalformedCase> cases;
  auto add = [&](const char* what, GgufBytes g, const char* expected) {
    cases.push_back({what, std::move(g.b), expected});
  };
  add("empty file", GgufBytes{}, "magic (offset 0): expected 4 more bytes, the file ends after 0");
  add("bad magic", GgufBytes{}.u32(0x46554746).u32(3).u64(0).u64(0),
      "magic (offset 0): expected \"GGUF\", got \"FGUF\"");
  add("version 1", GgufBytes{}.header(0, 0, 1), "version (offset 4): expected GGUF version 2 or 3, got 1");
  add("version 4", GgufBytes{}.header(0, 0, 4), "expected GGUF version 2 or 3, got 4");
  add("2^63 tensors", GgufBytes{}.header(kHuge, 0), "tensor count (offset 8): count 9223372036854775808 cannot fit");
  add("2^63 metadata keys", GgufBytes{}.header(0, kHuge), "metadata count (offset 16): count 9223372036854775808 cannot fit");
  add("key length past EOF", GgufBytes{}.header(0, 1).u64(1000).zeros(8),
      "metadata[0] key (offset 24): string length 1000 runs past the end of the file");
  add("string value past EOF", GgufBytes{}.header(0, 1).str("k").u32(8).u64(kHuge),
      "metadata[0] \"k\" (offset 37): string length 9223372036854775808 runs past");
  add("unknown value type", GgufBytes{}.header(0, 1).str("k").u32(13).u32(0),
      "metadata[0] \"k\" type (offset 33): expected a value type 0..12, got 13");
  add("absurd array count", GgufBytes{}.header(0, 1).str("k").u32(9).u32(4).u64(kHuge / 2),
      "metadata[0] \"k\" count (offset 41): count 4611686018427387904 cannot fit");
  // Array items are named only when one fails: the message still says which.
  add("string item past the end", GgufBytes{}.header(0, 1).str("k").u32(9).u32(8).u64(2).str("ab").u64(1000),
      "metadata[0] \"k\"[1] (offset 59): string length 1000 runs past the end of the file");
  add("string item length cut short", GgufBytes{}.header(0, 1).str("k").u32(9).u32(8).u64(2).str("a").zeros(7),
      "metadata[0] \"k\"[1] length (offset 58): expected 8 more bytes, the file ends after 7");
  add("unknown array element type", GgufBytes{}.header(0, 1).str("k").u32(9).u32(77).u64(1),
      "metadata[0] \"k\" element type (offset 37): expected a value type 0..12, got 77");
  add("bool that is not 0 or 1", GgufBytes{}.header(0, 1).str("k").u32(7).put<std::uint8_t>(2),
      "expected a bool (0 or 1), got 2");
  add("duplicate key", GgufBytes{}.header(0, 2).kv_u32("k", 1).kv_u32("k", 2),
      "metadata[1] \"k\" (offset 41): duplicate metadata key");
  {
    GgufBytes g;
    g.header(0, 1).str("deep").u32(9);  // value type: array
    for (int i = 0; i < 10; ++i) g.u32(9).u64(1);  // of arrays of one ...
    add("arrays nested 10 deep", g, "arrays nested deeper than 8 levels");
  }
  add("alignment of the wrong type", GgufBytes{}.header(0, 1).str("general.alignment").u32(10).u64(32),
      "general.alignment: expected u32, got u64 32");
  add("alignment zero", GgufBytes{}.header(0, 1).kv_u32("general.alignment", 0),
      "general.alignment: expected a nonzero power of two, got 0");
  add("alignment not a power of two", GgufBytes{}.header(0, 1).kv_u32("general.alignment", 48),
      "expected a nonzero power of two, got 48");
  add("n_dims 0", GgufBytes{}.header(1, 0).tensor_info("t", {}, kF32, 0).zeros(64),
      "tensor_info[0] \"t\" n_dims (offset 33): expected 1..4, got 0");
  add("n_dims 5", GgufBytes{}.header(1, 0).tensor_info("t", {1, 1, 1, 1, 1}, kF32, 0).zeros(64),
      "expected 1..4, got 5");
  add("zero dimension", GgufBytes{}.header(1, 0).tensor_info("t", {4, 0}, kF32, 0),
      "tensor_info[0] \"t\" ne[1] (offset 45): expected a dimension in 1..2^63-1, got 0");
  add("dimension above 2^63", GgufBytes{}.header(1, 0).tensor_info("t", {kHuge + 1}, kF32, 0),
      "expected a dimension in 1..2^63-1");
  add("dims whose product overflows", GgufBytes{}.header(1, 0).tensor_info("t", {1ull << 40, 1ull << 40}, kF32, 0),
      "tensor_info[0] \"t\" ne[1] (offset 45): the product of the dimensions overflows");
  add("2^62 elements", GgufBytes{}.header(1, 0).tensor_info("t", {1ull << 62}, kF32, 0),
      "tensor_info[0] \"t\" ne (offset 33): shape [4611686018427387904] claims "
      "4611686018427387904 elements, more than the 17179869184 (2^34) this reader accepts");
  // Refused at the claim, before the data section is looked at (a sparse file could hold it).
  add("a 10^12-element tensor",
      GgufBytes{}.header(1, 0).tensor_info("huge", {1000000, 1000000}, kF32, 0).pad().zeros(64),
      "tensor_info[0] \"huge\" ne (offset 36): shape [1000000, 1000000] claims 1000000000000 "
      "elements, more than the 17179869184 (2^34)");
  add("unknown tensor type", GgufBytes{}.header(1, 0).tensor_info("t", {4}, 99, 0),
      "tensor_info[0] \"t\" type (offset 45): unsupported ggml tensor type 99");
  add("row not a multiple of the block", GgufBytes{}.header(1, 0).tensor_info("t", {48}, kQ8_0, 0),
      "Q8_0 needs ne[0] to be a multiple of its block size 32, got 48");
  add("misaligned offset", GgufBytes{}.header(1, 0).tensor_info("t", {4}, kF32, 4),
      "tensor_info[0] \"t\" offset (offset 49): expected a multiple of the alignment 32, got 4");
  add("duplicate tensor name",
      GgufBytes{}.header(2, 0).tensor_info("t", {4}, kF32, 0).tensor_info("t", {4}, kF32, 32),
      "tensor_info[1] \"t\" (offset 57): duplicate tensor name");
  add("data section missing", GgufBytes{}.header(1, 0).tensor_info("t", {4}, kF32, 0),
      "tensor data (offset 57): expected the data section at offset 64, the file ends at 57");
  add("tensor data past EOF", GgufBytes{}.header(1, 0).tensor_info("t", {4}, kF32, 0).pad().zeros(8),
      "tensor \"t\" data (offset 64): expected 16 bytes at data offset 0, the data section holds only 8 bytes");
  add("tensor offset far past EOF", GgufBytes{}.header(1, 0).tensor_info("t", {4}, kF32, 1ull << 40).pad().zeros(16),
      "expected 16 bytes at data offset 1099511627776");
  add("overlapping tensors",
      GgufBytes{}.header(2, 0).tensor_info("a", {16}, kF32, 0).tensor_info("b", {4}, kF32, 32).pad().zeros(64),
      "tensor \"b\" data (offset 128): overlaps tensor \"a\" (bytes 0..64 of the data section)");
  return cases;
}

TEST(GgufMalformed, EachCaseRejectedWithItsMessage) {
  for (const auto& c : malformed_cases()) {
    const std::string message = parse_error(c.bytes);
    EXPECT_NE(message.find(c.expected), std::string::npos)
        << c.what << "\n  expected: " << c.expected << "\n  got:      " << message;
    EXPECT_EQ(message.rfind("bad.gguf: ", 0), 0u) << c.what << ": the message names the file";
  }
}

// An array the file really holds, but longer than any vocabulary: refused before its items
// (each far larger in memory than its byte in the file) are built.
TEST(GgufMalformed, ArrayLongerThanTheLimitIsRefused) {
  GgufBytes g;
  g.header(0, 1).str("k").u32(9).u32(0).u64(kGgufMaxArrayItems + 1).zeros(kGgufMaxArrayItems + 1);
  EXPECT_NE(parse_error(g.b).find("metadata[0] \"k\" count (offset 41): 16777217 items is more "
                                  "than the 16777216 this reader accepts in one array"),
            std::string::npos)
      << parse_error(g.b);
  GgufBytes short_array;
  short_array.header(0, 1).str("k").u32(9).u32(0).u64(1000).zeros(1000);
  EXPECT_EQ(GgufFile::from_bytes("ok.gguf", short_array.b).find("k")->as_array().size(), 1000u);
}

TEST(GgufMalformed, ValidBaseFileParses) {
  const GgufFile f = GgufFile::from_bytes("good.gguf", valid_file());
  EXPECT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.find_tensor("second")->n_bytes, 32u);
}

TEST(GgufMalformed, EveryTruncationIsRejected) {
  const auto bytes = valid_file();
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    const std::vector<std::uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<long>(n));
    const std::string message = parse_error(cut);
    ASSERT_NE(message, "accepted") << "a file truncated to " << n << " bytes was accepted";
  }
}

// Truncation at each section boundary names the section being read.
TEST(GgufMalformed, TruncationAtSectionBoundariesNamesTheSection) {
  const auto bytes = valid_file();
  const std::size_t infos_end = valid_prefix_until_data().b.size();
  const struct {
    std::size_t at;
    const char* field;
  } boundaries[] = {
      {0, "magic"},
      {4, "version"},
      {8, "tensor count"},
      {16, "metadata count"},
      // Within the metadata the counts no longer fit in what is left: the message says so.
      {24, "metadata count (offset 16): count 2 cannot fit"},
      {50, "metadata[1] key length (offset 47): expected 8 more bytes, the file ends after 3"},
      {infos_end - 8, "tensor_info[1] \"second\" offset"},
      {infos_end - 4, "tensor_info[1] \"second\" offset"},
      {infos_end, "tensor data"},
      {bytes.size() - 1, "tensor \"second\" data"},
  };
  for (const auto& b : boundaries) {
    const std::vector<std::uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<long>(b.at));
    const std::string message = parse_error(cut);
    EXPECT_NE(message.find(b.field), std::string::npos)
        << "cut at " << b.at << ": expected field " << b.field << ", got " << message;
  }
}

// Random byte mutations of a real file: every outcome is "parsed" or InputError, nothing else.
TEST(GgufMalformed, RandomMutationsNeverCrash) {
  GgufWriter w;
  w.set("general.architecture", GgufValue::string("llama"));
  w.set("names", GgufValue::strings({"a", "bb", "ccc"}));
  w.set("nested", GgufValue::array(GgufValueType::ARRAY, {GgufValue::floats({1, 2})}));
  w.add_tensor_f32("t0", {8, 2}, std::vector<float>(16, 1.0f));
  w.add_tensor("t1", GgmlType::Q8_0, {32}, std::vector<std::uint8_t>(34, 1));
  const auto base = w.to_bytes();
  testing::SplitMix rng(12345);
  int accepted = 0, rejected = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    auto bytes = base;
    const int flips = 1 + int(rng.next() % 4);
    for (int k = 0; k < flips; ++k) {
      const auto pos = rng.next() % bytes.size();
      bytes[pos] = (rng.next() % 3 == 0) ? 0xff : std::uint8_t(rng.next());
    }
    if (rng.next() % 5 == 0) bytes.resize(rng.next() % bytes.size());
    try {
      GgufFile::from_bytes("mutant.gguf", bytes);
      ++accepted;
    } catch (const InputError&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 100);
  EXPECT_GT(accepted, 10);
}

}  // namespace
}  // namespace tapdiff
