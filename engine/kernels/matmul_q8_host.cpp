#include <type_traits>

#include "engine/kernels/host_loop.hpp"
#include "engine/kernels/matmul_q8.hpp"
#include "engine/kernels/matmul_q8_decode.hpp"
#include "engine/kernels/matmul_q8_tiles.hpp"
#include "engine/kernels/matmul_q8k.hpp"
#include "engine/kernels/prefetch.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TD_Q8_AVX2 1
#include "engine/kernels/q8_blocks_avx2.hpp"
#endif

namespace tapdiff::engine {
namespace {

#if TD_Q8_AVX2
#define TD_AVX2_INLINE __attribute__((target("avx2"), always_inline)) static inline

using q8_avx2::load32;
// Block b's groups' multipliers, one per 16 bytes (16-bit lanes).
TD_AVX2_INLINE __m256i block_multipliers(const std::int16_t* multiplier, int b) {
  return _mm256_setr_m128i(_mm_set1_epi16(multiplier[2 * b]), _mm_set1_epi16(multiplier[2 * b + 1]));
}

// IntDotLoop's parts with AVX2 (and F16C for the scales). The sums take 32 products at a time:
// maddubs multiplies unsigned by signed bytes and adds pairs into 16 bits: unsigned integers go
// in as they are, signed ones as |q| with x given q's sign (|q| <= 128, |x| <= 127: the pair
// sums fit). madd then adds pairs of those into 32 bits, times the groups' multipliers, and the
// lanes of eight blocks are added horizontally.
//
// Where the CPU has AVX-512 VNNI, one activation row (decode) goes to matmul_q8_decode and
// batches to matmul_q8_tiles. Elsewhere one row of the legacy types reads the encoded bytes in
// legacy_row_avx2 below, and batches unpack here: a tile of rows reads the unpacked run many times.
struct IntDotAvx2 {
  template <IntForm form>
  TD_AVX2_INLINE __m256i dot32(__m256i q, __m256i x, __m256i multipliers) {
    if (form == IntForm::unsigned_ints) return _mm256_madd_epi16(_mm256_maddubs_epi16(q, x), _mm256_set1_epi16(1));
    const __m256i products = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(x, q));
    if (form == IntForm::signed_ints) return _mm256_madd_epi16(products, _mm256_set1_epi16(1));
    return _mm256_madd_epi16(products, multipliers);
  }

  template <IntForm form>
  TD_AVX2_INLINE __m256i block(const IntRun& run, int b, const std::int8_t* x) {
    return dot32<form>(load32(run.q + b * kQ8Block), load32(x + b * kQ8Block),
                       form == IntForm::scaled_groups ? block_multipliers(run.multiplier, b) : __m256i{});
  }
  // The legacy blocks' fp16 scales with F16C, eight at once: f16 to f32 is exact, so these
  // are IntDotLoop's floats (a signaling NaN comes out quiet: still a NaN). Widened one by
  // one they took a quarter of a Q4_1 row's time.
  __attribute__((target("avx2,f16c"))) static void widen_f16(const std::uint16_t* h, float* f) {
    static_assert(kRunBlocks == 8, "one conversion of eight");
    _mm256_storeu_ps(f, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h))));
  }
  // IntDotLoop::k_scales eight lanes at a time (F16C for d and dmin), stored whole.
  __attribute__((target("avx2,f16c"))) static void k_scales(std::uint16_t d, std::uint16_t dmin,
                                                            const dequant_detail::KScales& s, IntRun& r) {
    const __m128 both = _mm_cvtph_ps(_mm_cvtsi32_si128(int(std::uint32_t(d) | std::uint32_t(dmin) << 16)));
    const __m256 d8 = _mm256_broadcastss_ps(both), dmin8 = _mm256_broadcastss_ps(_mm_movehdup_ps(both));
    const __m256 sc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(std::int64_t(s.sc))));
    const __m256 m = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(std::int64_t(s.m))));
    _mm256_storeu_ps(r.scale, _mm256_mul_ps(d8, sc));
    _mm256_storeu_ps(r.offset, _mm256_xor_ps(_mm256_mul_ps(dmin8, m), _mm256_set1_ps(-0.0f)));  // -(x): its sign flipped
  }
  __attribute__((target("avx2,f16c"))) static void q6_k_scales(std::uint16_t d, const std::int8_t* sc, IntRun& r) {
    static_assert(kRunGroups == 16, "one widening of sixteen");
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(r.multiplier),
                        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc))));
    _mm256_storeu_ps(r.scale, _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(d))));
    _mm256_storeu_ps(r.offset, _mm256_setzero_ps());
  }
  // Not always_inline: matmul_q8_row<IntDotAvx2> is compiled for any x86-64 on its own, and
  // rows_avx2's flatten inlines it there.
  __attribute__((target("avx2"))) static void blocks(const IntRun& run, const std::int8_t* x, int blocks,
                                                     std::int32_t* sums) {
    static_assert(kRunBlocks == 8, "one run is eight blocks: one horizontal sum");
    const bool whole = blocks == kRunBlocks;
    switch (run.form) {
      case IntForm::unsigned_ints:
        return whole ? sum8<IntForm::unsigned_ints, true>(run, x, blocks, sums)
                     : sum8<IntForm::unsigned_ints, false>(run, x, blocks, sums);
      case IntForm::signed_ints:
        return whole ? sum8<IntForm::signed_ints, true>(run, x, blocks, sums)
                     : sum8<IntForm::signed_ints, false>(run, x, blocks, sums);
      case IntForm::scaled_groups:
        return whole ? sum8<IntForm::scaled_groups, true>(run, x, blocks, sums)
                     : sum8<IntForm::scaled_groups, false>(run, x, blocks, sums);
    }
  }
  // A short run (not whole) reads only its blocks; the missing blocks' sums are 0.
  template <IntForm form, bool whole>
  TD_AVX2_INLINE void sum8(const IntRun& run, const std::int8_t* x, int blocks, std::int32_t* sums) {
    if (whole) {
      const __m256i v[8] = {block<form>(run, 0, x), block<form>(run, 1, x), block<form>(run, 2, x),
                            block<form>(run, 3, x), block<form>(run, 4, x), block<form>(run, 5, x),
                            block<form>(run, 6, x), block<form>(run, 7, x)};
      return add_lanes(v, sums);
    }
    __m256i v[8];
    for (int i = 0; i < 8; ++i) v[i] = i < blocks ? block<form>(run, i, x) : _mm256_setzero_si256();
    add_lanes(v, sums);
  }
  // sums[i] = the sum of v[i]'s eight lanes.
  TD_AVX2_INLINE void add_lanes(const __m256i (&v)[8], std::int32_t* sums) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(sums), block_sums(v));
  }
  TD_AVX2_INLINE __m256i block_sums(const __m256i (&v)[8]) {
    const __m256i h01 = _mm256_hadd_epi32(v[0], v[1]), h23 = _mm256_hadd_epi32(v[2], v[3]);
    const __m256i h45 = _mm256_hadd_epi32(v[4], v[5]), h67 = _mm256_hadd_epi32(v[6], v[7]);
    // Lanes (0, 1, 2, 3 | 0, 1, 2, 3) and (4, 5, 6, 7 | 4, 5, 6, 7): halves of each block's sum.
    const __m256i lo = _mm256_hadd_epi32(h01, h23), hi = _mm256_hadd_epi32(h45, h67);
    return _mm256_add_epi32(_mm256_permute2x128_si256(lo, hi, 0x20), _mm256_permute2x128_si256(lo, hi, 0x31));
  }
};

// KDotLoop's lanes with AVX2: a block of 32 is one vector of eight 32-bit lanes, lane L the
// sum of products 4L..4L+3 times its group's multiplier (maddubs, then madd by the multipliers),
// which is KDotLoop's lane L; the blocks' vectors are added. With one activation row the
// integers come from the encoded bytes.
template <GgmlType kType>
struct KDotAvx2 {
  __attribute__((target("avx2,f16c"))) static void widen_f16(std::uint16_t d, std::uint16_t dmin, KRun& r) {
    const __m128 both = _mm_cvtph_ps(_mm_cvtsi32_si128(int(std::uint32_t(d) | std::uint32_t(dmin) << 16)));
    r.d = _mm_cvtss_f32(both);
    r.dmin = _mm_cvtss_f32(_mm_movehdup_ps(both));
  }
  // KDotLoop::k_scales on 64-bit words (dequant.hpp's k_scales_mins), widened to 16 bits at once.
  __attribute__((target("avx2"))) static void k_scales(const std::uint8_t* packed, KRun& r) {
    const dequant_detail::KScales k = dequant_detail::k_scales_mins(packed);
    const __m256i wide = _mm256_cvtepu8_epi16(_mm_set_epi64x(std::int64_t(k.m), std::int64_t(k.sc)));  // 16-bit sc, then m
    const __m128i sc = _mm256_castsi256_si128(wide);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(r.multiplier),
                        _mm256_setr_m128i(_mm_unpacklo_epi16(sc, sc), _mm_unpackhi_epi16(sc, sc)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(r.min), _mm256_extracti128_si256(wide, 1));
  }
  __attribute__((target("avx2"))) static void lanes(const KRun& run, const std::int8_t* x, std::int32_t* lane) {
    __m256i sum = _mm256_setzero_si256();
    if (run.has_min) {  // unsigned integers
#pragma GCC unroll 8
      for (int b = 0; b < kKBlocks; ++b)
        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_maddubs_epi16(load32(run.q + 32 * b), load32(x + 32 * b)),
                                                      block_multipliers(run.multiplier, b)));
    } else {  // signed: |q| against x with q's sign
#pragma GCC unroll 8
      for (int b = 0; b < kKBlocks; ++b) {
        const __m256i q = load32(run.q + 32 * b);
        const __m256i products = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(load32(x + 32 * b), q));
        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(products, block_multipliers(run.multiplier, b)));
      }
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(lane), sum);
  }
  __attribute__((target("avx2"))) static void min_lanes(const KRun& run, const std::int16_t* sums, std::int32_t* lane) {
    const __m128i mins = _mm_loadu_si128(reinterpret_cast<const __m128i*>(run.min));
    const __m128i s = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sums));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(lane), _mm_madd_epi16(mins, s));
  }
  // Q4_K: 32 bytes of nibbles hold blocks 2c and 2c + 1 (q8_blocks_avx2.hpp), whose
  // multipliers are their 6-bit scales, the same for both groups of a block; Q5_K adds bit 2c or
  // 2c + 1 of qh as the fifth. Q6_K: a half holds four blocks, taken unsigned (0..63): their
  // products less 32 times the activations' are those of q - 32.
  __attribute__((target("avx2,f16c"))) static void encoded_lanes(const Encoded& w, std::int64_t s, const KRun& run,
                                                                 const std::int8_t* x, std::int32_t* lane) {
    __m256i sum = _mm256_setzero_si256();
    if constexpr (kType == GgmlType::Q4_K || kType == GgmlType::Q5_K) {
      constexpr bool q5 = kType == GgmlType::Q5_K;
      const std::uint8_t* b = dequant_detail::block_at(w, s, q5 ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K));
      prefetch_ahead<q5 ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K)>(b);
      const std::uint8_t* qs = b + (q5 ? offsetof(BlockQ5_K, qs) : offsetof(BlockQ4_K, qs));
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        __m256i lo, hi;
        q8_avx2::q4_k_blocks(qs, c, lo, hi);
        if constexpr (q5) q8_avx2::q5_k_fifth_bits(b + offsetof(BlockQ5_K, qh), c, lo, hi);
        sum = _mm256_add_epi32(
            sum, _mm256_add_epi32(
                     _mm256_madd_epi16(_mm256_maddubs_epi16(lo, load32(x + 64 * c)), _mm256_set1_epi16(run.multiplier[4 * c])),
                     _mm256_madd_epi16(_mm256_maddubs_epi16(hi, load32(x + 64 * c + 32)),
                                       _mm256_set1_epi16(run.multiplier[4 * c + 2]))));
      }
    } else {  // Q6_K
      const std::uint8_t* b = dequant_detail::block_at(w, s, sizeof(BlockQ6_K));
      prefetch_ahead<sizeof(BlockQ6_K)>(b);
      const __m256i offset = _mm256_set1_epi8(32);
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        __m256i q[4];
        q8_avx2::q6_k_blocks(b, h, q);
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
          const __m256i xb = load32(x + 128 * h + 32 * k);
          const __m256i products = _mm256_sub_epi16(_mm256_maddubs_epi16(q[k], xb), _mm256_maddubs_epi16(offset, xb));
          sum = _mm256_add_epi32(sum, _mm256_madd_epi16(products, block_multipliers(run.multiplier, 4 * h + k)));
        }
      }
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(lane), sum);
  }
};

// One activation row against a legacy block type (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0), everything in registers:
// per run of eight blocks, the blocks' integer sums from the encoded bytes (maddubs, the
// horizontal tree), their fp16 scales (and Q4_1's offsets) widened eight at once, and
// q8_block_term's floats eight lanes wide into the row's eight lanes: lane b % 8 takes block b,
// as matmul_q8_row's lanes do, in the same order, with the same operations (no FMA). A short
// last run leaves the lanes of its missing blocks untouched.
template <GgmlType kType>
__attribute__((target("avx2,f16c"))) float legacy_row_avx2(const MatmulQ8Args& a, std::int64_t r, std::int64_t t) {
  using Block = q8_avx2::LegacyBlock<kType>;
  const std::uint8_t* row = a.w.bytes + (r * a.cols / kQK) * std::int64_t(sizeof(Block));
  const std::int8_t* x = a.x.q + t * a.k;
  const float* dx = a.x.d + t * a.k / kQ8Block;
  const float* dsx = a.x.ds + t * a.k / kQ8Block;
  const std::int64_t blocks = a.k / kQ8Block;
  __m256 lanes = _mm256_setzero_ps();
  for (std::int64_t b0 = 0; b0 < blocks; b0 += kRunBlocks) {
    const int n = blocks - b0 < kRunBlocks ? int(blocks - b0) : kRunBlocks;
    const std::uint8_t* run = row + b0 * std::int64_t(sizeof(Block));
    prefetch_ahead<kRunBlocks * sizeof(Block)>(run);
    __m256i v[kRunBlocks];
#pragma GCC unroll 8
    for (int i = 0; i < kRunBlocks; ++i) {
      if (i >= n) {
        v[i] = _mm256_setzero_si256();
        continue;
      }
      const __m256i q = q8_avx2::legacy_ints<kType>(run + i * std::int64_t(sizeof(Block)));
      const __m256i xb = load32(x + (b0 + i) * kQ8Block);
      v[i] = kType == GgmlType::Q8_0 ? IntDotAvx2::dot32<IntForm::signed_ints>(q, xb, __m256i{})
                                     : IntDotAvx2::dot32<IntForm::unsigned_ints>(q, xb, __m256i{});
    }
    lanes = q8_avx2::legacy_run_added<kType>(lanes, run, n, IntDotAvx2::block_sums(v), dx + b0, dsx + b0);
  }
  alignas(32) float lane[kRunBlocks];
  _mm256_store_ps(lane, lanes);
  return q8_lanes_total(lane);
}

template <GgmlType kType>
__attribute__((target("avx2,f16c"), flatten)) void k_rows_avx2(const MatmulQ8Args& a, std::int64_t r0, std::int64_t r1,
                                                          std::int64_t t0, std::int64_t t1) {
  if (t1 - t0 == 1) {
    for (std::int64_t r = r0; r < r1; ++r) matmul_q8k_row<KDotAvx2<kType>, true>(a, r, t0, t1);
  } else {
    for (std::int64_t r = r0; r < r1; ++r) matmul_q8k_row<KDotAvx2<kType>>(a, r, t0, t1);
  }
}

template <GgmlType kType>
__attribute__((target("avx2,f16c"))) void legacy_rows_avx2(const MatmulQ8Args& a, std::int64_t r0, std::int64_t r1,
                                                         std::int64_t t0, std::int64_t) {
  for (std::int64_t r = r0; r < r1; ++r) a.y[t0 * a.ldy + r] = legacy_row_avx2<kType>(a, r, t0);
}

__attribute__((target("avx2,f16c"), flatten)) void rows_avx2(const MatmulQ8Args& a, std::int64_t r0, std::int64_t r1,
                                                        std::int64_t t0, std::int64_t t1) {
  for (std::int64_t r = r0; r < r1; ++r) matmul_q8_row<IntDotAvx2>(a, r, t0, t1);
}
#endif

void rows_loop(const MatmulQ8Args& a, std::int64_t r0, std::int64_t r1, std::int64_t t0, std::int64_t t1) {
  for (std::int64_t r = r0; r < r1; ++r) matmul_q8_row<IntDotLoop>(a, r, t0, t1);
}
void k_rows_loop(const MatmulQ8Args& a, std::int64_t r0, std::int64_t r1, std::int64_t t0, std::int64_t t1) {
  for (std::int64_t r = r0; r < r1; ++r) matmul_q8k_row<KDotLoop>(a, r, t0, t1);
}

constexpr std::int64_t kRowsPerTask = 16;

}  // namespace

void matmul_q8_host(const MatmulQ8Args& a) {
  if (matmul_q8_tiles(a) || matmul_q8_decode(a)) return;
#if TD_Q8_AVX2
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  using Rows = void (*)(const MatmulQ8Args&, std::int64_t, std::int64_t, std::int64_t, std::int64_t);
  Rows rows = rows_loop;
  if (a.x.block == kQ8KBlock)
    rows = !avx2                          ? k_rows_loop
           : a.w.type == GgmlType::Q4_K ? k_rows_avx2<GgmlType::Q4_K>
           : a.w.type == GgmlType::Q5_K ? k_rows_avx2<GgmlType::Q5_K>
                                        : k_rows_avx2<GgmlType::Q6_K>;
  else if (avx2 && a.n == 1 && q8_avx2::legacy_in_registers(a.w))
    rows = a.w.type == GgmlType::Q4_0   ? legacy_rows_avx2<GgmlType::Q4_0>
           : a.w.type == GgmlType::Q4_1 ? legacy_rows_avx2<GgmlType::Q4_1>
           : a.w.type == GgmlType::Q5_0 ? legacy_rows_avx2<GgmlType::Q5_0>
           : a.w.type == GgmlType::Q5_1 ? legacy_rows_avx2<GgmlType::Q5_1>
                                        : legacy_rows_avx2<GgmlType::Q8_0>;
  else if (avx2)
    rows = rows_avx2;
#else
  const auto rows = a.x.block == kQ8KBlock ? k_rows_loop : rows_loop;
#endif
  const std::int64_t tasks = (a.rows + kRowsPerTask - 1) / kRowsPerTask;
  // Tiles of activation rows outermost: a tile's activations stay in cache while every
  // weight row passes over them.
  for (std::int64_t t0 = 0; t0 < a.n; t0 += kQ8Tile) {
    const std::int64_t t1 = t0 + kQ8Tile < a.n ? t0 + kQ8Tile : a.n;
    host_for(tasks, kRowsPerTask * a.k * (t1 - t0), [&](std::int64_t task) {
      const std::int64_t r0 = task * kRowsPerTask;
      rows(a, r0, r0 + kRowsPerTask < a.rows ? r0 + kRowsPerTask : a.rows, t0, t1);
    });
  }
}

}  // namespace tapdiff::engine
