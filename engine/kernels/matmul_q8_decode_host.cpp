#include "engine/kernels/matmul_q8_decode.hpp"

#include <cstring>

#include "engine/kernels/host_loop.hpp"
#include "engine/kernels/matmul_q8_tiles.hpp"
#include "engine/kernels/matmul_q8k.hpp"
#include "engine/kernels/prefetch.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#define TD_Q8_DECODE 1
#include "engine/kernels/q8_blocks_avx2.hpp"
#include "engine/kernels/q8_vnni.hpp"
#endif

namespace tapdiff::engine {

#if TD_Q8_DECODE
namespace {

using q8_vnni::halves_added;

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

// Legacy blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0), a run of eight at a time: register p holds
// blocks 2p (low half) and 2p + 1 (high half) against the 64 activations at 64p. dpbusd adds
// the byte products four at a time into 32-bit lanes, unsigned integers (the nibble types',
// 0..31) against signed activations; Q8_0's go in as |q| (at most 128) against x with q's sign.
// A block's eight lanes added are its integer sum (exact), and the floats are legacy_run_added's.

// 16 bytes in both halves.
TD_VNNI_INLINE __m256i twice(const void* p) {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(static_cast<const __m128i*>(p)));
}

// Blocks a and b's 32 integers each, in element order (q8_blocks_avx2.hpp's legacy_ints).
template <GgmlType kType>
TD_VNNI_INLINE __m512i legacy_pair_ints(const std::uint8_t* a, const std::uint8_t* b) {
  using Block = q8_avx2::LegacyBlock<kType>;
  if constexpr (kType == GgmlType::Q8_0) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(q8_avx2::load32(a + offsetof(Block, qs))),
                              q8_avx2::load32(b + offsetof(Block, qs)), 1);
  } else {
    // Quarters: a's low nibbles (elements 0..15), a's high (16..31), then b's.
    const __m512i packed = _mm512_inserti64x4(_mm512_castsi256_si512(twice(a + offsetof(Block, qs))),
                                              twice(b + offsetof(Block, qs)), 1);
    const __m512i shifts = _mm512_broadcast_i64x4(_mm256_setr_m128i(_mm_setzero_si128(), _mm_set1_epi16(4)));
    const __m512i q = _mm512_and_si512(_mm512_srlv_epi16(packed, shifts), _mm512_set1_epi8(0x0F));
    if constexpr (kType == GgmlType::Q5_0 || kType == GgmlType::Q5_1) {
      std::uint32_t ha, hb;  // bit j: bit 4 of element j
      std::memcpy(&ha, a + offsetof(Block, qh), sizeof ha);
      std::memcpy(&hb, b + offsetof(Block, qh), sizeof hb);
      return _mm512_or_si512(q, _mm512_maskz_mov_epi8(__mmask64(ha) | __mmask64(hb) << 32, _mm512_set1_epi8(0x10)));
    }
    return q;
  }
}

template <GgmlType kType>
TD_VNNI_INLINE __m512i legacy_pair_lanes(__m512i q, __m512i x) {
  if constexpr (kType == GgmlType::Q8_0) {
    const __m512i x_signed = _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(q), _mm512_setzero_si512(), x);
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(q), x_signed);
  }
  return _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, x);
}

// Block i's sum of lanes, i = 0..7, from v[p] holding blocks 2p and 2p + 1 in its halves. After
// the unpacks 128-bit quarter j of `quarters` holds quarter j's sum of v[0], v[1], v[2], v[3]:
// quarters 0 and 1 are the even blocks', 2 and 3 the odd blocks'.
TD_VNNI_INLINE __m256i legacy_block_sums(const __m512i (&v)[4]) {
  const __m512i p01 = _mm512_add_epi32(_mm512_unpacklo_epi32(v[0], v[1]), _mm512_unpackhi_epi32(v[0], v[1]));
  const __m512i p23 = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2], v[3]), _mm512_unpackhi_epi32(v[2], v[3]));
  const __m512i quarters = _mm512_add_epi32(_mm512_unpacklo_epi64(p01, p23), _mm512_unpackhi_epi64(p01, p23));
  const __m256i low = _mm512_castsi512_si256(quarters), high = _mm512_extracti64x4_epi64(quarters, 1);
  const __m128i even = _mm_add_epi32(_mm256_castsi256_si128(low), _mm256_extracti128_si256(low, 1));
  const __m128i odd = _mm_add_epi32(_mm256_castsi256_si128(high), _mm256_extracti128_si256(high, 1));
  return _mm256_setr_m128i(_mm_unpacklo_epi32(even, odd), _mm_unpackhi_epi32(even, odd));
}

// Weight row r against the activation row. A short last run of n < 8 blocks reads only its
// blocks: a pair missing its second block takes the first twice against activations of 0.
template <GgmlType kType>
TD_VNNI float legacy_decode_row(const MatmulQ8Args& a, std::int64_t r) {
  constexpr std::int64_t kBytes = sizeof(q8_avx2::LegacyBlock<kType>);
  const std::uint8_t* row = a.w.bytes + (r * a.cols / kQK) * kBytes;
  const std::int64_t blocks = a.k / kQ8Block;
  __m256 lanes = _mm256_setzero_ps();
  for (std::int64_t b0 = 0; b0 < blocks; b0 += kRunBlocks) {
    const int n = blocks - b0 < kRunBlocks ? int(blocks - b0) : kRunBlocks;
    const std::uint8_t* run = row + b0 * kBytes;
    prefetch_ahead<kRunBlocks * kBytes>(run);
    const std::int8_t* x = a.x.q + b0 * kQ8Block;
    __m512i v[kRunBlocks / 2];
#pragma GCC unroll 4
    for (int p = 0; p < kRunBlocks / 2; ++p) {
      const std::uint8_t* first = run + 2 * p * kBytes;
      if (n == kRunBlocks) {
        v[p] = legacy_pair_lanes<kType>(legacy_pair_ints<kType>(first, first + kBytes), load64(x + 64 * p));
      } else if (2 * p < n) {
        const bool both = 2 * p + 1 < n;
        const __m512i xs = _mm512_maskz_loadu_epi8(both ? ~__mmask64(0) : __mmask64(0xFFFFFFFF), x + 64 * p);
        v[p] = legacy_pair_lanes<kType>(legacy_pair_ints<kType>(first, both ? first + kBytes : first), xs);
      } else {
        v[p] = _mm512_setzero_si512();
      }
    }
    const __m256i sums = legacy_block_sums(v);
    // A whole run's n as a constant: the masks of legacy_run_added fold away.
    lanes = n == kRunBlocks ? q8_avx2::legacy_run_added<kType>(lanes, run, kRunBlocks, sums, a.x.d + b0, a.x.ds + b0)
                            : q8_avx2::legacy_run_added<kType>(lanes, run, n, sums, a.x.d + b0, a.x.ds + b0);
  }
  alignas(32) float lane[kRunBlocks];
  _mm256_store_ps(lane, lanes);
  return q8_lanes_total(lane);
}

// K-quants: register p of a superblock holds blocks 2p (low half) and 2p + 1 (high half), 64 bytes
// against the 64 activations at 64p. maddubs adds the byte products in pairs (16 bits: the
// integers are unsigned, at most 63, |x| <= 127) and dpwssd adds those pairs, times their
// group's multiplier, into 32-bit lane L of its block: products 4L..4L+3, matmul_q8k.hpp's
// lane L. The two halves are added at the end of the superblock (exact).

// Q4_K and Q5_K: 32 bytes of nibbles at qs + 32c are blocks 2c (low) and 2c + 1 (high); Q5_K's
// fifth bit of block j is bit j of each byte of qh. Block j's two groups take its 6-bit scale.
template <GgmlType kType>
TD_VNNI_INLINE __m256i q4_k_lanes(const std::uint8_t* b, std::uint64_t sc, const std::int8_t* x) {
  constexpr bool q5 = kType == GgmlType::Q5_K;
  const std::uint8_t* qs = b + (q5 ? offsetof(BlockQ5_K, qs) : offsetof(BlockQ4_K, qs));
  const __m512i scales = _mm512_zextsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(std::int64_t(sc))));
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
      lanes = q4_k_lanes<kType>(b, k.sc, x);
      // Q4_K and Q5_K begin alike: d, dmin, the packed scales.
      const __m128 d_dmin = _mm_cvtph_ps(_mm_cvtsi32_si128(int(dd::u16(b + offsetof(BlockQ4_K, d)) |
                                                               std::uint32_t(dd::u16(b + offsetof(BlockQ4_K, dmin))) << 16)));
      d = _mm_cvtss_f32(d_dmin);
      const __m128i min_lanes = _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(std::int64_t(k.m))),
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

template <GgmlType kType>
void legacy_decode_rows(const MatmulQ8Args& a, std::int64_t r0, std::int64_t r1) {
  for (std::int64_t r = r0; r < r1; ++r) a.y[r] = legacy_decode_row<kType>(a, r);
}

using Rows = void (*)(const MatmulQ8Args&, std::int64_t, std::int64_t);

Rows decode_rows(const MatmulQ8Args& a) {
  if (a.x.block == kQ8KBlock)
    return a.w.type == GgmlType::Q4_K   ? k_decode_rows<GgmlType::Q4_K>
           : a.w.type == GgmlType::Q5_K ? k_decode_rows<GgmlType::Q5_K>
                                        : k_decode_rows<GgmlType::Q6_K>;
  if (!q8_avx2::legacy_in_registers(a.w)) return nullptr;
  switch (a.w.type) {
    case GgmlType::Q4_0: return legacy_decode_rows<GgmlType::Q4_0>;
    case GgmlType::Q4_1: return legacy_decode_rows<GgmlType::Q4_1>;
    case GgmlType::Q5_0: return legacy_decode_rows<GgmlType::Q5_0>;
    case GgmlType::Q5_1: return legacy_decode_rows<GgmlType::Q5_1>;
    default: return legacy_decode_rows<GgmlType::Q8_0>;
  }
}

constexpr std::int64_t kRowsPerTask = 16;

}  // namespace

bool matmul_q8_decode(const MatmulQ8Args& a) {
  if (a.n != 1 || !q8_tiles_supported()) return false;
  const Rows rows = decode_rows(a);
  if (rows == nullptr) return false;
  host_for_balanced((a.rows + kRowsPerTask - 1) / kRowsPerTask, kRowsPerTask * a.k, [&](std::int64_t task) {
    const std::int64_t r0 = task * kRowsPerTask;
    rows(a, r0, r0 + kRowsPerTask < a.rows ? r0 + kRowsPerTask : a.rows);
  });
  return true;
}

#else

bool matmul_q8_decode(const MatmulQ8Args&) { return false; }

#endif

}  // namespace tapdiff::engine
