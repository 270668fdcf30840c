// Precision q8 for the K-quants (Q4_K, Q5_K, Q6_K): their products with activations quantized
// in blocks of 256 (quantize_q8.hpp, kQ8KBlock), as ggml's CPU backend multiplies them with
// q8_K. A superblock's 256 weights are integers q with an integer multiplier per group of 16
// (Q4_K's and Q5_K's 6-bit block scales, Q6_K's 8-bit group scales) and, for Q4_K and Q5_K, a
// 6-bit min per block of 32: w = d mult q - dmin min. With activations x = d_x q_x,
//   sum w x = d_x d sum(mult q q_x) - d_x dmin sum_b(min_b sum_b(q_x))
// both sums in integers: two float products per superblock, where matmul_q8.hpp's blocks of
// 32 take two per block.
//
// The integer sums are kept in lanes, and so are the float sums, lane by lane, added in a fixed
// order at the end of the row: an executor that sums eight lanes at once (AVX2) and one that
// sums them one by one give the same floats. For superblock s and activation row t:
//   lane L < 8:   sum over blocks b of mult[2b + L / 4] sum_{i < 4} q[32b + 4L + i] q_x[32b + 4L + i]
//   min lane j < 4: min[2j] sums[2j] + min[2j + 1] sums[2j + 1]  (sums: of each 32 q_x)
//   acc[L] += (d_x d) lane L;  acc_min[j] += -(d_x dmin) min lane j
// and y = ((acc0 + acc4) + (acc2 + acc6)) + ((acc1 + acc5) + (acc3 + acc7))
//        + ((acc_min0 + acc_min2) + (acc_min1 + acc_min3)).
#pragma once

#include <cstdint>

#include "engine/kernels/matmul_q8.hpp"

namespace tapdiff::engine {

inline constexpr int kKLanes = 8, kKMinLanes = 4;
inline constexpr int kKGroups = kQK_K / kQ8Group;  // 16
inline constexpr int kKBlocks = kQK_K / kQ8Block;  // 8

// Whether matmul_q8 multiplies `w` with activations in blocks of kQ8KBlock.
TD_HD inline bool q8k_multipliable(const Encoded& w) {
  return w.type == GgmlType::Q4_K || w.type == GgmlType::Q5_K || w.type == GgmlType::Q6_K;
}

// The activation blocks products with `w` take when they sum k columns: 256 for the K-quants
// summing whole superblocks, else 32.
TD_HD inline int q8_activation_block(const Encoded& w, std::int64_t k) {
  return q8k_multipliable(w) && k % kQ8KBlock == 0 ? kQ8KBlock : kQ8Block;
}

// One superblock as the products take it.
struct KRun {
  std::int8_t q[kQK_K];                // Q4_K, Q5_K: 0..31; Q6_K: -32..31
  std::int16_t multiplier[kKGroups];
  std::int16_t min[kKBlocks];          // Q4_K, Q5_K
  float d, dmin;                       // dmin 0 for Q6_K
  bool has_min;
};

// Superblock `s` of w (counted from the tensor's start); with_ints false: everything but q (an
// executor that reads the integers from the encoded bytes itself). KDot widens the fp16 scales
// and unpacks Q4_K's and Q5_K's packed 6-bit scales and mins (exact either way).
template <typename KDot, bool with_ints = true>
TD_HD inline void unpack_k_run(const Encoded& w, std::int64_t s, KRun& r) {
  namespace dd = dequant_detail;
  namespace ud = unpack_detail;
  if (w.type == GgmlType::Q6_K) {
    const std::uint8_t* b = dd::block_at(w, s, sizeof(BlockQ6_K));
    if (with_ints) ud::q6_k_ints(b, r.q);
    const auto* sc = reinterpret_cast<const std::int8_t*>(b + offsetof(BlockQ6_K, scales));
    for (int g = 0; g < kKGroups; ++g) r.multiplier[g] = sc[g];
    KDot::widen_f16(dd::u16(b + offsetof(BlockQ6_K, d)), 0, r);
    r.has_min = false;
    return;
  }
  const bool q4 = w.type == GgmlType::Q4_K;
  const std::uint8_t* b = dd::block_at(w, s, q4 ? sizeof(BlockQ4_K) : sizeof(BlockQ5_K));
  if (with_ints) q4 ? ud::q4_k_ints(b, r.q) : ud::q5_k_ints(b, r.q);
  // Q4_K and Q5_K begin alike: d, dmin, the 12 packed scale bytes.
  KDot::k_scales(b + offsetof(BlockQ4_K, scales), r);
  KDot::widen_f16(dd::u16(b + offsetof(BlockQ4_K, d)), dd::u16(b + offsetof(BlockQ4_K, dmin)), r);
  r.has_min = true;
}

// The integer lanes, as any executor may compute them (exact); this is everyone else's.
struct KDotLoop {
  TD_HD static void widen_f16(std::uint16_t d, std::uint16_t dmin, KRun& r) {
    r.d = f16_bits_to_f32(d);
    r.dmin = f16_bits_to_f32(dmin);
  }
  // multiplier[2j] = multiplier[2j + 1] = sc[j], min[j] = m[j] (dequant.hpp's k_scales_mins).
  TD_HD static void k_scales(const std::uint8_t* packed, KRun& r) {
    const dequant_detail::KScales k = dequant_detail::k_scales_mins(packed);
    for (int j = 0; j < kKBlocks; ++j) {
      r.multiplier[2 * j] = r.multiplier[2 * j + 1] = std::int16_t(k.scale(j));
      r.min[j] = std::int16_t(k.min(j));
    }
  }
  TD_HD static void lanes(const KRun& run, const std::int8_t* x, std::int32_t* lane) {
    for (int l = 0; l < kKLanes; ++l) lane[l] = 0;
    for (int b = 0; b < kKBlocks; ++b)
      for (int l = 0; l < kKLanes; ++l) {
        std::int32_t s = 0;
        for (int i = 32 * b + 4 * l; i < 32 * b + 4 * l + 4; ++i) s += std::int32_t(run.q[i]) * std::int32_t(x[i]);
        lane[l] += std::int32_t(run.multiplier[2 * b + l / 4]) * s;
      }
  }
  TD_HD static void min_lanes(const KRun& run, const std::int16_t* sums, std::int32_t* lane) {
    for (int j = 0; j < kKMinLanes; ++j)
      lane[j] = std::int32_t(run.min[2 * j]) * sums[2 * j] + std::int32_t(run.min[2 * j + 1]) * sums[2 * j + 1];
  }
};

// One superblock's terms in its row's float lanes, from its integer lanes and activation row
// q_x (scale dx, sums of 32 at sums): term[l] for lane l < kKLanes, term[kKLanes + j] for min
// lane j (0 without mins).
inline constexpr int kKTerms = kKLanes + kKMinLanes;
template <typename KDot>
TD_HD inline void k_lane_terms(const KRun& run, const std::int32_t* lane, float dx, const std::int16_t* sums,
                               float* term) {
  const float d = dx * run.d;
  for (int l = 0; l < kKLanes; ++l) term[l] = d * float(lane[l]);
  if (run.has_min) {
    std::int32_t min_lane[kKMinLanes];
    KDot::min_lanes(run, sums, min_lane);
    const float dmin = -(dx * run.dmin);
    for (int j = 0; j < kKMinLanes; ++j) term[kKLanes + j] = dmin * float(min_lane[j]);
  } else {
    for (int j = 0; j < kKMinLanes; ++j) term[kKLanes + j] = 0.0f;
  }
}

template <typename KDot, bool encoded>
TD_HD inline void k_terms(const MatmulQ8Args& a, std::int64_t s, const KRun& run, const std::int8_t* x, float dx,
                          const std::int16_t* sums, float* term) {
  std::int32_t lane[kKLanes];
  if constexpr (encoded) {
    KDot::encoded_lanes(a.w, s, run, x, lane);
  } else {
    KDot::lanes(run, x, lane);
  }
  k_lane_terms<KDot>(run, lane, dx, sums, term);
}

// The terms added to a row's lanes, in superblock order.
template <typename KDot, bool encoded>
TD_HD inline void k_accumulate(const MatmulQ8Args& a, std::int64_t s, const KRun& run, const std::int8_t* x,
                               float dx, const std::int16_t* sums, float* acc, float* acc_min) {
  float term[kKTerms];
  k_terms<KDot, encoded>(a, s, run, x, dx, sums, term);
  for (int l = 0; l < kKLanes; ++l) acc[l] = acc[l] + term[l];
  if (run.has_min)
    for (int j = 0; j < kKMinLanes; ++j) acc_min[j] = acc_min[j] + term[kKLanes + j];
}

TD_HD inline float k_total(const float* l, const float* m) {
  return (((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))) + ((m[0] + m[2]) + (m[1] + m[3]));
}

// Weight row r against activation rows [t0, t1) (at most kQ8Tile), a.k a multiple of 256.
// encoded: KDot::encoded_lanes reads the integers from the encoded bytes itself. One activation
// row (decode) keeps its lanes in locals, a tile in arrays: the same sums.
template <typename KDot, bool encoded = false>
TD_HD inline void matmul_q8k_row(const MatmulQ8Args& a, std::int64_t r, std::int64_t t0, std::int64_t t1) {
  const std::int64_t supers = a.k / kQK_K, row_first = r * (a.cols / kQK_K);
  KRun run;
  if (t1 - t0 == 1) {
    float acc[kKLanes] = {}, acc_min[kKMinLanes] = {};
    for (std::int64_t s = 0; s < supers; ++s) {
      unpack_k_run<KDot, !encoded>(a.w, row_first + s, run);
      const std::int64_t first = t0 * a.k + s * kQK_K;  // the superblock's first activation
      k_accumulate<KDot, encoded>(a, row_first + s, run, a.x.q + first, a.x.d[first / kQK_K],
                                  a.x.sums + first / kQ8Block, acc, acc_min);
    }
    a.y[t0 * a.ldy + r] = k_total(acc, acc_min);
    return;
  }
  float acc[kQ8Tile][kKLanes] = {}, acc_min[kQ8Tile][kKMinLanes] = {};
  for (std::int64_t s = 0; s < supers; ++s) {
    unpack_k_run<KDot, !encoded>(a.w, row_first + s, run);
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int64_t first = t * a.k + s * kQK_K;
      k_accumulate<KDot, encoded>(a, row_first + s, run, a.x.q + first, a.x.d[first / kQK_K],
                                  a.x.sums + first / kQ8Block, acc[t - t0], acc_min[t - t0]);
    }
  }
  for (std::int64_t t = t0; t < t1; ++t) a.y[t * a.ldy + r] = k_total(acc[t - t0], acc_min[t - t0]);
}

}  // namespace tapdiff::engine
