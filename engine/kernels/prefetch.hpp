// Decode steps read every weight once, in order, and do enough work per cache line that the
// hardware prefetchers alone kept too few lines in flight on the VMs measured here: a decode
// step read its weights well below the rate a plain pass over the same mapping streams. The
// host's decode loops therefore ask for the lines kPrefetchAhead bytes ahead of those they
// read (docs/engine.md, "Weights in their encoding", has the measurement). Host only.
#pragma once

#include <cstdint>

namespace tapdiff::engine {

// The f32 decode loops' distance (matvec, and the slices a batch decodes).
inline constexpr std::int64_t kPrefetchAhead = 4096;
// Precision q8's one-row products read the bytes about twice as fast (bench_matmul's Q4_K: 82
// billion weights/s against 38 at f32), and with the model's pages in 2 MiB
// (model/mapped_file.cpp) asking twice as far ahead paid: the 7B fixture's q8 decode ran 9.48
// to 9.84 tokens/s against 8.53 to 8.97 at 4 KiB (four rounds each, builds alternating). The
// f32 loops at 8 KiB: SmolLM2 Q4_K_M's f32 decode a median of 134.6 tokens/s against 142.8
// (five rounds each), the 7B fixture's 4.80 against 4.78.
inline constexpr std::int64_t kPrefetchAheadQ8 = 8192;

// Every cache line of the kBytes bytes `ahead` past p (one line when kBytes <= 64), asked into
// L2, not L1 (prefetcht1: locality 2): the 7B-shaped fixture's decode ran 15% faster at q8 and
// 4% at f32 than with the lines asked into L1 (docs/engine.md, "Weights in their encoding").
template <std::int64_t kBytes>
__attribute__((always_inline)) inline void prefetch_from(const void* p, std::int64_t ahead) {
  for (std::int64_t at = 0; at < kBytes; at += 64) __builtin_prefetch(static_cast<const char*>(p) + ahead + at, 0, 2);
}

// kPrefetchAheadQ8 past p: precision q8's one-row loops.
template <std::int64_t kBytes>
__attribute__((always_inline)) inline void prefetch_ahead(const void* p) {
  prefetch_from<kBytes>(p, kPrefetchAheadQ8);
}

}  // namespace tapdiff::engine
