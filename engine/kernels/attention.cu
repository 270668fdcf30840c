#include "engine/kernels/attention.hpp"
#include "engine/kernels/cuda_loop.cuh"

namespace tapdiff::engine {
namespace {

// A warp per (query row, head), with attention_row_head's arithmetic: lanes take keys in turn
// for the scores and output elements in turn for the weighted values, each sum in the host's
// order; the softmax's denominator is summed in key order by every lane alike.
__global__ void attention_warps(AttentionArgs a) {
  const int lane = lane_index();
  const std::int64_t index = warp_index();
  if (index >= a.n_rows * a.n_head) return;  // the whole warp
  const AttentionSpan s = attention_span(a, index);
  float max = -INFINITY;
  for (std::int64_t t = s.first + lane; t < s.softmax_len; t += kWarp) {
    s.p[t] = attention_score(a, s, t);
    max = s.p[t] > max ? s.p[t] : max;
  }
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(kAllLanes, max, offset);
    max = other > max ? other : max;
  }
  for (std::int64_t t = s.first + lane; t < s.softmax_len; t += kWarp) s.p[t] = expf(s.p[t] - max);
  __syncwarp();
  float sum = 0.0f;
  for (std::int64_t t0 = s.first; t0 < s.softmax_len; t0 += kWarp) {
    const float mine = t0 + lane < s.softmax_len ? s.p[t0 + lane] : 0.0f;
    const int n = int(s.softmax_len - t0 < kWarp ? s.softmax_len - t0 : kWarp);
    for (int i = 0; i < kWarp; ++i) {
      const float e = __shfl_sync(kAllLanes, mine, i);
      if (i < n) sum += e;
    }
  }
  for (std::int64_t t = lane; t < a.probs_stride; t += kWarp) {
    if (t < s.first || t >= s.visible) s.p[t] = 0.0f;
    else s.p[t] /= sum;
  }
  __syncwarp();
  for (int d = lane; d < a.head_dim; d += kWarp) s.out[d] = attention_output(a, s, d);
}

}  // namespace

void attention_cuda(const AttentionArgs& a, CudaStream stream) {
  const std::int64_t warps = a.n_rows * a.n_head;
  if (warps <= 0) return;
  attention_warps<<<warp_blocks(warps), kWarpBlockThreads, 0, stream>>>(a);
  TD_CUDA_CHECK_LAUNCH("attention");
}

}  // namespace tapdiff::engine
