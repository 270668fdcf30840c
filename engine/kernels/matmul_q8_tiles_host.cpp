#include "engine/kernels/matmul_q8_tiles.hpp"

#include <algorithm>
#include <vector>

#include "engine/kernels/host_loop.hpp"
#include "engine/kernels/matmul_q8k.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#define TD_Q8_TILES 1
#include "engine/kernels/q8_blocks_avx2.hpp"
#include "engine/kernels/q8_vnni.hpp"
#endif

namespace tapdiff::engine {

#if TD_Q8_TILES
namespace {

#define TD_VNNI_MEMBER TD_VNNI __attribute__((always_inline)) inline

constexpr int kTileRows = 4;  // weight rows multiplied at once
constexpr int kTileActs = 4;  // activation rows multiplied at once
constexpr int kActTile = 64;  // activation rows whose lanes a group of weight rows keeps
static_assert(kActTile % kTileActs == 0 && kRunBlocks == 8, "eight blocks: eight 32-bit lanes");

using q8_avx2::load32;

// The integer part of a legacy tile (blocks of 32): each weight row in turn against the
// kTileActs activation rows at once (their accumulators stay in registers; sixteen, for the
// whole tile, did not), 64 bytes an instruction: step(r, p, c, acc) adds bytes 64p..64p+63 of
// row r against activation row c. The low and high halves of an accumulator hold the lanes of
// alternate 32-byte steps and are added at the end (exact).
template <typename Step>
TD_VNNI_INLINE void tile_ints(const Step& step, __m256i (&out)[kTileActs][kTileRows]) {
#pragma GCC unroll 1
  for (int r = 0; r < kTileRows; ++r) {
    __m512i acc[kTileActs];
#pragma GCC unroll 4
    for (int c = 0; c < kTileActs; ++c) acc[c] = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p)
#pragma GCC unroll 4
      for (int c = 0; c < kTileActs; ++c) acc[c] = step(r, p, c, acc[c]);
#pragma GCC unroll 4
    for (int c = 0; c < kTileActs; ++c)
      out[c][r] = q8_vnni::halves_added(acc[c]);
  }
}

// --- Blocks of 32 (matmul_q8.hpp) ---------------------------------------------------------
//
// A run of eight blocks interleaved: step s (32 bytes) holds bytes 4s..4s+3 of every block,
// block b at 4b. One byte dot product of a step adds four products of each block into the
// block's 32-bit lane, so eight steps leave each lane its block's whole sum: the eight sums
// matmul_q8_row's float terms take, with no horizontal additions. The unsigned operand of the
// products is the weights' integers where they are unsigned (0..31), else the activations
// plus 128 (bit 7 flipped), less 128 times each weight block's sum afterwards.

// 8 x 8 words transposed: v[s] word b = the old v[b] word s.
TD_VNNI_INLINE void transpose_words(__m256i (&v)[8]) {
  __m256i t[8], u[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_epi32(v[i], v[i + 1]);
    t[i + 1] = _mm256_unpackhi_epi32(v[i], v[i + 1]);
  }
#pragma GCC unroll 8
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
#pragma GCC unroll 8
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x20);
    v[i + 4] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x31);
  }
}

// The first `blocks` blocks of 32 at q, interleaved into steps (missing blocks are 0).
TD_VNNI_INLINE void interleave(const std::int8_t* q, int blocks, __m256i (&v)[8]) {
#pragma GCC unroll 8
  for (int b = 0; b < 8; ++b) v[b] = b < blocks ? load32(q + 32 * b) : _mm256_setzero_si256();
  transpose_words(v);
}

// One weight row's run as the tiles take it.
struct TiledRun {
  __m256i step[8];
  __m256i bias;  // signed integers: 128 times each block's sum of q, which the products add
  __m256 scale, offset;
};

// A run's interleaved steps, and for signed integers the bias their products will carry.
TD_VNNI_INLINE void set_steps(const __m256i (&v)[8], bool signed_ints, TiledRun& w) {
  __m256i bias = _mm256_setzero_si256();
#pragma GCC unroll 8
  for (int s = 0; s < 8; ++s) {
    w.step[s] = v[s];
    if (signed_ints) bias = _mm256_dpbusd_epi32(bias, _mm256_set1_epi8(char(0x80)), v[s]);
  }
  w.bias = bias;
}

TD_VNNI void tile_weights(const IntRun& run, int blocks, TiledRun& w) {
  __m256i v[8];
  interleave(run.q, blocks, v);
  set_steps(v, run.form == IntForm::signed_ints, w);
  w.scale = _mm256_loadu_ps(run.scale);
  w.offset = _mm256_loadu_ps(run.offset);
}

// The same from the encoded bytes of a legacy block type with no decoder quirk
// (q8_blocks_avx2.hpp: unpack_run's integers, scales and offsets). Blocks past `blocks` are not
// read.
template <GgmlType kType>
TD_VNNI void tile_encoded_weights(const MatmulQ8Args& a, std::int64_t row, std::int64_t first, int blocks,
                                  __m256i present, TiledRun& w) {
  constexpr std::int64_t kBytes = sizeof(q8_avx2::LegacyBlock<kType>);
  const std::uint8_t* run = a.w.bytes + ((row * a.cols + first) / kQK) * kBytes;
  __m256i v[8];
#pragma GCC unroll 8
  for (int b = 0; b < 8; ++b) v[b] = b < blocks ? q8_avx2::legacy_ints<kType>(run + b * kBytes) : _mm256_setzero_si256();
  transpose_words(v);
  set_steps(v, kType == GgmlType::Q8_0, w);
  q8_avx2::legacy_scales<kType>(q8_avx2::legacy_heads_gathered<kType>(run, present), w.scale, w.offset);
}

// Activation row t's runs, interleaved, bit 7 flipped for signed weights.
TD_VNNI void tile_activations(const MatmulQ8Args& a, std::int64_t t, bool flip, std::uint8_t* out) {
  const __m256i top = flip ? _mm256_set1_epi8(char(0x80)) : _mm256_setzero_si256();
  for (std::int64_t first = 0; first < a.k; first += kDecodeRun, out += kDecodeRun) {
    __m256i v[8];
    interleave(a.x.q + t * a.k + first, run_length(a.k - first) / kQ8Block, v);
#pragma GCC unroll 8
    for (int s = 0; s < 8; ++s) _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 32 * s), _mm256_xor_si256(v[s], top));
  }
}

// A run's byte products: steps 2p and 2p + 1 of the interleaved run (vpdpbusd, the unsigned
// operand first). tile_sums then takes Q8_0's bias off.
template <bool kSigned>
struct RunStep {
  const TiledRun (&w)[kTileRows];
  const std::uint8_t* const (&x)[kTileActs];
  TD_VNNI_MEMBER __m512i operator()(int r, int p, int c, __m512i acc) const {
    const __m512i ws = _mm512_loadu_si512(&w[r].step[2 * p]), xs = _mm512_loadu_si512(x[c] + 64 * p);
    return kSigned ? _mm512_dpbusd_epi32(acc, xs, ws) : _mm512_dpbusd_epi32(acc, ws, xs);
  }
};

template <bool kSigned>
TD_VNNI_INLINE void tile_sums(const TiledRun (&w)[kTileRows], const std::uint8_t* const (&x)[kTileActs],
                              __m256i (&sums)[kTileActs][kTileRows]) {
  tile_ints(RunStep<kSigned>{w, x}, sums);
  if (kSigned)
#pragma GCC unroll 4
    for (int c = 0; c < kTileActs; ++c)
#pragma GCC unroll 4
      for (int r = 0; r < kTileRows; ++r) sums[c][r] = _mm256_sub_epi32(sums[c][r], w[r].bias);
}

// Two rows' halves side by side in one vector.
TD_VNNI_INLINE __m512 pair(__m256 lo, __m256 hi) {
  return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_zextps256_ps512(lo)), _mm256_castps_pd(hi), 1));
}

TD_VNNI_INLINE __m256 high_half(__m512 v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }

// q8_block_term eight blocks at once into the lanes of two rows (rows 2h and 2h + 1 in one
// vector), the blocks outside `present` (a short last run) left as they are.
TD_VNNI_INLINE void add_terms(__m512& lanes, __m256i sums0, __m256i sums1, __m512 scale, __m512 offset, __m512 dx,
                              __m512 dsx, __mmask16 present) {
  const __m512 ints = _mm512_cvtepi32_ps(_mm512_inserti64x4(_mm512_zextsi256_si512(sums0), sums1, 1));
  const __m512 term = _mm512_add_ps(_mm512_mul_ps(dx, _mm512_mul_ps(scale, ints)), _mm512_mul_ps(offset, dsx));
  lanes = _mm512_mask_add_ps(lanes, present, lanes, term);
}

// q8_lanes_total of four rows' lanes: halves first, then pairs, the first operand of each
// addition the same as there.
TD_VNNI_INLINE __m128 halves(__m256 l) { return _mm_add_ps(_mm256_castps256_ps128(l), _mm256_extractf128_ps(l, 1)); }
TD_VNNI_INLINE __m128 rows_totals(__m256 l0, __m256 l1, __m256 l2, __m256 l3) {
  const __m128 h0 = halves(l0), h1 = halves(l1), h2 = halves(l2), h3 = halves(l3);
  // (h0[0], h0[1], h1[0], h1[1]) + (h0[2], h0[3], h1[2], h1[3]): each row's two pair sums.
  const __m128 p01 = _mm_add_ps(_mm_shuffle_ps(h0, h1, 0x44), _mm_shuffle_ps(h0, h1, 0xEE));
  const __m128 p23 = _mm_add_ps(_mm_shuffle_ps(h2, h3, 0x44), _mm_shuffle_ps(h2, h3, 0xEE));
  return _mm_add_ps(_mm_shuffle_ps(p01, p23, 0x88), _mm_shuffle_ps(p01, p23, 0xDD));
}

// Activation rows [t0, t1) against weight rows [r0, r0 + kTileRows) (those past the last
// computed again as the last, and not stored). kType: a type tile_encoded_weights reads, or
// F32 for unpack_run's integers.
template <GgmlType kType, bool kSigned>
TD_VNNI void legacy_tile(const MatmulQ8Args& a, const std::uint8_t* xi, std::int64_t r0, std::int64_t t0,
                         std::int64_t t1) {
  const std::int64_t runs = (a.k + kDecodeRun - 1) / kDecodeRun;
  __m512 lanes[kActTile][2];  // rows (0, 1) and (2, 3)
  for (std::int64_t t = 0; t < t1 - t0; ++t) lanes[t][0] = lanes[t][1] = _mm512_setzero_ps();
  [[maybe_unused]] IntRun run;
  TiledRun w[kTileRows];
  for (std::int64_t u = 0; u < runs; ++u) {
    const std::int64_t first = u * kDecodeRun;
    const int len = run_length(a.k - first), blocks = len / kQ8Block;
    const __m256i present = _mm256_cmpgt_epi32(_mm256_set1_epi32(blocks), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __mmask16 present16 = __mmask16(((1u << blocks) - 1) * 0x101u);
    for (int r = 0; r < kTileRows; ++r) {
      const std::int64_t row = std::min(r0 + r, a.rows - 1);
      if constexpr (kType == GgmlType::F32) {
        unpack_run<IntDotLoop>(a.w, row * a.cols + first, len, run);
        tile_weights(run, blocks, w[r]);
      } else {
        tile_encoded_weights<kType>(a, row, first, blocks, present, w[r]);
      }
    }
    const __m512 scale[2] = {pair(w[0].scale, w[1].scale), pair(w[2].scale, w[3].scale)};
    const __m512 offset[2] = {pair(w[0].offset, w[1].offset), pair(w[2].offset, w[3].offset)};
    for (std::int64_t tc = t0; tc < t1; tc += kTileActs) {
      const std::uint8_t* x[kTileActs];
      for (int c = 0; c < kTileActs; ++c) x[c] = xi + (std::min(tc + c, t1 - 1) * runs + u) * kDecodeRun;
      __m256i sums[kTileActs][kTileRows];
      tile_sums<kSigned>(w, x, sums);
#pragma GCC unroll 4
      for (int c = 0; c < kTileActs; ++c) {
        const std::int64_t at = (std::min(tc + c, t1 - 1) * a.k + first) / kQ8Block;
        const __m256 dx8 = _mm256_maskload_ps(a.x.d + at, present), dsx8 = _mm256_maskload_ps(a.x.ds + at, present);
        const __m512 dx = pair(dx8, dx8), dsx = pair(dsx8, dsx8);
        __m512* lane = lanes[tc - t0 + c];
        add_terms(lane[0], sums[c][0], sums[c][1], scale[0], offset[0], dx, dsx, present16);
        add_terms(lane[1], sums[c][2], sums[c][3], scale[1], offset[1], dx, dsx, present16);
      }
    }
  }
  const int rows = int(std::min<std::int64_t>(kTileRows, a.rows - r0));
  const __m128i stored = _mm_cmpgt_epi32(_mm_set1_epi32(rows), _mm_setr_epi32(0, 1, 2, 3));
  for (std::int64_t t = t0; t < t1; ++t) {
    const __m512* l = lanes[t - t0];
    const __m128 y = rows_totals(_mm512_castps512_ps256(l[0]), high_half(l[0]),
                                 _mm512_castps512_ps256(l[1]), high_half(l[1]));
    _mm_maskstore_ps(a.y + t * a.ldy + r0, stored, y);
  }
}

bool legacy_tiles_apply(const MatmulQ8Args& a) {
  switch (a.w.type) {
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::Q8_0:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
      return true;
    default:
      return false;  // Q6_K's integers have a multiplier per 16: matmul_q8_row's lanes take it
  }
}

using LegacyTile = void (*)(const MatmulQ8Args&, const std::uint8_t*, std::int64_t, std::int64_t, std::int64_t);
LegacyTile tile_for(const MatmulQ8Args& a) {
  const DequantQuirks q = a.w.quirks;
  const bool quirk = q.q8_scale_as_bf16 || q.q8_block_stride_quants || q.q8_quant_unsigned;
  switch (quirk ? GgmlType::F32 : a.w.type) {
    case GgmlType::Q4_0:
      return legacy_tile<GgmlType::Q4_0, false>;
    case GgmlType::Q4_1:
      return legacy_tile<GgmlType::Q4_1, false>;
    case GgmlType::Q5_0:
      return legacy_tile<GgmlType::Q5_0, false>;
    case GgmlType::Q5_1:
      return legacy_tile<GgmlType::Q5_1, false>;
    case GgmlType::Q8_0:
      return legacy_tile<GgmlType::Q8_0, true>;
    default:
      return a.w.type == GgmlType::Q8_0 ? legacy_tile<GgmlType::F32, true> : legacy_tile<GgmlType::F32, false>;
  }
}

void legacy_tiles(const MatmulQ8Args& a) {
  const bool signed_ints = a.w.type == GgmlType::Q8_0;
  const std::int64_t runs = (a.k + kDecodeRun - 1) / kDecodeRun;
  std::vector<std::uint8_t> xi(std::size_t(a.n * runs * kDecodeRun));
  host_for(a.n, a.k, [&](std::int64_t t) { tile_activations(a, t, signed_ints, xi.data() + t * runs * kDecodeRun); });
  const std::int64_t groups = (a.rows + kTileRows - 1) / kTileRows;
  const LegacyTile tile = tile_for(a);
  for (std::int64_t t0 = 0; t0 < a.n; t0 += kActTile) {
    const std::int64_t t1 = std::min(a.n, t0 + kActTile);
    host_for_balanced(groups, kTileRows * a.k * (t1 - t0), [&](std::int64_t g) { tile(a, xi.data(), g * kTileRows, t0, t1); });
  }
}

// --- Superblocks of 256 (matmul_q8k.hpp) ----------------------------------------------------
//
// A superblock's integer lanes are already 32-bit lanes of its blocks' byte products: lane L
// of block b holds products 4L..4L+3, times the multiplier of L's group. Per block, maddubs
// adds the products in pairs (16 bits: |q| <= 63, |x| <= 127) and dpwssd adds those pairs,
// times the group multipliers, into the lanes: matmul_q8k_row's lanes exactly. A register holds
// block b of two weight rows, one a half, against the activations' block b in both halves, so
// that its lanes are the two rows' lanes side by side as the float terms take them, with no
// halves to add. The rows are tiled once for all the passes (the tiles before, two blocks of one
// row a register and tiled at every pass, multiplied Q4_K, Q5_K, Q6_K at 135, 124, 120 billion
// weights a second by 32 activation rows, against 150, 148, 131: `bench_matmul --batch 32`).

// One row's superblock before pairing: its unsigned integers by block (Q6_K's q + 32), its 16
// group multipliers, its 8 mins (Q4_K, Q5_K) and the fp16 bits of d and dmin. Integers from
// the bytes (q8_blocks_avx2.hpp), scales through dequant.hpp's extractors.
struct RowSuper {
  __m256i q[kKBlocks];
  __m256i groups;
  __m128i min;
  std::uint16_t d, dmin;
};

// Superblock s of e (counted from the tensor's start).
template <GgmlType kType>
TD_VNNI_INLINE void row_super(const Encoded& e, std::int64_t s, RowSuper& w) {
  namespace dd = dequant_detail;
  if constexpr (kType == GgmlType::Q4_K || kType == GgmlType::Q5_K) {
    // Q5_K begins as Q4_K does (d, dmin, the packed scales) and adds a fifth bit from qh.
    constexpr bool q5 = kType == GgmlType::Q5_K;
    const std::uint8_t* b = dd::block_at(e, s, q5 ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K));
    const std::uint8_t* qs = b + (q5 ? offsetof(BlockQ5_K, qs) : offsetof(BlockQ4_K, qs));
    const dd::KScales k = dd::k_scales_mins(b + offsetof(BlockQ4_K, scales));
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      q8_avx2::q4_k_blocks(qs, c, w.q[2 * c], w.q[2 * c + 1]);
      if constexpr (q5) q8_avx2::q5_k_fifth_bits(b + offsetof(BlockQ5_K, qh), c, w.q[2 * c], w.q[2 * c + 1]);
    }
    const __m128i sc = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(std::int64_t(k.sc)));
    w.groups = _mm256_setr_m128i(_mm_unpacklo_epi16(sc, sc), _mm_unpackhi_epi16(sc, sc));
    w.min = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(std::int64_t(k.m)));
    w.d = dd::u16(b + offsetof(BlockQ4_K, d));
    w.dmin = dd::u16(b + offsetof(BlockQ4_K, dmin));
  } else if constexpr (kType == GgmlType::Q6_K) {
    const std::uint8_t* b = dd::block_at(e, s, sizeof(BlockQ6_K));
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) q8_avx2::q6_k_blocks(b, h, &w.q[4 * h]);
    w.groups = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + offsetof(BlockQ6_K, scales))));
    w.min = _mm_setzero_si128();
    w.d = dd::u16(b + offsetof(BlockQ6_K, d));
    w.dmin = 0;
  }
}

// The four rows' scales for one superblock, laid out as the float terms take them: d of
// rows 0, 1 (and 2, 3) eight times each, dmin of each row four times, the rows' mins.
struct SuperScales {
  __m512 d[2], dmin;
  __m512i min;
};

// Four weight rows' superblock as the passes take it: block b of rows 2h and 2h + 1 side by
// side in one register, integers and group multipliers.
struct TiledRows {
  __m512i q[2][kKBlocks];
  __m512i mult[2][kKBlocks];
  SuperScales scales;
};

TD_VNNI_INLINE __m512i side_by_side(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

template <GgmlType kType>
TD_VNNI void tile_rows(const MatmulQ8Args& a, std::int64_t r0, std::int64_t s, TiledRows& t) {
  RowSuper w[kTileRows];
  const std::int64_t row_first = a.cols / kQK_K;
#pragma GCC unroll 4
  for (int r = 0; r < kTileRows; ++r) row_super<kType>(a.w, std::min(r0 + r, a.rows - 1) * row_first + s, w[r]);
  // d of the four rows, then dmin, widened at once.
  const __m256 f = _mm256_cvtph_ps(_mm_setr_epi16(short(w[0].d), short(w[1].d), short(w[2].d), short(w[3].d),
                                                  short(w[0].dmin), short(w[1].dmin), short(w[2].dmin), short(w[3].dmin)));
  const __m512 wide = _mm512_castps256_ps512(f);
  const __m512i row8 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  t.scales.d[0] = _mm512_permutexvar_ps(row8, wide);
  t.scales.d[1] = _mm512_permutexvar_ps(_mm512_add_epi32(row8, _mm512_set1_epi32(2)), wide);
  t.scales.dmin = _mm512_permutexvar_ps(_mm512_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7), wide);
  t.scales.min = _mm512_inserti32x4(_mm512_inserti32x4(_mm512_inserti32x4(_mm512_castsi128_si512(w[0].min), w[1].min, 1),
                                                       w[2].min, 2),
                                    w[3].min, 3);
  // Block b's multipliers of a pair: words 0..7 group 2b of the first row, 8..15 group 2b + 1,
  // then the second row's (its groups are words 16..31 of `groups`).
  const __m512i group_of_word = _mm512_setr_epi32(0, 0, 0, 0, 0x00010001, 0x00010001, 0x00010001, 0x00010001,
                                                  0x00100010, 0x00100010, 0x00100010, 0x00100010,
                                                  0x00110011, 0x00110011, 0x00110011, 0x00110011);
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m512i groups = side_by_side(w[2 * h].groups, w[2 * h + 1].groups);
#pragma GCC unroll 8
    for (int b = 0; b < kKBlocks; ++b) {
      t.q[h][b] = side_by_side(w[2 * h].q[b], w[2 * h + 1].q[b]);
      t.mult[h][b] = _mm512_permutexvar_epi16(_mm512_add_epi16(group_of_word, _mm512_set1_epi16(short(2 * b))), groups);
    }
  }
}

// k_accumulate's floats for one activation row's superblock, the four rows at once: the
// lanes times dx d (two rows a vector), the min lanes times -(dx dmin) (four rows a vector),
// each added to its accumulator.
template <bool kMins>
TD_VNNI_INLINE void add_super_terms(__m512 (&acc)[2], __m512& acc_min, const __m512i (&lanes)[2],
                                    const SuperScales& w, float dx, const std::int16_t* sums) {
  const __m512 dx16 = _mm512_set1_ps(dx);
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h)
    acc[h] = _mm512_add_ps(acc[h], _mm512_mul_ps(_mm512_mul_ps(dx16, w.d[h]), _mm512_cvtepi32_ps(lanes[h])));
  if (kMins) {
    const __m512i min_lanes =
        _mm512_madd_epi16(w.min, _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sums))));
    const __m512 dmin = _mm512_castsi512_ps(
        _mm512_xor_si512(_mm512_castps_si512(_mm512_mul_ps(dx16, w.dmin)), _mm512_set1_epi32(std::int32_t(0x80000000u))));
    acc_min = _mm512_add_ps(acc_min, _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(min_lanes)));
  }
}

// Activation rows [t0, t1) against weight rows [r0, r0 + kTileRows): the rows' superblocks
// tiled once, then kTileActs activation rows at a time over all of them, their float lanes in
// registers. Q6_K's integers go in as q + 32 (unsigned), their pairs less 32 times the
// activations' (those of q, within 16 bits).
template <GgmlType kType>
TD_VNNI void k_tile(const MatmulQ8Args& a, std::int64_t r0, std::int64_t t0, std::int64_t t1) {
  constexpr bool kOffset32 = kType == GgmlType::Q6_K, kMins = !kOffset32;
  const std::int64_t supers = a.k / kQK_K;
  // Kept from call to call (a thread's tiles of a row group are about 100 KB for k = 11008),
  // aligned by hand: a std::vector<TiledRows> built here handed out 16-byte aligned storage.
  thread_local std::vector<unsigned char> storage;
  const std::size_t bytes = std::size_t(supers + 1) * sizeof(TiledRows);
  if (storage.size() < bytes) storage.resize(bytes);
  auto* tiled = reinterpret_cast<TiledRows*>((reinterpret_cast<std::uintptr_t>(storage.data()) + 63) & ~std::uintptr_t(63));
  for (std::int64_t s = 0; s < supers; ++s) tile_rows<kType>(a, r0, s, tiled[s]);
  for (std::int64_t tc = t0; tc < t1; tc += kTileActs) {
    std::int64_t row[kTileActs];
#pragma GCC unroll 4
    for (int c = 0; c < kTileActs; ++c) row[c] = std::min(tc + c, t1 - 1);
    __m512 acc[kTileActs][2], acc_min[kTileActs];  // rows (0, 1) and (2, 3); the four rows' min lanes
#pragma GCC unroll 4
    for (int c = 0; c < kTileActs; ++c) acc[c][0] = acc[c][1] = acc_min[c] = _mm512_setzero_ps();
    for (std::int64_t s = 0; s < supers; ++s) {
      const TiledRows& w = tiled[s];
      const std::int8_t* x[kTileActs];
#pragma GCC unroll 4
      for (int c = 0; c < kTileActs; ++c) x[c] = a.x.q + row[c] * a.k + s * kQK_K;
      __m512i lanes[kTileActs][2];
#pragma GCC unroll 4
      for (int c = 0; c < kTileActs; ++c) lanes[c][0] = lanes[c][1] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int b = 0; b < kKBlocks; ++b) {
        __m512i xb[kTileActs], offset[kTileActs];
#pragma GCC unroll 4
        for (int c = 0; c < kTileActs; ++c) {
          xb[c] = _mm512_broadcast_i64x4(load32(x[c] + 32 * b));
          if (kOffset32) offset[c] = _mm512_maddubs_epi16(_mm512_set1_epi8(32), xb[c]);
        }
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h)
#pragma GCC unroll 4
          for (int c = 0; c < kTileActs; ++c) {
            __m512i pairs = _mm512_maddubs_epi16(w.q[h][b], xb[c]);
            if (kOffset32) pairs = _mm512_sub_epi16(pairs, offset[c]);
            lanes[c][h] = _mm512_dpwssd_epi32(lanes[c][h], pairs, w.mult[h][b]);
          }
      }
#pragma GCC unroll 4
      for (int c = 0; c < kTileActs; ++c) {
        const std::int64_t first = row[c] * a.k + s * kQK_K;
        add_super_terms<kMins>(acc[c], acc_min[c], lanes[c], w.scales, a.x.d[first / kQK_K],
                               a.x.sums + first / kQ8Block);
      }
    }
    for (int c = 0; c < kTileActs && tc + c < t1; ++c) {
      alignas(64) float l[2][16], m[16];
      _mm512_store_ps(l[0], acc[c][0]);
      _mm512_store_ps(l[1], acc[c][1]);
      _mm512_store_ps(m, acc_min[c]);
      for (int r = 0; r < kTileRows && r0 + r < a.rows; ++r)
        a.y[(tc + c) * a.ldy + r0 + r] = k_total(&l[r / 2][8 * (r % 2)], &m[4 * r]);
    }
  }
}

void k_tiles(const MatmulQ8Args& a) {
  const auto tile = a.w.type == GgmlType::Q4_K   ? k_tile<GgmlType::Q4_K>
                    : a.w.type == GgmlType::Q5_K ? k_tile<GgmlType::Q5_K>
                                                 : k_tile<GgmlType::Q6_K>;
  const std::int64_t groups = (a.rows + kTileRows - 1) / kTileRows;
  for (std::int64_t t0 = 0; t0 < a.n; t0 += kActTile) {
    const std::int64_t t1 = std::min(a.n, t0 + kActTile);
    host_for_balanced(groups, kTileRows * a.k * (t1 - t0), [&](std::int64_t g) { tile(a, g * kTileRows, t0, t1); });
  }
}

}  // namespace

bool q8_tiles_supported() {
  static const bool supported = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") &&
                                __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                                __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vnni");
  return supported;
}

bool matmul_q8_tiles(const MatmulQ8Args& a) {
  if (a.n < 2 || !q8_tiles_supported()) return false;
  if (a.x.block == kQ8Block && legacy_tiles_apply(a)) {
    legacy_tiles(a);
    return true;
  }
  if (a.x.block == kQ8KBlock) {
    k_tiles(a);
    return true;
  }
  return false;
}

#else

bool q8_tiles_supported() { return false; }
bool matmul_q8_tiles(const MatmulQ8Args&) { return false; }

#endif

}  // namespace tapdiff::engine
