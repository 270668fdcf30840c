// The writer's staging pool (tracer/src/staging_pool.hpp): blocks given back are taken again,
// the smallest that holds the request, so a run's stacks stage in memory faulted in once.
#include <gtest/gtest.h>

#include "staging_pool.hpp"
#include "tap_stack.hpp"

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

// The writer writes a stack out before staging a record that does not suit its block
// (TapStack::suits_staging): rows of a later step on top of a prefill's would take a block as
// long as the prefill and as wide as every layer.
TEST(TapStackStaging, OnlyTheLayersOfOneStepWidenTheBlock) {
  constexpr std::int64_t kWidth = 8, kPrefill = 16;
  StagingPool pool;
  TapStack stack("attn_q", "attn_q", RowShape({kWidth}), pool);
  for (int layer = 0; layer < 6; ++layer) stack.add_slot(layer, layer);
  const std::vector<float> rows(kPrefill * kWidth, 1.0f);

  EXPECT_TRUE(stack.suits_staging(4, kPrefill));  // nothing staged
  stack.stage(4, 0, kPrefill, rows.data());
  EXPECT_TRUE(stack.suits_staging(5, kPrefill));  // the next layer of the same step
  stack.stage(5, 0, kPrefill, rows.data());
  EXPECT_TRUE(stack.suits_staging(3, kPrefill));  // a layer below, same rows

  EXPECT_FALSE(stack.suits_staging(0, 1));  // the next step's first layer: a wider, long block
  EXPECT_FALSE(stack.suits_staging(4, 1));  // the next step on top: a longer block
}

}  // namespace
}  // namespace tapdiff
