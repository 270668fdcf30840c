#include "tapdiff/trace_metadata.hpp"

#include <charconv>

namespace tapdiff {

std::string FormatVersion::to_string() const {
  return std::to_string(major) + "." + std::to_string(minor);
}

std::optional<FormatVersion> FormatVersion::parse(std::string_view text) {
  const std::size_t dot = text.find('.');
  if (dot == std::string_view::npos || dot == 0 || dot + 1 == text.size()) return std::nullopt;
  FormatVersion version;
  const char* end = text.data() + dot;
  auto [p1, e1] = std::from_chars(text.data(), end, version.major);
  if (e1 != std::errc() || p1 != end) return std::nullopt;
  end = text.data() + text.size();
  auto [p2, e2] = std::from_chars(text.data() + dot + 1, end, version.minor);
  if (e2 != std::errc() || p2 != end) return std::nullopt;
  return version;
}

std::string_view producer_name(Producer producer) {
  switch (producer) {
    case Producer::reference:
      return "reference";
    case Producer::engine_host:
      return "engine-host";
    case Producer::engine_cuda:
      return "engine-cuda";
    case Producer::external:
      return "external";
    case Producer::llama_cpp:
      return "llama.cpp";
    case Producer::transformers:
      return "transformers";
  }
  return "external";
}

std::optional<Producer> parse_producer(std::string_view name) {
  for (Producer p : {Producer::reference, Producer::engine_host, Producer::engine_cuda, Producer::external,
                     Producer::llama_cpp, Producer::transformers}) {
    if (producer_name(p) == name) return p;
  }
  return std::nullopt;
}

}  // namespace tapdiff
