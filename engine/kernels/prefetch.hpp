// Decode steps read every weight once, in order, and do enough work per cache line that the
// hardware prefetchers alone kept too few lines in flight on the VMs measured here: a decode
// step read its weights well below the rate a plain pass over the same mapping streams. The
// host's decode loops therefore ask for the lines kPrefetchAhead bytes ahead of those they
// read (docs/engine.md, "Weights in their encoding", has the measurement). Host only.
#pragma once

#include <cstdint>

namespace tapdiff::engine {

// 8 KiB since the model's pages come in 2 MiB (model/mapped_file.cpp): the 7B fixture's q8
// decode ran 9.48 to 9.84 tokens/s against 8.53 to 8.97 at 4 KiB (four rounds each,
// alternating); its f32 decode and SmolLM2's moved within their spread.
inline constexpr std::int64_t kPrefetchAhead = 8192;

// Every cache line of the kBytes bytes `ahead` past p (one line when kBytes <= 64), asked into
// L2, not L1 (prefetcht1: locality 2): the 7B-shaped fixture's decode ran 15% faster at q8 and
// 4% at f32 than with the lines asked into L1 (docs/engine.md, "Weights in their encoding").
template <std::int64_t kBytes>
__attribute__((always_inline)) inline void prefetch_from(const void* p, std::int64_t ahead) {
  for (std::int64_t at = 0; at < kBytes; at += 64) __builtin_prefetch(static_cast<const char*>(p) + ahead + at, 0, 2);
}

// The same kPrefetchAhead past p.
template <std::int64_t kBytes>
__attribute__((always_inline)) inline void prefetch_ahead(const void* p) {
  prefetch_from<kBytes>(p, kPrefetchAhead);
}

}  // namespace tapdiff::engine
