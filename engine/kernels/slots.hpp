// Row reductions in 32 slots: slot s adds the terms of the elements s, s + 32, s + 64, ... in
// order, and the slots are then added in one fixed order (sum_slots). A CUDA warp computes a
// row with a lane per slot; the host computes the same slots one after another. Every executor
// therefore adds the same floats in the same order, and their results agree bit for bit.
#pragma once

#include "engine/device/td_hd.hpp"

namespace tapdiff::engine {

inline constexpr int kSlots = 32;

// tail + the 32 slots, pairs of pairs first.
TD_HD inline float sum_slots(float tail, const float* slots) {
  float sum = tail;
  for (int u = 0; u < 8; ++u) sum += (slots[u] + slots[u + 8]) + (slots[u + 16] + slots[u + 24]);
  return sum;
}

}  // namespace tapdiff::engine
