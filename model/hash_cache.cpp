#include "model/hash_cache.hpp"

#include <unistd.h>

#include <cstdlib>
#include <fmt/format.h>
#include <fstream>
#include <map>
#include <mutex>

namespace tapdiff {
namespace {

constexpr const char* kEntryHeader = "tapdiff sha256 cache 1";

std::mutex& process_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::map<FileIdentity, std::string>& process_hashes() {
  static std::map<FileIdentity, std::string> hashes;
  return hashes;
}

std::string identity_line(const FileIdentity& f) {
  return fmt::format("{} {} {} {} {} {} {}", f.device, f.inode, f.size, f.mtime_s, f.mtime_ns, f.ctime_s,
                     f.ctime_ns);
}

std::filesystem::path entry_path(const FileIdentity& f) {
  const std::filesystem::path dir = sha256_cache_dir();
  return dir.empty() ? dir : dir / fmt::format("{:x}-{:x}", f.device, f.inode);
}

bool is_sha256_hex(const std::string& s) {
  return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

std::optional<std::string> read_entry(const FileIdentity& f) {
  const std::filesystem::path path = entry_path(f);
  if (path.empty()) return std::nullopt;
  std::ifstream in(path);
  std::string header, identity, hex;
  if (!std::getline(in, header) || !std::getline(in, identity) || !std::getline(in, hex)) return std::nullopt;
  if (header != kEntryHeader || identity != identity_line(f) || !is_sha256_hex(hex)) return std::nullopt;
  return hex;
}

// Written under a name of this process's own and renamed: a reader sees a whole entry or none.
void write_entry(const FileIdentity& f, const std::string& hex) {
  const std::filesystem::path path = entry_path(f);
  if (path.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) return;
  const std::filesystem::path partial = path.string() + fmt::format(".{}.partial", ::getpid());
  {
    std::ofstream out(partial, std::ios::trunc);
    out << kEntryHeader << '\n' << identity_line(f) << '\n' << hex << '\n';
    if (!out.flush()) {
      out.close();
      std::filesystem::remove(partial, ec);
      return;
    }
  }
  std::filesystem::rename(partial, path, ec);
  if (ec) std::filesystem::remove(partial, ec);
}

}  // namespace

std::filesystem::path sha256_cache_dir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && *xdg == '/') return std::filesystem::path(xdg) / "tapdiff" / "sha256";
  const char* home = std::getenv("HOME");
  if (home != nullptr && *home == '/') return std::filesystem::path(home) / ".cache" / "tapdiff" / "sha256";
  return {};
}

std::optional<std::string> remembered_sha256(const FileIdentity& file) {
  const std::lock_guard<std::mutex> lock(process_mutex());
  if (const auto it = process_hashes().find(file); it != process_hashes().end()) return it->second;
  std::optional<std::string> hex = read_entry(file);
  if (hex) process_hashes().emplace(file, *hex);
  return hex;
}

void remember_sha256(const FileIdentity& file, const std::string& hex) {
  const std::lock_guard<std::mutex> lock(process_mutex());
  process_hashes().emplace(file, hex);
  write_entry(file, hex);
}

}  // namespace tapdiff
