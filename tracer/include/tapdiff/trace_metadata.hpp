// What a trace says about the run that produced it (docs/trace-schema.md, root attributes).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tapdiff/tap_dims.hpp"
#include "tapdiff/tap_layout.hpp"

namespace tapdiff {

inline constexpr std::string_view kTraceFormatName = "tapdiff-trace";

// Readers refuse a newer major version and accept a newer minor one (new optional content).
// Format 3 stores a prompt's rows in each stack's `batch`, which a 2.x reader would not see; this
// reader reads 2.x too (every row in `data`).
struct FormatVersion {
  int major = 0;
  int minor = 0;
  std::string to_string() const;  // "2.0"
  static std::optional<FormatVersion> parse(std::string_view text);
};
inline constexpr FormatVersion kTraceFormatVersion{3, 0};
inline constexpr int kTraceOldestMajor = 2;

// llama_cpp and transformers: third-party engines tapdiff runs itself (format 2.1).
enum class Producer { reference, engine_host, engine_cuda, external, llama_cpp, transformers };
std::string_view producer_name(Producer producer);  // "engine-host"
std::optional<Producer> parse_producer(std::string_view name);

// Model hyperparameters as the producer knows them (the tracer cannot see ModelConfig).
using HParamValue = std::variant<std::int64_t, double, std::string>;
using HParams = std::map<std::string, HParamValue>;

struct TraceMetadata {
  Producer producer = Producer::external;
  std::string producer_version;
  std::string git_commit;
  std::string model_path;
  std::string model_sha256;  // 64 lowercase hex digits, or empty when unknown
  HParams hparams;
  std::string precision = "f32";
  std::string fault = "none";  // the injected fault, "none" for a clean run
  std::int64_t prompt_length = 0;
  std::vector<std::int32_t> tokens;  // (n,) token id at positions 0..n-1
  std::optional<TapDims> dims;       // lets readers check tap shapes against the catalogue
  // A lockstep run: the trace every tap point continued from (its path); "" for a normal run.
  std::string lockstep_source;
  // How the producer ran, where that changes its numbers (format 2.1, /producer_settings):
  // llama.cpp's backend, KV cache type, flash attention, threads, ...
  HParams settings;
  // Catalogue taps the producer cannot record, by short name, with the reason (format 2.1,
  // /unavailable): diff lists them as not available instead of missing.
  std::map<std::string, std::string> unavailable;
  // Taps the producer stores in another layout than the catalogue's, by short name (format 2.2,
  // /layouts; needs dims): the reader aligns their rows.
  std::map<std::string, TapLayout> layouts;
};

}  // namespace tapdiff
