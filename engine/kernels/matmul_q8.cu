#include "engine/kernels/cuda_loop.cuh"
#include "engine/kernels/matmul_q8.hpp"
#include "engine/kernels/matmul_q8k.hpp"

namespace tapdiff::engine {
namespace {

// A warp per (weight row, tile of activation rows), activations in blocks of 32. Lane j of a
// pass takes block u0 + j of the row: unpacks it once and computes its term for each
// activation row of the tile (q8_block_term: the integer sum exact, the floats the host's). The
// terms meet in shared memory, and lane b < kRunBlocks adds those of blocks b, b + 8, ... in
// order, as the host's lane b does; then the host's final sum (q8_lanes_total).
__global__ void matmul_q8_warps(MatmulQ8Args a, std::int64_t tiles) {
  __shared__ float terms[kWarpsPerBlock][kWarp];
  const int lane = lane_index(), warp = warp_in_block();
  const std::int64_t i = warp_index();
  if (i >= a.rows * tiles) return;  // the whole warp
  const std::int64_t r = i / tiles, t0 = (i % tiles) * kQ8Tile, units = a.k / kQ8Block;
  const int tile = int(a.n - t0 < kQ8Tile ? a.n - t0 : kQ8Tile);
  float acc[kQ8Tile];  // lane b < kRunBlocks: float lane b of each activation row
  for (float& v : acc) v = 0.0f;
  for (std::int64_t u0 = 0; u0 < units; u0 += kWarp) {
    const std::int64_t u = u0 + lane;
    const int here = int(units - u0 < kWarp ? units - u0 : kWarp);
    IntRun run;
    if (u < units) unpack_run<IntDotLoop>(a.w, r * a.cols + u * kQ8Block, kQ8Block, run);
    for (int t = 0; t < tile; ++t) {
      if (u < units) {
        const std::int64_t b = ((t0 + t) * a.k) / kQ8Block + u;  // the activation block
        std::int32_t dot[kRunBlocks];
        IntDotLoop::blocks(run, a.x.q + b * kQ8Block, 1, dot);
        terms[warp][lane] = q8_block_term(a.x.d[b], a.x.ds[b], run.scale[0], run.offset[0], dot[0]);
      }
      __syncwarp();
      if (lane < kRunBlocks)
        for (int j = lane; j < here; j += kRunBlocks) acc[t] += terms[warp][j];
      __syncwarp();
    }
  }
  for (int t = 0; t < tile; ++t) {
    float lanes[kRunBlocks];
    for (int l = 0; l < kRunBlocks; ++l) lanes[l] = __shfl_sync(kAllLanes, acc[t], l);
    if (lane == 0) a.y[(t0 + t) * a.ldy + r] = q8_lanes_total(lanes);
  }
}

// A warp per (weight row, tile of activation rows), a K-quant with activations in blocks of
// 256: the warp takes the row's superblocks in order. Lane (j, p) = (lane / 4, lane % 4) reads
// the integers 8p..8p+7 of sub-block j from the encoded bytes and sums their products, which
// belong to integer lanes 2p and 2p + 1 of matmul_q8k.hpp (exact: added across the sub-blocks
// by shuffles). Lane L < kKTerms then computes the superblock's terms as the host does
// (k_lane_terms) and adds term L to its float lane, in superblock order; then k_total.
// block_bytes: the weight type's superblock size.
__global__ void matmul_q8k_warps(MatmulQ8Args a, std::int64_t tiles, std::int64_t block_bytes) {
  const int lane = lane_index();
  const std::int64_t i = warp_index();
  if (i >= a.rows * tiles) return;  // the whole warp
  const std::int64_t r = i / tiles, t0 = (i % tiles) * kQ8Tile;
  const int tile = int(a.n - t0 < kQ8Tile ? a.n - t0 : kQ8Tile);
  const int j = lane / 4, p = lane % 4;
  const std::int64_t supers = a.k / kQK_K, row_first = r * (a.cols / kQK_K);
  float acc[kQ8Tile];  // lane L < kKTerms: float lane L of each activation row
  for (float& v : acc) v = 0.0f;
  KRun run;
  for (std::int64_t s = 0; s < supers; ++s) {
    unpack_k_run<KDotLoop, false>(a.w, row_first + s, run);
    std::int8_t q[8];
    unpack_detail::k_sub_ints(a.w.type, dequant_detail::block_at(a.w, row_first + s, block_bytes), j, 8 * p, 8, q);
    const std::int32_t multiplier = run.multiplier[2 * j + p / 2];  // of integer lanes 2p and 2p + 1
    for (int t = 0; t < tile; ++t) {
      const std::int64_t first = (t0 + t) * a.k + s * kQK_K;  // the superblock's first activation
      const std::int8_t* x = a.x.q + first + 32 * j + 8 * p;
      std::int32_t even = 0, odd = 0;
      for (int e = 0; e < 4; ++e) even += std::int32_t(q[e]) * std::int32_t(x[e]);
      for (int e = 4; e < 8; ++e) odd += std::int32_t(q[e]) * std::int32_t(x[e]);
      even *= multiplier;
      odd *= multiplier;
      for (int offset = 4; offset < kWarp; offset *= 2) {
        even += __shfl_xor_sync(kAllLanes, even, offset);
        odd += __shfl_xor_sync(kAllLanes, odd, offset);
      }
      std::int32_t lanes[kKLanes];  // lane p of the warp holds integer lanes 2p, 2p + 1
      for (int l = 0; l < kKLanes; ++l) lanes[l] = __shfl_sync(kAllLanes, l % 2 ? odd : even, l / 2);
      if (lane < kKTerms) {
        float term[kKTerms];
        k_lane_terms<KDotLoop>(run, lanes, a.x.d[first / kQK_K], a.x.sums + first / kQ8Block, term);
        acc[t] = acc[t] + term[lane];
      }
    }
  }
  for (int t = 0; t < tile; ++t) {
    float lanes[kKTerms];
    for (int l = 0; l < kKTerms; ++l) lanes[l] = __shfl_sync(kAllLanes, acc[t], l);
    if (lane == 0) a.y[(t0 + t) * a.ldy + r] = k_total(lanes, lanes + kKLanes);
  }
}

}  // namespace

void matmul_q8_cuda(const MatmulQ8Args& a, CudaStream stream) {
  const std::int64_t tiles = (a.n + kQ8Tile - 1) / kQ8Tile;
  if (a.rows <= 0 || tiles <= 0) return;
  const unsigned blocks = warp_blocks(a.rows * tiles);
  if (a.x.block == kQ8KBlock) {
    matmul_q8k_warps<<<blocks, kWarpBlockThreads, 0, stream>>>(a, tiles, ggml_type_traits(a.w.type).block_bytes);
  } else if (!q8k_multipliable(a.w)) {
    matmul_q8_warps<<<blocks, kWarpBlockThreads, 0, stream>>>(a, tiles);
  } else {
    // A K-quant in activation blocks of 32 (columns summed not whole superblocks): a thread per
    // (weight row, tile), unpacking each superblock once.
    cuda_for(a.rows * tiles, stream, [a, tiles] __device__(std::int64_t i) {
      const std::int64_t r = i / tiles, t0 = (i % tiles) * kQ8Tile, t1 = t0 + kQ8Tile < a.n ? t0 + kQ8Tile : a.n;
      matmul_q8_row<IntDotLoop>(a, r, t0, t1);
    });
  }
  TD_CUDA_CHECK_LAUNCH("matmul_q8");
}

}  // namespace tapdiff::engine
