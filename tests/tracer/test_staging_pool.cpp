// The writer's staging pool (tracer/src/staging_pool.hpp): blocks given back are taken again,
// the smallest that holds the request, so a run's stacks stage in memory faulted in once.
#include <gtest/gtest.h>

#include "staging_pool.hpp"

namespace tapdiff {
namespace {

TEST(StagingPool, TakesTheSmallestBlockGivenBackThatHoldsTheRequest) {
  StagingPool pool;
  FloatBuffer small = pool.take(100), large = pool.take(1000);
  ASSERT_GE(small.capacity(), 100u);
  ASSERT_GE(large.capacity(), 1000u);
  const float* small_memory = small.data();
  const float* large_memory = large.data();
  pool.give_back(std::move(large));
  pool.give_back(std::move(small));

  FloatBuffer a = pool.take(50);  // both hold it: the smaller
  EXPECT_EQ(a.data(), small_memory);
  FloatBuffer b = pool.take(500);  // only the larger holds it
  EXPECT_EQ(b.data(), large_memory);
  FloatBuffer c = pool.take(10);  // nothing left: new memory
  EXPECT_NE(c.data(), nullptr);
  EXPECT_NE(c.data(), small_memory);
  EXPECT_NE(c.data(), large_memory);

  pool.give_back(FloatBuffer{});  // an empty buffer is not a block
  pool.give_back(std::move(a));
  EXPECT_EQ(pool.take(100).data(), small_memory);
}

}  // namespace
}  // namespace tapdiff
