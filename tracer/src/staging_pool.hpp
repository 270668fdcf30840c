// Staging memory the stacks of one writer share. A stack takes a block to stage a step's rows
// and gives it back once they are written or it needs a larger one; the next stack takes what
// fits from what was given back. A run faults in about as much memory as it ever stages at
// once, not a buffer for every stack and every size each stack grew through: on these machines
// fresh memory costs more than copying rows into it (docs/guide.md, "What tracing costs").
#pragma once

#include <cstddef>
#include <vector>

#include "tapdiff/float_memory.hpp"

namespace tapdiff {

class StagingPool {
public:
  // The smallest block given back that holds `floats`, else a new one.
  FloatBuffer take(std::size_t floats);
  void give_back(FloatBuffer block);  // an empty one is dropped

private:
  std::vector<FloatBuffer> free_;
};

}  // namespace tapdiff
