// An argument check of a kernel launch or a GEMM: a shape or pointer mistake in the
// orchestration becomes std::invalid_argument("<op>: <what>"), not a wild write.
#pragma once

#include <fmt/format.h>
#include <stdexcept>
#include <type_traits>

namespace tapdiff::engine {

// what: the message, or a function that builds it. Every launch runs these checks, so a
// message with numbers in it is formatted only when its check fails.
template <class Message>
void require(bool ok, const char* op, const Message& what) {
  if (ok) return;
  if constexpr (std::is_invocable_v<Message>)
    throw std::invalid_argument(fmt::format("{}: {}", op, what()));
  else
    throw std::invalid_argument(fmt::format("{}: {}", op, what));
}

}  // namespace tapdiff::engine
