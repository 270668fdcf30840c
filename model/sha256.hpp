// SHA-256 (FIPS 180-4) of a byte range or a file: traces record the model's hash so a diff
// can refuse to compare runs of different models.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "model/mapped_file.hpp"

namespace tapdiff {

// fastest: the CPU's SHA extensions where it has them (every run hashes its model: a 4 GB
// file took 13 s portable, under 3 s with them); portable: plain C++, which the tests hold
// the fast path to.
enum class Sha256Impl { fastest, portable };

std::string sha256_hex(const std::uint8_t* data, std::size_t size, Sha256Impl impl = Sha256Impl::fastest);
// Computed once for each FileIdentity of a file settled on disk and remembered across runs
// (model/hash_cache.hpp): every traced run declares its model's hash, and a 7B file takes
// seconds.
std::string sha256_of_mapping(const MappedFile& file);
std::string sha256_file(const std::string& path);  // throws InputError naming the path

}  // namespace tapdiff
