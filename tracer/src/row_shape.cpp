#include "tapdiff/row_shape.hpp"

#include <stdexcept>

namespace tapdiff {

RowShape::RowShape(std::initializer_list<std::int64_t> dims)
    : RowShape(dims.begin(), static_cast<int>(dims.size())) {}

RowShape::RowShape(const std::int64_t* dims, int rank) : rank_(rank) {
  if (rank < 0 || rank > kMaxRank) {
    throw std::invalid_argument("row shape: rank " + std::to_string(rank) + " is not in 1.." +
                                std::to_string(kMaxRank));
  }
  for (int i = 0; i < rank; ++i) dims_[static_cast<std::size_t>(i)] = dims[i];
}

RowShape::RowShape(const std::vector<std::int64_t>& dims)
    : RowShape(dims.data(), static_cast<int>(dims.size())) {}

std::int64_t RowShape::elements() const {
  if (rank_ == 0) return 0;
  std::int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[static_cast<std::size_t>(i)];
  return n;
}

bool RowShape::valid() const {
  if (rank_ < 1) return false;
  for (int i = 0; i < rank_; ++i) {
    if (dims_[static_cast<std::size_t>(i)] < 1) return false;
  }
  return true;
}

std::vector<std::int64_t> RowShape::to_vector() const {
  return {dims_.begin(), dims_.begin() + rank_};
}

std::string RowShape::to_string() const { return shape_string(to_vector()); }

bool operator==(const RowShape& a, const RowShape& b) {
  if (a.rank_ != b.rank_) return false;
  for (int i = 0; i < a.rank_; ++i) {
    if (a[i] != b[i]) return false;
  }
  return true;
}

std::string shape_string(const std::vector<std::int64_t>& dims) {
  std::string text = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(dims[i]);
  }
  return text + "]";
}

}  // namespace tapdiff
