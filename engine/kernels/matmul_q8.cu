#include "engine/kernels/cuda_loop.cuh"
#include "engine/kernels/matmul_q8.hpp"
#include "engine/kernels/matmul_q8k.hpp"

namespace tapdiff::engine {
namespace {

constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = 4;

// A warp per (weight row, tile of activation rows). Lane j of a pass takes unit u0 + j of the
// row (a block of 32, or with activations in blocks of 256 a K-quant superblock): unpacks it once
// and computes its terms for each activation row of the tile, the integer sums exact and the
// floats the host's (q8_block_term, k_terms). The terms meet in shared memory and the lanes that
// keep the row's float lanes add them in unit order, as the host does: a block of 32 goes to
// lane u % kRunBlocks, a superblock's kKTerms terms to lanes 0..kKTerms-1. Then the host's
// final sums (q8_lanes_total, k_total): the same floats.
template <bool superblocks>
__global__ void matmul_q8_warps(MatmulQ8Args a, std::int64_t tiles) {
  constexpr int kTerms = superblocks ? kKTerms : 1;
  __shared__ float terms[kWarpsPerBlock][kWarp][kTerms + 1];
  const int lane = int(threadIdx.x) % kWarp, warp = int(threadIdx.x) / kWarp;
  const std::int64_t i = std::int64_t(blockIdx.x) * kWarpsPerBlock + warp;
  if (i >= a.rows * tiles) return;  // the whole warp
  const std::int64_t r = i / tiles, t0 = (i % tiles) * kQ8Tile;
  const int tile = int(a.n - t0 < kQ8Tile ? a.n - t0 : kQ8Tile);
  const std::int64_t unit = superblocks ? kQK_K : kQ8Block, units = a.k / unit;
  float acc[kQ8Tile];  // lane L: float lane L of each activation row
  for (float& v : acc) v = 0.0f;
  for (std::int64_t u0 = 0; u0 < units; u0 += kWarp) {
    const std::int64_t u = u0 + lane;
    const int here = int(units - u0 < kWarp ? units - u0 : kWarp);
    KRun krun;
    IntRun irun;
    if (u < units) {
      if constexpr (superblocks)
        unpack_k_run<KDotLoop>(a.w, r * (a.cols / kQK_K) + u, krun);
      else
        unpack_run<IntDotLoop>(a.w, r * a.cols + u * kQ8Block, kQ8Block, irun);
    }
    for (int t = 0; t < tile; ++t) {
      const std::int64_t first = (t0 + t) * a.k + u * unit;  // the unit's first activation
      if (u < units) {
        if constexpr (superblocks) {
          k_terms<KDotLoop, false>(a, r * (a.cols / kQK_K) + u, krun, a.x.q + first, a.x.d[first / kQK_K],
                                   a.x.sums + first / kQ8Block, terms[warp][lane]);
        } else {
          std::int32_t dot[kRunBlocks];
          IntDotLoop::blocks(irun, a.x.q + first, 1, dot);
          const std::int64_t b = first / kQ8Block;
          terms[warp][lane][0] = q8_block_term(a.x.d[b], a.x.ds[b], irun.scale[0], irun.offset[0], dot[0]);
        }
      }
      __syncwarp();
      if constexpr (superblocks) {
        if (lane < kKTerms)
          for (int j = 0; j < here; ++j) acc[t] = acc[t] + terms[warp][j][lane];
      } else {
        if (lane < kRunBlocks)
          for (int j = lane; j < here; j += kRunBlocks) acc[t] += terms[warp][j][0];
      }
      __syncwarp();
    }
  }
  for (int t = 0; t < tile; ++t) {
    float lanes[kKTerms];
    for (int l = 0; l < kKTerms; ++l) lanes[l] = __shfl_sync(0xffffffffu, acc[t], l);
    if (lane == 0)
      a.y[(t0 + t) * a.ldy + r] = superblocks ? k_total(lanes, lanes + kKLanes) : q8_lanes_total(lanes);
  }
}

template <bool superblocks>
void launch_warps(const MatmulQ8Args& a, std::int64_t tiles, CudaStream stream) {
  const std::int64_t blocks = (a.rows * tiles + kWarpsPerBlock - 1) / kWarpsPerBlock;
  matmul_q8_warps<superblocks><<<static_cast<unsigned>(blocks), kWarpsPerBlock * kWarp, 0, stream>>>(a, tiles);
}

}  // namespace

void matmul_q8_cuda(const MatmulQ8Args& a, CudaStream stream) {
  const std::int64_t tiles = (a.n + kQ8Tile - 1) / kQ8Tile;
  if (a.rows <= 0 || tiles <= 0) return;
  if (a.x.block == kQ8KBlock) {
    launch_warps<true>(a, tiles, stream);
  } else if (!q8k_multipliable(a.w)) {
    launch_warps<false>(a, tiles, stream);
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
