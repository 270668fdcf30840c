// Model hashes remembered within a process and across processes: every traced run declares
// its model's sha256, and hashing a 7B file takes seconds. An entry answers only for the exact
// FileIdentity it was hashed at (device, inode, size, modification and change times).
// Across processes: one small file per model file in $XDG_CACHE_HOME/tapdiff/sha256/
// (~/.cache/tapdiff/sha256/ without it), named by device and inode. A missing, unreadable or
// stale entry is a miss, and a cache that cannot be written is skipped: the hash is then
// computed again, never guessed.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "model/mapped_file.hpp"

namespace tapdiff {

std::optional<std::string> remembered_sha256(const FileIdentity& file);
void remember_sha256(const FileIdentity& file, const std::string& hex);
// The folder of the cross-process entries; empty when neither XDG_CACHE_HOME nor HOME is set.
std::filesystem::path sha256_cache_dir();

}  // namespace tapdiff
