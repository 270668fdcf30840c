#include "staging_pool.hpp"

#include <utility>

namespace tapdiff {

FloatBlock StagingPool::take(std::size_t floats) {
  std::size_t best = free_.size();
  for (std::size_t i = 0; i < free_.size(); ++i) {
    if (free_[i].capacity >= floats && (best == free_.size() || free_[i].capacity < free_[best].capacity)) best = i;
  }
  if (best == free_.size()) {
    const std::size_t capacity = allocated_floats(floats);
    return {allocate_floats(capacity), capacity};
  }
  FloatBlock block = std::move(free_[best]);
  free_[best] = std::move(free_.back());
  free_.pop_back();
  return block;
}

void StagingPool::give_back(FloatBlock block) {
  if (block.memory) free_.push_back(std::move(block));
}

}  // namespace tapdiff
