// Precision q8: a quantized weight times 8-bit activations (quantize_q8.hpp), as ggml's CPU
// backend multiplies them; here with activations in blocks of 32 (the K-quants take blocks of
// 256 in matmul_q8k.hpp, and these only when the columns summed are not whole blocks of 256;
// the launchers pick by the activations' block). Each kDecodeRun elements of a weight row are
// unpacked to small integers q with, per block of 32, a float scale and offset
// (w = scale m_g q + offset, m_g an integer multiplier per group of 16: Q6_K's sub-block
// scales, 1 otherwise; Q4_0's d (q - 8) is d q - 8 d). A block's product with the activations
// is summed as integers (exact, in any order and on any executor), then
//   y += d_x (scale sum_g m_g sum(q x_q)) + offset (d_x sum(x_q))
// in float, one lane per block, and the lanes are added at the end of the row. One body for
// decode (n = 1) and batches; y[t ldy + r] for activation row t and weight row r.
#pragma once

#include <cstdint>

#include "engine/device/stream.hpp"
#include "engine/kernels/dequant.hpp"
#include "engine/kernels/quantize_q8.hpp"

namespace tapdiff::engine {

inline constexpr int kQ8Group = 16;  // weight elements sharing an integer multiplier
inline constexpr int kRunGroups = kDecodeRun / kQ8Group;
inline constexpr int kRunBlocks = kDecodeRun / kQ8Block;

// Whether matmul_q8 multiplies `w`: a block type whose integers fit in 8 bits. The fault
// dequant-q8-unsigned reads Q8_0 quants as 0..255, which do not.
TD_HD inline bool q8_multipliable(const Encoded& w) {
  switch (w.type) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
      return false;
    case GgmlType::Q8_0:
      return !w.quirks.q8_quant_unsigned;
    default:
      return true;
  }
}

struct MatmulQ8Args {
  Encoded w = {};           // (rows, cols), row-major; q8_multipliable
  std::int64_t cols = 0;    // elements a row
  std::int64_t rows = 0;    // rows computed
  std::int64_t k = 0;       // columns summed: a multiple of kQ8Block, <= cols
  Q8Rows x = {};            // n rows of k
  std::int64_t n = 0;
  float* y = nullptr;       // y[t ldy + r]
  std::int64_t ldy = 0;
};

// What a run's integers are: unsigned (0..31: a byte multiply may take them as its unsigned
// operand), signed (Q8_0), or signed with an integer multiplier per group (Q6_K).
enum class IntForm : std::uint8_t { unsigned_ints, signed_ints, scaled_groups };

// Elements of one run of a weight row as integers: w = scale[b] multiplier[g] q + offset[b]
// in block b, group g (multiplier 1 unless scaled_groups).
struct IntRun {
  std::int8_t q[kDecodeRun];
  std::int16_t multiplier[kRunGroups];  // scaled_groups only
  float scale[kRunBlocks];
  float offset[kRunBlocks];
  IntForm form;
};

namespace unpack_detail {

using namespace dequant_detail;

// Legacy blocks: the integers of block i (32 elements) at q + 32 i, and the raw 16-bit scale
// and offset, widened for all blocks of the run at once (a loop the host compiler vectorizes).
struct LegacyBits {
  std::uint16_t d[kDecodeRun / kQK];
  std::uint16_t m[kDecodeRun / kQK];  // 0 (+0.0) for types without an offset
};

// 16 bytes of src split into their low nibbles at lo and high nibbles at hi. On the host a
// 16-byte vector (GCC vector extension: the same byte-wise arithmetic), in a CUDA thread a loop.
#if defined(__CUDA_ARCH__)
TD_HD inline void split_nibbles(const std::uint8_t* src, std::int8_t* lo, std::int8_t* hi) {
  for (int j = 0; j < 16; ++j) {
    lo[j] = std::int8_t(src[j] & 0x0F);
    hi[j] = std::int8_t(src[j] >> 4);
  }
}
#else
typedef std::uint8_t Bytes16 __attribute__((vector_size(16)));
inline void split_nibbles(const std::uint8_t* src, std::int8_t* lo, std::int8_t* hi) {
  Bytes16 v;
  memcpy(&v, src, sizeof v);
  const Bytes16 l = v & 0x0F, h = v >> 4;
  memcpy(lo, &l, sizeof l);
  memcpy(hi, &h, sizeof h);
}
#endif

// Q4_0 and Q5_0 keep q unsigned: d (q - 8) = d q - 8 d, the offset applied to the
// activations' sum.
TD_HD inline void q4_0(const std::uint8_t* b, std::int8_t* q, LegacyBits& bits, int i) {
  split_nibbles(b + offsetof(BlockQ4_0, qs), q, q + kQK / 2);
  bits.d[i] = u16(b);
}
TD_HD inline void q4_1(const std::uint8_t* b, std::int8_t* q, LegacyBits& bits, int i) {
  split_nibbles(b + offsetof(BlockQ4_1, qs), q, q + kQK / 2);
  bits.d[i] = u16(b);
  bits.m[i] = u16(b + offsetof(BlockQ4_1, m));
}
TD_HD inline void q5_0(const std::uint8_t* b, std::int8_t* q, LegacyBits& bits, int i) {
  q5_ints(b + offsetof(BlockQ5_0, qh), b + offsetof(BlockQ5_0, qs), q);
  bits.d[i] = u16(b);
}
TD_HD inline void q5_1(const std::uint8_t* b, std::int8_t* q, LegacyBits& bits, int i) {
  q5_ints(b + offsetof(BlockQ5_1, qh), b + offsetof(BlockQ5_1, qs), q);
  bits.d[i] = u16(b);
  bits.m[i] = u16(b + offsetof(BlockQ5_1, m));
}
TD_HD inline void q8_0(const std::uint8_t* b, std::int8_t* q, LegacyBits& bits, int i) {
  memcpy(q, b + offsetof(BlockQ8_0, qs), kQK);
  bits.d[i] = u16(b);
}

// The blocks of a legacy run, their integers and scales. offset_in_d: the offset
// is that multiple of d (Q4_0, Q5_0), or else the block's m (0 without one). widen_d_as_bf16:
// the fault dequant-q8-scale reads the fp16 scale's bits as a bf16, as dequant.hpp does.
template <typename IntDot, typename Block>
TD_HD inline void legacy_run(const Encoded& w, std::int64_t first_block, int blocks, std::size_t block_bytes,
                             std::int8_t* q, IntRun& r, IntForm form, float offset_in_d, bool widen_d_as_bf16,
                             Block block) {
  LegacyBits bits = {};
  for (int i = 0; i < blocks; ++i)
    block(block_at(w, first_block + i, std::int64_t(block_bytes)), q + i * kQK, bits, i);
  constexpr int kBlocks = kDecodeRun / kQK;
  float d[kBlocks], m[kBlocks];
  if (widen_d_as_bf16) {
    for (int i = 0; i < kBlocks; ++i) d[i] = bf16_bits_to_f32(bits.d[i]);
  } else {
    IntDot::widen_f16(bits.d, d);
  }
  IntDot::widen_f16(bits.m, m);
  for (int i = 0; i < kBlocks; ++i) {
    r.scale[i] = d[i];
    r.offset[i] = offset_in_d != 0.0f ? offset_in_d * d[i] : m[i];
  }
  r.form = form;
}

// Q4_K / Q5_K: the run's block scales d sc[j] and offsets -(dmin m[j]) (IntDot::k_scales)
// from the block's head (d, dmin, 12 packed bytes: the same in both).
template <typename IntDot, typename Block>
TD_HD inline void k_run_scales(const std::uint8_t* b, IntRun& r) {
  IntDot::k_scales(u16(b + offsetof(Block, d)), u16(b + offsetof(Block, dmin)), k_scales_mins(b + offsetof(Block, scales)), r);
  r.form = IntForm::unsigned_ints;
}
// A K-quant superblock's 256 integers, in element order: Q4_K's and Q5_K's unsigned (0..15,
// 0..31), Q6_K's q - 32. Both unpackers (here and matmul_q8k.hpp) take them from these.
TD_HD inline void q4_k_ints(const std::uint8_t* b, std::int8_t* q) {
  const std::uint8_t* qs = b + offsetof(BlockQ4_K, qs);
  for (int c = 0; c < 4; ++c, qs += 32) {
    split_nibbles(qs, q + 64 * c, q + 64 * c + 32);
    split_nibbles(qs + 16, q + 64 * c + 16, q + 64 * c + 48);
  }
}
TD_HD inline void q5_k_ints(const std::uint8_t* b, std::int8_t* q) {
  TD_UNROLL for (int j = 0; j < 8; ++j) q5_k_sub_ints(b + offsetof(BlockQ5_K, qs), b + offsetof(BlockQ5_K, qh), j, q + 32 * j);
}
TD_HD inline void q6_k_ints(const std::uint8_t* b, std::int8_t* q) {
  TD_UNROLL for (int j = 0; j < 8; ++j)
    q6_k_quarter_ints(b + offsetof(BlockQ6_K, ql) + 64 * (j / 4), b + offsetof(BlockQ6_K, qh) + 32 * (j / 4), j % 4,
                      q + 32 * j);
}
// Elements [l0, l0 + n) of sub-block j of K-quant superblock b, as the integers above.
TD_HD inline void k_sub_ints(GgmlType type, const std::uint8_t* b, int j, int l0, int n, std::int8_t* q) {
  if (type == GgmlType::Q4_K) return q4_k_sub_ints(b + offsetof(BlockQ4_K, qs), j, q, l0, n);
  if (type == GgmlType::Q5_K) return q5_k_sub_ints(b + offsetof(BlockQ5_K, qs), b + offsetof(BlockQ5_K, qh), j, q, l0, n);
  q6_k_quarter_ints(b + offsetof(BlockQ6_K, ql) + 64 * (j / 4), b + offsetof(BlockQ6_K, qh) + 32 * (j / 4), j % 4, q,
                    l0, n);
}

template <typename IntDot>
TD_HD inline void q4_k(const std::uint8_t* b, std::int8_t* q, IntRun& r) {
  q4_k_ints(b, q);
  k_run_scales<IntDot, BlockQ4_K>(b, r);
}
template <typename IntDot>
TD_HD inline void q5_k(const std::uint8_t* b, std::int8_t* q, IntRun& r) {
  q5_k_ints(b, q);
  k_run_scales<IntDot, BlockQ5_K>(b, r);
}
// Group g of the run (16 elements) has the scale d sc[g]: the integer sc[g] applies to the
// group's integer sum (IntDot::q6_k_scales).
template <typename IntDot>
TD_HD inline void q6_k(const std::uint8_t* b, std::int8_t* q, IntRun& r) {
  q6_k_ints(b, q);
  IntDot::q6_k_scales(u16(b + offsetof(BlockQ6_K, d)), reinterpret_cast<const std::int8_t*>(b + offsetof(BlockQ6_K, scales)), r);
  r.form = IntForm::scaled_groups;
}

}  // namespace unpack_detail

// Elements [first, first + len) of `w` (first a multiple of the block size, len of kQ8Block)
// as integers, whole blocks at a time, with their scales, offsets and multipliers. The legacy
// blocks' 16-bit scales are widened by IntDot::widen_f16.
template <typename IntDot>
TD_HD inline void unpack_run(const Encoded& w, std::int64_t first, int len, IntRun& r) {
  namespace ud = unpack_detail;
  const std::int64_t legacy = first / kQK, k = first / kQK_K;
  const int blocks = len / kQK;
  std::int8_t* q = r.q;
  switch (w.type) {
    case GgmlType::Q4_0:
      return ud::legacy_run<IntDot>(w, legacy, blocks, sizeof(BlockQ4_0), q, r, IntForm::unsigned_ints, -8.0f, false, ud::q4_0);
    case GgmlType::Q4_1:
      return ud::legacy_run<IntDot>(w, legacy, blocks, sizeof(BlockQ4_1), q, r, IntForm::unsigned_ints, 0.0f, false, ud::q4_1);
    case GgmlType::Q5_0:
      return ud::legacy_run<IntDot>(w, legacy, blocks, sizeof(BlockQ5_0), q, r, IntForm::unsigned_ints, -16.0f, false, ud::q5_0);
    case GgmlType::Q5_1:
      return ud::legacy_run<IntDot>(w, legacy, blocks, sizeof(BlockQ5_1), q, r, IntForm::unsigned_ints, 0.0f, false, ud::q5_1);
    case GgmlType::Q8_0:
      return ud::legacy_run<IntDot>(w, legacy, blocks, sizeof(BlockQ8_0), q, r, IntForm::signed_ints, 0.0f,
                            w.quirks.q8_scale_as_bf16, ud::q8_0);
    case GgmlType::Q4_K:
      return ud::q4_k<IntDot>(ud::block_at(w, k, sizeof(BlockQ4_K)), q, r);
    case GgmlType::Q5_K:
      return ud::q5_k<IntDot>(ud::block_at(w, k, sizeof(BlockQ5_K)), q, r);
    case GgmlType::Q6_K:
      return ud::q6_k<IntDot>(ud::block_at(w, k, sizeof(BlockQ6_K)), q, r);
    default:
      return;  // not q8_multipliable: validate refuses it
  }
}

// The exact parts of a run's product, which an executor may compute any way it likes
// (matmul_q8_host.cpp has AVX2 ones); this is everyone else's: the floats of its scales
// (conversions and at most one product each), and the integer dot products of its first
// `blocks` blocks of 32 with activations x (sums has room for kRunBlocks; the rest are 0):
//   sums[b] = sum over groups g of block b of multiplier[g] sum over the group of q x.
struct IntDotLoop {
  // A run's eight fp16 block scales as floats (exact: any executor's way gives these floats).
  TD_HD static void widen_f16(const std::uint16_t* h, float* f) {
    for (int i = 0; i < kRunBlocks; ++i) f[i] = f16_bits_to_f32(h[i]);
  }
  // A K-quant run's block scales d sc[j] and offsets -(dmin m[j]), d and dmin as fp16 bits:
  // one product each, the same floats however an executor computes them.
  TD_HD static void k_scales(std::uint16_t d, std::uint16_t dmin, const dequant_detail::KScales& s, IntRun& r) {
    const float df = f16_bits_to_f32(d), dminf = f16_bits_to_f32(dmin);
    for (int j = 0; j < kRunBlocks; ++j) {
      r.scale[j] = df * float(s.scale(j));
      r.offset[j] = -(dminf * float(s.min(j)));
    }
  }
  // A Q6_K run: the scale d (fp16 bits) for every block, no offset, and the groups' integer
  // multipliers sc.
  TD_HD static void q6_k_scales(std::uint16_t d, const std::int8_t* sc, IntRun& r) {
    const float df = f16_bits_to_f32(d);
    for (int g = 0; g < kRunGroups; ++g) r.multiplier[g] = sc[g];
    for (int i = 0; i < kRunBlocks; ++i) {
      r.scale[i] = df;
      r.offset[i] = 0.0f;
    }
  }
  TD_HD static void blocks(const IntRun& run, const std::int8_t* x, int blocks, std::int32_t* sums) {
    const bool scaled = run.form == IntForm::scaled_groups;
    for (int b = 0; b < kRunBlocks; ++b) {
      std::int32_t s = 0;
      for (int h = 0; h < 2 && b < blocks; ++h) {
        const int g = 2 * b + h;
        std::int32_t group = 0;
        for (int j = 0; j < kQ8Group; ++j) group += std::int32_t(run.q[g * kQ8Group + j]) * std::int32_t(x[g * kQ8Group + j]);
        s += (scaled ? std::int32_t(run.multiplier[g]) : 1) * group;
      }
      sums[b] = s;
    }
  }
};

// Block b's term in its row's float lane b % kRunBlocks: activation scale dx and scaled sum
// dsx, the weight block's scale and offset, their integer dot product.
TD_HD inline float q8_block_term(float dx, float dsx, float scale, float offset, std::int32_t dot) {
  return dx * (scale * float(dot)) + offset * dsx;
}
// A row's kRunBlocks lanes added pairwise, halves first (lane is overwritten).
TD_HD inline float q8_lanes_total(float* lane) {
  for (int width = kRunBlocks / 2; width > 0; width /= 2)
    for (int g = 0; g < width; ++g) lane[g] += lane[g + width];
  return lane[0];
}

// Weight row r against activation rows [t0, t1) (at most kQ8Tile of them). A row is taken
// kChunkRuns runs at a time: all unpacked first, then multiplied, so that a run's integers are
// read once the stores that wrote them are done (a read straddling two pending stores waits
// for both on the host).
inline constexpr int kQ8Tile = 16;
inline constexpr int kChunkRuns = 4;

template <typename IntDot>
TD_HD inline void matmul_q8_row(const MatmulQ8Args& a, std::int64_t r, std::int64_t t0, std::int64_t t1) {
  IntRun runs[kChunkRuns];
  float lanes[kQ8Tile][kRunBlocks];
  for (int t = 0; t < t1 - t0; ++t)
    for (int b = 0; b < kRunBlocks; ++b) lanes[t][b] = 0.0f;
  std::int32_t dots[kChunkRuns][kRunBlocks];
  int blocks[kChunkRuns];  // of each run: kRunBlocks but for a row's short last run
  for (std::int64_t c0 = 0; c0 < a.k; c0 += kChunkRuns * kDecodeRun) {
    int n_runs = 0;
    for (; n_runs < kChunkRuns && c0 + n_runs * kDecodeRun < a.k; ++n_runs) {
      const std::int64_t first = c0 + n_runs * kDecodeRun;
      const int len = run_length(a.k - first);
      unpack_run<IntDot>(a.w, r * a.cols + first, len, runs[n_runs]);
      blocks[n_runs] = len / kQ8Block;
    }
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int64_t row = t * a.k + c0;  // the chunk's first activation
      for (int u = 0; u < n_runs; ++u) {
        IntDot::blocks(runs[u], a.x.q + row + u * kDecodeRun, blocks[u], dots[u]);
      }
      float* lane = lanes[t - t0];
      for (int u = 0; u < n_runs; ++u) {
        const float* d = a.x.d + (row + u * kDecodeRun) / kQ8Block;
        const float* ds = a.x.ds + (row + u * kDecodeRun) / kQ8Block;
        const IntRun& run = runs[u];
        for (int b = 0; b < blocks[u]; ++b) lane[b] += q8_block_term(d[b], ds[b], run.scale[b], run.offset[b], dots[u][b]);
      }
    }
  }
  for (std::int64_t t = t0; t < t1; ++t) a.y[t * a.ldy + r] = q8_lanes_total(lanes[t - t0]);
}

void validate(const MatmulQ8Args& a);
void matmul_q8_host(const MatmulQ8Args& a);
void matmul_q8_cuda(const MatmulQ8Args& a, CudaStream stream);

}  // namespace tapdiff::engine
