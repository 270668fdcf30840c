// The shape of one tap row (one position), at most 4 dimensions, held inline so that
// building one for every record() call allocates nothing.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace tapdiff {

class RowShape {
public:
  static constexpr int kMaxRank = 4;

  RowShape() = default;
  RowShape(std::initializer_list<std::int64_t> dims);  // throws std::invalid_argument, rank > 4
  RowShape(const std::int64_t* dims, int rank);        // same
  explicit RowShape(const std::vector<std::int64_t>& dims);

  int rank() const { return rank_; }
  std::int64_t operator[](int i) const { return dims_[static_cast<std::size_t>(i)]; }
  std::int64_t elements() const;  // product of the dimensions; 0 for rank 0
  bool valid() const;             // rank >= 1 and every dimension >= 1
  std::vector<std::int64_t> to_vector() const;
  std::string to_string() const;  // "[14, 32]"

  friend bool operator==(const RowShape& a, const RowShape& b);
  friend bool operator!=(const RowShape& a, const RowShape& b) { return !(a == b); }

private:
  std::array<std::int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

std::string shape_string(const std::vector<std::int64_t>& dims);  // "[14, 32]"

}  // namespace tapdiff
