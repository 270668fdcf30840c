// SHA-256 against FIPS 180-4 test vectors and the sha256 SOURCES.md pins for stories260K.
#include <filesystem>
#include <fcntl.h>
#include <fstream>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <string>
#include <vector>

#include "model/sha256.hpp"

namespace tapdiff {
namespace {

std::string hash(const std::string& s) {
  return sha256_hex(reinterpret_cast<const std::uint8_t*>(s.data()), s.size());
}

TEST(Sha256, StandardVectors) {
  EXPECT_EQ(hash(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hash("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hash("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(hash(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, PaddingBoundaries) {
  // Lengths around the 56-byte boundary where the length field spills into a second block;
  // checked against Python's hashlib.sha256(b"x" * n).
  const struct {
    std::size_t n;
    const char* digest;
  } cases[] = {
      {55, "d5e285683cd4efc02d021a5c62014694958901005d6f71e89e0989fac77e4072"},
      {56, "04c26261370ee7541549d16dee320c723e3fd14671e66a099afe0a377c16888e"},
      {63, "75220b47218278e656f2013bb8f0c455a25eaf01e86c64924e9d48d89776d6f2"},
      {64, "7ce100971f64e7001e8fe5a51973ecdfe1ced42befe7ee8d5fd6219506b5393c"},
      {119, "000b48d4edf0fa7bee3c6236ecd2785baa5db4eeb8bb54341b029e0d9fa5fb0c"},
  };
  for (const auto& c : cases) EXPECT_EQ(hash(std::string(c.n, 'x')), c.digest) << c.n;
}

// The fast path (the SHA extensions, where this CPU has them) against the portable one, over
// every length up to a few blocks and one of many blocks.
TEST(Sha256, FastestEqualsPortable) {
  std::vector<std::uint8_t> bytes(70000);
  std::uint32_t state = 12345;
  for (auto& b : bytes) b = std::uint8_t((state = state * 1664525u + 1013904223u) >> 24);
  for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(63), std::size_t(64),
                        std::size_t(65), std::size_t(200), bytes.size()})
    EXPECT_EQ(sha256_hex(bytes.data(), n, Sha256Impl::fastest),
              sha256_hex(bytes.data(), n, Sha256Impl::portable)) << n;
  EXPECT_EQ(sha256_hex(reinterpret_cast<const std::uint8_t*>("abc"), 3, Sha256Impl::portable),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// A file is hashed once per process (check hashes its model three times): the second call
// answers from what the first computed, for the same device, inode, size and mtime.
TEST(Sha256, AFileSettledOnDiskIsHashedOncePerProcess) {
  const std::string path = ::testing::TempDir() + "sha256-settled-" + std::to_string(::getpid());
  write_file(path, "first content");
  const timespec long_ago[2] = {{1000000000, 0}, {1000000000, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), long_ago, 0), 0);
  EXPECT_EQ(sha256_file(path), hash("first content"));
  // Same size, same mtime put back: only the remembered hash can answer "first content".
  write_file(path, "other content");
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), long_ago, 0), 0);
  EXPECT_EQ(sha256_file(path), hash("first content"));
  // A new mtime is a new file.
  const timespec later[2] = {{1000000001, 0}, {1000000001, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), later, 0), 0);
  EXPECT_EQ(sha256_file(path), hash("other content"));
  std::filesystem::remove(path);
}

// Timestamps move in kernel ticks, so a file written moments ago is hashed every time: a
// fixture rewritten at once with the same size still gets its new hash.
TEST(Sha256, AFreshFileIsHashedEveryTime) {
  const std::string path = ::testing::TempDir() + "sha256-fresh-" + std::to_string(::getpid());
  write_file(path, "first content");
  EXPECT_EQ(sha256_file(path), hash("first content"));
  write_file(path, "other content");
  EXPECT_EQ(sha256_file(path), hash("other content"));
  std::filesystem::remove(path);
}

TEST(Sha256, Stories260KMatchesItsPin) {
  const std::filesystem::path model =
      std::filesystem::path(TAPDIFF_SOURCE_DIR) / ".." / "shared" / "models" / "stories260K.gguf";
  if (!std::filesystem::exists(model)) GTEST_SKIP() << "no " << model << " (shared models absent)";
  EXPECT_EQ(sha256_file(model.string()),
            "270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d");
}

}  // namespace
}  // namespace tapdiff
