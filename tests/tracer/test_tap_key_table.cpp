// TapKeyTable: the (name, layer) map every record's lookup uses.
#include <gtest/gtest.h>

#include <string>

#include "tapdiff/tap_key_table.hpp"

namespace tapdiff::detail {
namespace {

// Names of one length that agree in their first and last 8 bytes hash alike: the table tells
// them apart by their middle.
std::string same_hash_name(int i) { return "my_taps_" + std::to_string(1000 + i) + "__x.rope"; }

TEST(TapKeyTable, NamesThatHashAlikeStayApart) {
  ASSERT_EQ(tap_key_hash(same_hash_name(1), 3), tap_key_hash(same_hash_name(2), 3));
  TapKeyTable<int> table;
  for (int i = 0; i < 200; ++i) table.insert(same_hash_name(i), 3, i);
  EXPECT_EQ(table.size(), 200u);
  for (int i = 0; i < 200; ++i) {
    const int* v = table.find(same_hash_name(i), 3);
    ASSERT_NE(v, nullptr) << i;
    EXPECT_EQ(*v, i);
    EXPECT_EQ(table.find(same_hash_name(i), 4), nullptr) << "another layer is another key";
  }
  EXPECT_EQ(table.find(same_hash_name(200), 3), nullptr);
}

TEST(TapKeyTable, GrowsPastItsSlotsAndKeepsEveryEntry) {
  TapKeyTable<int> table;
  EXPECT_EQ(table.find("attn_q", 0), nullptr) << "an empty table finds nothing";
  for (int layer = -1; layer < 500; ++layer) {
    table.insert("attn_q", layer, layer * 2);
    table.insert("a", layer, layer * 3);
  }
  EXPECT_EQ(table.size(), 1002u);
  for (int layer = -1; layer < 500; ++layer) {
    ASSERT_NE(table.find("attn_q", layer), nullptr) << layer;
    EXPECT_EQ(*table.find("attn_q", layer), layer * 2);
    EXPECT_EQ(*table.find("a", layer), layer * 3);
  }
}

TEST(TapKeyTable, InsertReplacesAndEmptyNamesAreKeys) {
  TapKeyTable<int> table;
  table.insert("", 0, 1);
  table.insert("x", 0, 2);
  EXPECT_EQ(table.insert("", 0, 5), 5);
  EXPECT_EQ(table.size(), 2u);
  EXPECT_EQ(*table.find("", 0), 5);
  EXPECT_EQ(*table.find("x", 0), 2);
}

}  // namespace
}  // namespace tapdiff::detail
