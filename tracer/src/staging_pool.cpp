#include "staging_pool.hpp"

#include <utility>

namespace tapdiff {

FloatBuffer StagingPool::take(std::size_t floats) {
  std::size_t best = free_.size();
  for (std::size_t i = 0; i < free_.size(); ++i) {
    if (free_[i].capacity() >= floats && (best == free_.size() || free_[i].capacity() < free_[best].capacity()))
      best = i;
  }
  if (best == free_.size()) {
    FloatBuffer block;
    block.reserve(floats);
    return block;
  }
  FloatBuffer block = std::move(free_[best]);
  free_[best] = std::move(free_.back());
  free_.pop_back();
  return block;
}

void StagingPool::give_back(FloatBuffer block) {
  if (block.data() != nullptr) free_.push_back(std::move(block));
}

}  // namespace tapdiff
