// GGUF writer -> reader -> writer: every metadata value type and every tensor type survive,
// and rewriting a parsed file reproduces it byte for byte.
#include <cstdio>
#include <gtest/gtest.h>
#include <iterator>
#include <unistd.h>

#include "model/error.hpp"
#include "model/gguf.hpp"
#include "model/gguf_writer.hpp"

namespace tapdiff {
namespace {

using VT = GgufValueType;

GgufWriter every_kind_of_file(std::uint32_t version, std::uint32_t alignment) {
  GgufWriter w(version);
  w.set("general.architecture", GgufValue::string("llama"));
  if (alignment != 32) w.set("general.alignment", GgufValue::u32(alignment));
  w.set("t.u8", GgufValue::uint(VT::UINT8, 255));
  w.set("t.i8", GgufValue::sint(VT::INT8, -128));
  w.set("t.u16", GgufValue::uint(VT::UINT16, 65535));
  w.set("t.i16", GgufValue::sint(VT::INT16, -32768));
  w.set("t.u32", GgufValue::uint(VT::UINT32, 4294967295u));
  w.set("t.i32", GgufValue::sint(VT::INT32, -2147483647 - 1));
  w.set("t.u64", GgufValue::uint(VT::UINT64, 18446744073709551615ull));
  w.set("t.i64", GgufValue::sint(VT::INT64, -9223372036854775807ll - 1));
  w.set("t.f32", GgufValue::f32(-1.5e-7f));
  w.set("t.f64", GgufValue::real(VT::FLOAT64, 3.141592653589793));
  w.set("t.bool", GgufValue::boolean(true));
  w.set("t.string", GgufValue::string("héllo ▁world"));
  w.set("t.empty_string", GgufValue::string(""));
  w.set("t.strings", GgufValue::strings({"a", "", "<0x0A>", "▁the"}));
  w.set("t.floats", GgufValue::floats({0.5f, -2.0f, 1e30f}));
  w.set("t.ints", GgufValue::int32s({1, -1, 7}));
  w.set("t.empty_array", GgufValue::array(VT::UINT64, {}));
  w.set("t.u64s", GgufValue::array(VT::UINT64, {GgufValue::uint(VT::UINT64, 1ull << 40)}));
  w.set("t.bools", GgufValue::array(VT::BOOL, {GgufValue::boolean(false), GgufValue::boolean(true)}));
  w.set("t.nested", GgufValue::array(VT::ARRAY, {GgufValue::strings({"x", "y"}),
                                                  GgufValue::strings({}),
                                                  GgufValue::strings({"z"})}));
  // One tensor per type, bytes a recognizable pattern (the container does not decode them).
  int i = 0;
  for (const auto& t : kGgmlTypes) {
    const std::int64_t ne0 = t.block_elems * 2, ne1 = 3;
    std::vector<std::uint8_t> bytes(static_cast<std::size_t>(ne0 * ne1 / t.block_elems * t.block_bytes));
    for (std::size_t k = 0; k < bytes.size(); ++k) bytes[k] = std::uint8_t(k * 31 + i);
    w.add_tensor("tensor." + std::string(t.name), t.type, {ne0, ne1}, std::move(bytes));
    ++i;
  }
  w.add_tensor_f32("vector.3d", {2, 3, 4}, std::vector<float>(24, 0.25f));
  w.add_tensor_f32("vector.4d", {1, 2, 1, 2}, {1, 2, 3, 4});
  return w;
}

struct RoundTripCase {
  std::uint32_t version;
  std::uint32_t alignment;
};

std::string round_trip_case_name(const ::testing::TestParamInfo<RoundTripCase>& c) {
  return "v" + std::to_string(c.param.version) + "_align" + std::to_string(c.param.alignment);
}

class GgufRoundTrip : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(GgufRoundTrip, ReaderSeesWhatWriterWrote) {
  const auto [version, alignment] = GetParam();
  const GgufWriter w = every_kind_of_file(version, alignment);
  const auto bytes = w.to_bytes();
  const GgufFile f = GgufFile::from_bytes("roundtrip.gguf", bytes);

  EXPECT_EQ(f.version(), version);
  EXPECT_EQ(f.alignment(), alignment);
  EXPECT_EQ(f.data_offset() % alignment, 0u);
  ASSERT_NE(f.find("t.u64"), nullptr);
  EXPECT_EQ(f.find("t.u64")->as_uint(), 18446744073709551615ull);
  EXPECT_EQ(f.find("t.i64")->as_int(), -9223372036854775807ll - 1);
  EXPECT_EQ(f.find("t.i8")->as_int(), -128);
  EXPECT_EQ(f.find("t.f32")->as_float(), double(-1.5e-7f));
  EXPECT_EQ(f.find("t.f64")->as_float(), 3.141592653589793);
  EXPECT_EQ(f.find("t.string")->as_string(), "héllo ▁world");
  EXPECT_EQ(f.find("t.nested")->as_array().size(), 3u);
  EXPECT_EQ(f.find("t.nested")->as_array()[0].as_array()[1].as_string(), "y");
  EXPECT_EQ(f.find("t.nested")->as_array()[1].as_array().size(), 0u);
  EXPECT_EQ(f.find("missing"), nullptr);

  // Everything written is read back equal.
  const GgufFile again = GgufFile::from_bytes("again.gguf", GgufWriter::from(f).to_bytes());
  ASSERT_EQ(f.metadata().size(), again.metadata().size());
  for (std::size_t k = 0; k < f.metadata().size(); ++k) {
    EXPECT_EQ(f.metadata()[k].first, again.metadata()[k].first);
    EXPECT_TRUE(f.metadata()[k].second == again.metadata()[k].second) << f.metadata()[k].first;
  }
  ASSERT_EQ(f.tensors().size(), std::size(kGgmlTypes) + 2);
  for (const auto& t : f.tensors()) {
    EXPECT_EQ(t.offset % alignment, 0u) << t.name;
    EXPECT_EQ(static_cast<std::uint64_t>(t.data - f.bytes()) % alignment, 0u) << t.name;
  }
  const auto& q4k = *f.find_tensor("tensor.Q4_K");
  EXPECT_EQ(q4k.type, GgmlType::Q4_K);
  EXPECT_EQ(q4k.ne, (std::vector<std::int64_t>{512, 3}));
  EXPECT_EQ(q4k.n_bytes, 6u * 144u);
  EXPECT_EQ(q4k.data[5], std::uint8_t(5 * 31 + 7));

  // Bit-exact: rewriting the parsed file gives the same bytes.
  EXPECT_EQ(GgufWriter::from(f).to_bytes(), bytes);
}

INSTANTIATE_TEST_SUITE_P(Versions, GgufRoundTrip,
                         ::testing::Values(RoundTripCase{3, 32}, RoundTripCase{2, 32},
                                           RoundTripCase{3, 64}, RoundTripCase{3, 8}),
                         round_trip_case_name);

TEST(GgufFileIo, WriteThenMapFromDisk) {
  const std::string path = ::testing::TempDir() + "tapdiff_roundtrip_" + std::to_string(getpid()) + ".gguf";
  const GgufWriter w = every_kind_of_file(3, 32);
  w.write(path);
  const GgufFile f = GgufFile::open(path);
  EXPECT_EQ(f.file_size(), w.to_bytes().size());
  EXPECT_EQ(GgufWriter::from(f).to_bytes(), w.to_bytes());
  std::remove(path.c_str());
}

TEST(GgufFileIo, MissingFileNamesThePath) {
  try {
    GgufFile::open("/nonexistent/dir/model.gguf");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/model.gguf"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos);
  }
}

TEST(GgufFileIo, UnwritablePathLeavesNothingBehind) {
  const GgufWriter w = every_kind_of_file(3, 32);
  EXPECT_THROW(w.write("/nonexistent/dir/out.gguf"), InputError);
}

TEST(GgufTypedGetters, ErrorsNameTheKey) {
  GgufWriter w;
  w.set("a.string", GgufValue::string("x"));
  w.set("a.negative", GgufValue::i32(-3));
  w.set("a.count", GgufValue::u32(7));
  const GgufFile f = GgufFile::from_bytes("getters.gguf", w.to_bytes());
  EXPECT_EQ(f.get_uint("a.count"), 7u);
  EXPECT_EQ(f.get_float("a.count"), 7.0);
  EXPECT_FALSE(f.get_uint_opt("absent").has_value());
  auto message = [&](auto fn) {
    try {
      fn();
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message([&] { f.get_uint("a.string"); }),
            "getters.gguf: a.string: expected a non-negative integer, got string \"x\"");
  EXPECT_EQ(message([&] { f.get_uint("a.negative"); }),
            "getters.gguf: a.negative: expected a non-negative integer, got i32 -3");
  EXPECT_EQ(message([&] { f.get_string("a.count"); }),
            "getters.gguf: a.count: expected a string, got u32 7");
  EXPECT_EQ(message([&] { f.get_uint("absent.key"); }),
            "getters.gguf: absent.key: required metadata key is missing");
}

}  // namespace
}  // namespace tapdiff
