// SHA-256 against FIPS 180-4 test vectors and the sha256 SOURCES.md pins for stories260K.
#include <filesystem>
#include <fcntl.h>
#include <fstream>
#include <iterator>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "model/hash_cache.hpp"
#include "model/mapped_file.hpp"
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

// A file no change can reach without changing its identity: its change time is seconds old.
std::string settled_file(const std::string& name, const std::string& bytes) {
  const std::string path = ::testing::TempDir() + name + "-" + std::to_string(::getpid());
  write_file(path, bytes);
  const std::int64_t changed = MappedFile(path).identity().ctime_s;
  while (::time(nullptr) <= changed + 2) ::usleep(100000);
  return path;
}

struct CacheHome {
  std::filesystem::path dir;
  explicit CacheHome(const std::string& name)
      : dir(std::filesystem::path(::testing::TempDir()) / (name + "-" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(dir);
    ::setenv("XDG_CACHE_HOME", dir.c_str(), 1);
  }
  ~CacheHome() { std::filesystem::remove_all(dir); }
};

// The entry another process would have written for the file `id` names, claiming `fields` as
// the identity it was hashed at and `hex` as its hash.
std::filesystem::path plant_entry(const CacheHome& home, const FileIdentity& id, const FileIdentity& fields,
                                  const std::string& hex) {
  const auto dir = home.dir / "tapdiff" / "sha256";
  std::filesystem::create_directories(dir);
  const auto entry = dir / fmt::format("{:x}-{:x}", id.device, id.inode);
  std::ofstream(entry, std::ios::trunc)
      << "tapdiff sha256 cache 1\n"
      << fmt::format("{} {} {} {} {} {} {}\n", fields.device, fields.inode, fields.size, fields.mtime_s,
                     fields.mtime_ns, fields.ctime_s, fields.ctime_ns)
      << hex << "\n";
  return entry;
}

std::string read_all(const std::filesystem::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), {}};
}

// The hash of a settled file is kept in the cache folder, whole, with the identity it belongs to.
TEST(Sha256, ASettledFileLeavesItsHashInTheCache) {
  const CacheHome home("sha256-cache-write");
  const std::string path = settled_file("sha256-cached", "cached content");
  EXPECT_EQ(sha256_file(path), hash("cached content"));
  const std::vector<std::filesystem::directory_entry> entries{
      std::filesystem::directory_iterator(home.dir / "tapdiff" / "sha256"), {}};
  ASSERT_EQ(entries.size(), 1u) << "one entry, no partial file left behind";
  const std::string entry = read_all(entries[0].path());
  EXPECT_NE(entry.find(hash("cached content")), std::string::npos) << entry;
  std::filesystem::remove(path);
}

// Another process's entry answers for exactly the identity it names: a planted hash proves the
// file is not hashed again, and any other size or time is a miss.
TEST(Sha256, AnEntryAnswersOnlyForTheIdentityItNames) {
  const CacheHome home("sha256-cache-read");
  const std::string path = settled_file("sha256-planted", "real content");
  const FileIdentity id = MappedFile(path).identity();
  const std::string planted(64, 'a');
  const auto plant = [&](const FileIdentity& fields) { plant_entry(home, id, fields, planted); };
  FileIdentity other_change = id;
  other_change.ctime_ns += 1;
  plant(other_change);
  EXPECT_EQ(remembered_sha256(id), std::nullopt);
  FileIdentity other_size = id;
  other_size.size += 1;
  plant(other_size);
  EXPECT_EQ(remembered_sha256(id), std::nullopt);
  plant(id);
  EXPECT_EQ(sha256_file(path), planted);
  std::filesystem::remove(path);
}

// A broken entry (truncated, not hex) is a miss, never an error.
TEST(Sha256, ABrokenEntryIsHashedAgain) {
  const CacheHome home("sha256-cache-broken");
  const std::string path = settled_file("sha256-broken", "some content");
  const FileIdentity id = MappedFile(path).identity();
  const auto entry = plant_entry(home, id, id, "not a hash");
  EXPECT_EQ(sha256_file(path), hash("some content"));
  EXPECT_NE(read_all(entry).find(hash("some content")), std::string::npos)
      << "the entry is rewritten";
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
