#include "engine/kernels/matmul_q8k_decode.hpp"

#include "engine/kernels/host_loop.hpp"
#include "engine/kernels/matmul_q8_tiles.hpp"
#include "engine/kernels/matmul_q8k.hpp"
#include "engine/kernels/prefetch.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#define TD_Q8K_DECODE 1
#include "engine/kernels/q8_vnni.hpp"
#endif

namespace tapdiff::engine {

#if TD_Q8K_DECODE
namespace {

using q8_vnni::halves_added;

// Register p of a superblock holds blocks 2p (low half) and 2p + 1 (high half), 64 bytes
// against the 64 activations at 64p. maddubs adds the byte products in pairs (16 bits: the
// integers are unsigned, at most 63, |x| <= 127) and dpwssd adds those pairs, times their
// group's multiplier, into 32-bit lane L of its block: products 4L..4L+3, matmul_q8k.hpp's
// lane L. The two halves are added at the end of the superblock (exact).

TD_VNNI_INLINE __m512i load64(const void* p) { return _mm512_loadu_si512(p); }
// 32 bytes in both halves.
TD_VNNI_INLINE __m512i both_halves(const void* p) {
  return _mm512_broadcast_i64x4(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
}
// Each 16-bit word shifted right by lo in the low half, by hi in the high half.
TD_VNNI_INLINE __m512i shift_halves(__m512i v, int lo, int hi) {
  return _mm512_srlv_epi16(v, _mm512_inserti64x4(_mm512_set1_epi16(short(lo)), _mm256_set1_epi16(short(hi)), 1));
}
// Word i of the result: word base + (i >> shift) of v.
TD_VNNI_INLINE __m512i spread_words(__m512i v, int base, int shift) {
  const __m512i iota = _mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13, 12,
                                        11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  return _mm512_permutexvar_epi16(_mm512_add_epi16(_mm512_srli_epi16(iota, unsigned(shift)), _mm512_set1_epi16(short(base))), v);
}

// Q4_K and Q5_K: 32 bytes of nibbles at qs + 32c are blocks 2c (low) and 2c + 1 (high); Q5_K's
// fifth bit of block j is bit j of each byte of qh. Block j's two groups take its 6-bit scale.
template <GgmlType kType>
TD_VNNI_INLINE __m256i q4_k_lanes(const std::uint8_t* b, const dequant_detail::KScales& k, const std::int8_t* x) {
  constexpr bool q5 = kType == GgmlType::Q5_K;
  const std::uint8_t* qs = b + (q5 ? offsetof(BlockQ5_K, qs) : offsetof(BlockQ4_K, qs));
  const __m512i scales = _mm512_zextsi128_si512(_mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(k.sc))));
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i qh = q5 ? both_halves(b + offsetof(BlockQ5_K, qh)) : __m512i{};
  __m512i lanes = _mm512_setzero_si512();
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    __m512i q = _mm512_and_si512(shift_halves(both_halves(qs + 32 * c), 0, 4), low4);
    if constexpr (q5) {
      const __m512i bit = _mm512_and_si512(shift_halves(qh, 2 * c, 2 * c + 1), _mm512_set1_epi8(0x01));
      q = _mm512_or_si512(q, _mm512_slli_epi16(bit, 4));
    }
    const __m512i multipliers = spread_words(scales, 2 * c, 4);  // blocks 2c and 2c + 1: 16 words each
    lanes = _mm512_dpwssd_epi32(lanes, _mm512_maddubs_epi16(q, load64(x + 64 * c)), multipliers);
  }
  return halves_added(lanes);
}

// Q6_K: half h's 64 bytes of ql hold blocks 4h, 4h + 1 in their low nibbles and 4h + 2, 4h + 3
// in their high ones; bits 4 and 5 are two bits of qh's 32 bytes at 32h (dequant.hpp's
// q6_k_quarter_ints). The integers go in as q + 32 (unsigned), their pairs less 32 times the
// activations': those of q, within 16 bits. Group g's multiplier is the signed byte scales[g].
TD_VNNI_INLINE __m256i q6_k_lanes(const std::uint8_t* b, const std::int8_t* x) {
  const __m512i groups = _mm512_zextsi256_si512(
      _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + offsetof(BlockQ6_K, scales)))));
  const __m512i low4 = _mm512_set1_epi8(0x0F), two_bits = _mm512_set1_epi8(0x03), offset = _mm512_set1_epi8(32);
  __m512i lanes = _mm512_setzero_si512();
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m512i low = load64(b + offsetof(BlockQ6_K, ql) + 64 * h);
    const __m512i high = both_halves(b + offsetof(BlockQ6_K, qh) + 32 * h);
#pragma GCC unroll 2
    for (int n = 0; n < 2; ++n) {  // nibble n: blocks 4h + 2n, 4h + 2n + 1
      const __m512i nibbles = _mm512_and_si512(n ? _mm512_srli_epi16(low, 4) : low, low4);
      const __m512i top = _mm512_slli_epi16(_mm512_and_si512(shift_halves(high, 4 * n, 4 * n + 2), two_bits), 4);
      const __m512i xs = load64(x + 128 * h + 64 * n);
      const __m512i pairs = _mm512_sub_epi16(_mm512_maddubs_epi16(_mm512_or_si512(nibbles, top), xs),
                                             _mm512_maddubs_epi16(offset, xs));
      lanes = _mm512_dpwssd_epi32(lanes, pairs, spread_words(groups, 8 * h + 4 * n, 3));
    }
  }
  return halves_added(lanes);
}

// Weight row r against the activation row: k_accumulate's floats, eight lanes and four min
// lanes in registers, k_total at the end.
template <GgmlType kType>
TD_VNNI float k_decode_row(const MatmulQ8Args& a, std::int64_t r) {
  namespace dd = dequant_detail;
  constexpr bool kMins = kType != GgmlType::Q6_K;
  constexpr std::int64_t kBytes =
      kType == GgmlType::Q4_K ? sizeof(BlockQ4_K) : kType == GgmlType::Q5_K ? sizeof(BlockQ5_K) : sizeof(BlockQ6_K);
  const std::int64_t supers = a.k / kQK_K;
  const std::uint8_t* row = dd::block_at(a.w, r * (a.cols / kQK_K), kBytes);
  __m256 acc = _mm256_setzero_ps();
  __m128 acc_min = _mm_setzero_ps();
  for (std::int64_t s = 0; s < supers; ++s) {
    const std::uint8_t* b = row + s * kBytes;
    prefetch_ahead<kBytes>(b);
    const std::int8_t* x = a.x.q + s * kQK_K;
    const float dx = a.x.d[s];
    __m256i lanes;
    float d;
    if constexpr (kMins) {
      const dd::KScales k = dd::k_scales_mins(b + offsetof(BlockQ4_K, scales));
      lanes = q4_k_lanes<kType>(b, k, x);
      // Q4_K and Q5_K begin alike: d, dmin, the packed scales.
      const __m128 d_dmin = _mm_cvtph_ps(_mm_cvtsi32_si128(int(dd::u16(b + offsetof(BlockQ4_K, d)) |
                                                               std::uint32_t(dd::u16(b + offsetof(BlockQ4_K, dmin))) << 16)));
      d = _mm_cvtss_f32(d_dmin);
      const __m128i min_lanes = _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(k.m))),
                                               _mm_loadu_si128(reinterpret_cast<const __m128i*>(a.x.sums + s * kKBlocks)));
      const float dmin = -(dx * _mm_cvtss_f32(_mm_movehdup_ps(d_dmin)));
      acc_min = _mm_add_ps(acc_min, _mm_mul_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(min_lanes)));
    } else {
      lanes = q6_k_lanes(b, x);
      d = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(dd::u16(b + offsetof(BlockQ6_K, d)))));
    }
    acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(dx * d), _mm256_cvtepi32_ps(lanes)));
  }
  alignas(32) float l[kKLanes], m[kKMinLanes];
  _mm256_store_ps(l, acc);
  _mm_store_ps(m, acc_min);
  return k_total(l, m);
}

template <GgmlType kType>
void k_decode_rows(const MatmulQ8Args& a, std::int64_t r0, std::int64_t r1) {
  for (std::int64_t r = r0; r < r1; ++r) a.y[r] = k_decode_row<kType>(a, r);
}

constexpr std::int64_t kRowsPerTask = 16;

}  // namespace

bool matmul_q8k_decode(const MatmulQ8Args& a) {
  if (a.n != 1 || a.x.block != kQ8KBlock || !q8_tiles_supported()) return false;
  const auto rows = a.w.type == GgmlType::Q4_K   ? k_decode_rows<GgmlType::Q4_K>
                    : a.w.type == GgmlType::Q5_K ? k_decode_rows<GgmlType::Q5_K>
                                                 : k_decode_rows<GgmlType::Q6_K>;
  host_for((a.rows + kRowsPerTask - 1) / kRowsPerTask, kRowsPerTask * a.k, [&](std::int64_t task) {
    const std::int64_t r0 = task * kRowsPerTask;
    rows(a, r0, r0 + kRowsPerTask < a.rows ? r0 + kRowsPerTask : a.rows);
  });
  return true;
}

#else

bool matmul_q8k_decode(const MatmulQ8Args&) { return false; }

#endif

}  // namespace tapdiff::engine
