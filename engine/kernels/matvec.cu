#include "engine/kernels/cuda_loop.cuh"
#include "engine/kernels/matvec.hpp"

namespace tapdiff::engine {
namespace {

static_assert(kMatvecSlots == kWarp, "a lane per slot");
constexpr int kTileStride = kSubBlock + 1;  // a padded row: lane l reads column l of 32 rows without bank conflicts

// A warp per row. Its 32 lanes are matvec_row's 32 slots: lane s adds the products of columns
// s, s + 32, ... in order, as the host's accumulator slot s does, so the sums are the host's bit
// for bit. Each pass decodes 32 sub-blocks of the row, one a lane, into the warp's tile.
__global__ void matvec_warps(MatvecArgs a) {
  __shared__ float tiles[kWarpsPerBlock][kMatvecSlots * kTileStride];
  const int lane = lane_index();
  const std::int64_t r = warp_index();
  if (r >= a.rows) return;  // the whole warp
  float* tile = tiles[warp_in_block()];
  const std::int64_t full = a.k / kMatvecSlots * kMatvecSlots, row = r * a.cols;
  float acc = 0.0f;
  for (std::int64_t c0 = 0; c0 < full; c0 += kMatvecSlots * kSubBlock) {
    const std::int64_t mine = c0 + std::int64_t(lane) * kSubBlock;
    if (mine < full) {
      decode_sub_block(a.w, row + mine, tile + lane * kTileStride);
      round_run(a.round, tile + lane * kTileStride, kSubBlock);
    }
    __syncwarp();
    const int groups = int((full - c0) / kSubBlock < kMatvecSlots ? (full - c0) / kSubBlock : kMatvecSlots);
    for (int g = 0; g < groups; ++g) acc = product_add(acc, tile[g * kTileStride + lane], a.x[c0 + g * kSubBlock + lane]);
    __syncwarp();
  }
  float tail = 0.0f;
  if (lane == 0 && full < a.k) {  // plain floats only: block types have k a multiple of 32
    const int len = int(a.k - full);
    decode_run(a.w, row + full, len, tile);
    round_run(a.round, tile, len);
    for (int j = 0; j < len; ++j) tail = product_add(tail, tile[j], a.x[full + j]);
  }
  float slots[kMatvecSlots];
  gather_slots(acc, slots);
  if (lane == 0) a.y[r] = sum_slots(tail, slots);
}

}  // namespace

void matvec_cuda(const MatvecArgs& a, CudaStream stream) {
  if (a.rows <= 0) return;
  matvec_warps<<<warp_blocks(a.rows), kWarpBlockThreads, 0, stream>>>(a);
  TD_CUDA_CHECK_LAUNCH("matvec");
}

}  // namespace tapdiff::engine
